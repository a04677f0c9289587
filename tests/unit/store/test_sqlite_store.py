"""The SQLite round store on a real file: rounds read back equal (the tick resumes exactly
where a crashed controller stopped), actions journal pending -> done/failed, and the history."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from slurm_hetsched.core.model import Node
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy, shipped_throughputs
from slurm_hetsched.rounds.clocks import SimClock
from slurm_hetsched.rounds.tick import Tick, TickSettings
from slurm_hetsched.sim.cluster import SimulatedCluster
from slurm_hetsched.sim.generate import generate_trace
from slurm_hetsched.store.codec import record_from_json, record_to_json
from slurm_hetsched.store.memory import MemoryStore
from slurm_hetsched.store.sqlite import SqliteStore, StoreError

NODES = (Node("a", {"v100": 4}), Node("b", {"p100": 4}), Node("c", {"k80": 4}))


def _tick(store, trace):  # type: ignore[no-untyped-def]
    table = shipped_throughputs()
    site = SiteData(table, shipped_gpu_types(), shipped_site_energy())
    clock = SimClock()
    cluster = SimulatedCluster(trace, NODES, table, clock)
    tick = Tick(get_policy("max_min_fairness_perf"), site, cluster, store, TickSettings())
    return tick, clock


def _trace():  # type: ignore[no-untyped-def]
    return generate_trace(12, seed=2, table=shipped_throughputs(), lam_s=0.0, mix="single")


def test_rounds_read_back_equal_and_the_tick_continues_identically(tmp_path: Path) -> None:
    # Two runs of the same rounds: one keeps its state in memory, one in SQLite reopened
    # every round (a controller restarted between rounds). They must plan the same.
    memory_tick, memory_clock = _tick(MemoryStore(), _trace())
    db = tmp_path / "state" / "hetsched.sqlite"
    sqlite_clock = None
    cluster_tick = None
    for round_ in range(6):
        if cluster_tick is None:
            cluster_tick, sqlite_clock = _tick(SqliteStore(db), _trace())
        else:
            cluster_tick.store = SqliteStore(db)
        expected = memory_tick.run_round()
        got = cluster_tick.run_round()
        assert got.plan == expected.plan
        np.testing.assert_array_equal(got.state.received_s, expected.state.received_s)
        memory_clock.sleep_until((round_ + 1) * 360.0)
        sqlite_clock.sleep_until((round_ + 1) * 360.0)  # type: ignore[union-attr]
    history = SqliteStore(db).rounds()
    assert [r.round for r in history] == [1, 2, 3, 4, 5, 6]
    assert all(r.report is not None for r in history)
    assert history[0].snapshot is not None and len(history[0].snapshot.jobs) == 12


def test_codec_round_trip_is_exact() -> None:
    tick, clock = _tick(MemoryStore(), _trace())
    tick.run_round()
    clock.sleep_until(360.0)
    record = tick.run_round()
    again = record_from_json(record_to_json(record))
    assert again.plan == record.plan
    assert again.allocation.job_ids == record.allocation.job_ids
    np.testing.assert_array_equal(again.allocation.x, record.allocation.x)
    np.testing.assert_array_equal(again.state.deficit_s, record.state.deficit_s)
    assert again.state.placements == record.state.placements
    assert again.snapshot == record.snapshot


def test_actions_are_pending_until_finished(tmp_path: Path) -> None:
    times = iter(range(100))
    store = SqliteStore(tmp_path / "s.sqlite", clock=lambda: float(next(times)))
    first = store.begin_action(3, "job-a", "101", "signal", {"signal": "USR2"})
    second = store.begin_action(3, "job-b", "102", "requeue_hold", {})
    store.finish_action(first, ok=True, outcome="ack at step 40")
    reopened = SqliteStore(tmp_path / "s.sqlite")
    pending = reopened.pending_actions()
    assert [(a.id, a.job_key, a.kind) for a in pending] == [(second, "job-b", "requeue_hold")]
    done = reopened.actions(job_key="job-a")
    assert done[0].status == "done" and done[0].outcome == "ack at step 40"
    assert done[0].detail == {"signal": "USR2"} and done[0].finished_at is not None
    reopened.finish_action(second, ok=False, outcome="slurmctld down")
    assert reopened.pending_actions() == []
    assert [a.status for a in reopened.actions(round_=3)] == ["done", "failed"]


def test_the_file_is_in_wal_mode(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "s.sqlite")
    mode = sqlite3.connect(tmp_path / "s.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_an_unwritable_place_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot open the store"):
        SqliteStore(blocker / "sub" / "s.sqlite")


def test_codec_keeps_a_jobs_measured_rates() -> None:
    from dataclasses import replace

    from slurm_hetsched.store.codec import snapshot_from_json, snapshot_to_json

    tick, _ = _tick(MemoryStore(), _trace())
    snapshot = tick.run_round().snapshot
    assert snapshot is not None
    job = replace(snapshot.jobs[0], measured_steps_per_s={"v100": 12.5})
    measured = replace(snapshot, jobs=(job, *snapshot.jobs[1:]))
    again = snapshot_from_json(snapshot_to_json(measured))
    assert again == measured and dict(again.jobs[0].measured_steps_per_s) == {"v100": 12.5}


def test_codec_keeps_a_jobs_memory_need_and_reads_older_rounds_without_one() -> None:
    from dataclasses import replace

    from slurm_hetsched.store.codec import snapshot_from_json, snapshot_to_json

    tick, _ = _tick(MemoryStore(), _trace())
    snapshot = tick.run_round().snapshot
    assert snapshot is not None
    job = replace(snapshot.jobs[0], mem_gib=13.5)
    needy = replace(snapshot, jobs=(job, *snapshot.jobs[1:]))
    stored = snapshot_to_json(needy)
    again = snapshot_from_json(stored)
    assert again == needy and again.jobs[0].mem_gib == 13.5
    for old in stored["jobs"]:
        del old["mem_gib"]  # as a store written before the field existed holds it
    assert all(j.mem_gib is None for j in snapshot_from_json(stored).jobs)


def test_key_bindings_and_set_aside_jobs_survive_a_reopen(tmp_path: Path) -> None:
    db = tmp_path / "rounds.sqlite"
    store = SqliteStore(db)
    binding = {
        "key": "train",
        "uid": 1000,
        "user": "alice",
        "job_id": "17",
        "submit_s": 5.0,
        "bound_s": 6.0,
        "ended_s": None,
    }
    store.save_key_bindings([binding, {**binding, "key": "17", "ended_s": 9.5}])
    aside = {"job": "k#1", "comment": "hetsched:x", "reason": "why", "round": 3}
    store.save_set_aside([aside])
    store.close()
    again = SqliteStore(db)
    assert sorted(again.key_bindings(), key=lambda r: r["key"]) == [
        {**binding, "key": "17", "ended_s": 9.5},
        binding,
    ]
    assert again.set_aside() == [aside]
    again.save_key_bindings([])
    assert again.key_bindings() == [], "saving replaces every binding"
    again.close()


def test_a_plans_set_aside_jobs_read_back(tmp_path: Path) -> None:
    from slurm_hetsched.core.model import RoundPlan
    from slurm_hetsched.store.codec import plan_from_json, plan_to_json

    plan = RoundPlan(round=3, set_aside={"j5": "the policy fails with this job alone"})
    assert plan_from_json(json.loads(json.dumps(plan_to_json(plan)))) == plan
    old = plan_to_json(RoundPlan(round=2))
    del old["set_aside"]
    assert plan_from_json(old).set_aside == {}, "rounds stored before the field read back"


def test_restart_samples_and_watched_moves_survive_a_reopen(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    store.save_restart_samples({"101": ([8.5, 7.25], 2), "k#1": ([30.0], 9)})
    move = {
        "job": "101",
        "round": 7,
        "job_id": "101",
        "restart_count": 1,
        "signal_s": 1000.5,
        "release_s": 1004.0,
        "ack_step": None,
    }
    store.save_restart_moves([move])
    store.close()
    again = SqliteStore(tmp_path / "s.sqlite")
    try:
        assert again.restart_samples() == {"101": ([8.5, 7.25], 2), "k#1": ([30.0], 9)}
        assert again.restart_moves() == [move]
        again.save_restart_moves([])
        assert again.restart_moves() == [], "saving replaces every row"
    finally:
        again.close()


def test_oasis_schedules_survive_a_reopen_and_the_rounds_plan_the_same(tmp_path: Path) -> None:
    """A reservation policy's schedules are in the round record: a controller restarted
    between rounds (the store reopened) keeps every admitted schedule and plans as one that
    never stopped."""

    def tick(store):  # type: ignore[no-untyped-def]
        table = shipped_throughputs()
        site = SiteData(table, shipped_gpu_types(), shipped_site_energy())
        clock = SimClock()
        cluster = SimulatedCluster(_trace(), NODES, table, clock)
        return Tick(get_policy("oasis"), site, cluster, store, TickSettings()), clock

    memory_tick, memory_clock = tick(MemoryStore())
    db = tmp_path / "hetsched.sqlite"
    sqlite_tick, sqlite_clock = tick(SqliteStore(db))
    for round_ in range(4):
        sqlite_tick.store = SqliteStore(db)
        expected = memory_tick.run_round()
        got = sqlite_tick.run_round()
        assert got.plan == expected.plan
        assert got.allocation.reservations == expected.allocation.reservations
        assert got.allocation.reservations, "oasis admitted nothing"
        memory_clock.sleep_until((round_ + 1) * 360.0)
        sqlite_clock.sleep_until((round_ + 1) * 360.0)
    last = SqliteStore(db).rounds()[-1]
    assert last.allocation.reservations == expected.allocation.reservations
    assert record_from_json(record_to_json(last)).allocation.reservations == (
        last.allocation.reservations
    )
