"""Restart costs in the live controller (controller/restarts.py): a move enacted on the recorded
Slurm fake and journaled in a real SQLite store is watched; the next observation reads the new
run's progress.json through the real checks and takes the sample the journal's own times give;
the estimate reaches the snapshot, survives store reopens, and `hetsched status` shows it."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controller_builders import TABLE, placement, running, slurm_job, slurm_node
from enact_rig import Rig, make_rig

from slurm_hetsched.cli import main
from slurm_hetsched.controller import commands
from slurm_hetsched.controller.jobview import SlurmView
from slurm_hetsched.controller.keys import KeyBinding
from slurm_hetsched.controller.live import SlurmCluster
from slurm_hetsched.controller.observer import ObserveSettings
from slurm_hetsched.controller.restart_cost import RestartEstimate, RestartSettings
from slurm_hetsched.controller.restart_watch import WatchedMove
from slurm_hetsched.controller.restarts import RestartTracker
from slurm_hetsched.core.model import ClusterSnapshot, RoundPlan
from slurm_hetsched.slurm.records import SlurmJob, SlurmNode
from slurm_hetsched.slurm.version import SlurmVersion
from slurm_hetsched.store.sqlite import SqliteStore

NODES = [slurm_node("n1", {"v100": 2}), slurm_node("n2", {"p100": 2})]


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    rig = make_rig(tmp_path)
    monkeypatch.setattr(rig.backend, "list_nodes", lambda: NODES)  # sinfo is not recorded
    yield rig
    assert not rig.slurm.surprises, "the fake was asked something it has no recording of"


def cluster_on(rig: Rig, store: SqliteStore, *, save: bool = True) -> SlurmCluster:
    """The live backend over the fake, journaling into `store`, on the rig's clock."""
    return SlurmCluster(
        rig.backend,
        rig.enactor(journal=store),
        store,
        lambda: None,
        TABLE,
        ObserveSettings(state_root=rig.root),
        registry=store,
        restarts=RestartTracker(store, RestartSettings(), save=save),
        clock=rig.clock,
    )


def move_job_101(rig: Rig, store: SqliteStore) -> None:
    """Round 7 moves job 101 from p100 on n2 to v100 on n1: its checkpoint (step 120) is acked
    3 s after the signal, and Slurm shows it requeued after two more looks."""
    rig.slurm.add_running("101", "n2", "p100")
    rig.wrapper.delays["101"] = 3.0
    rig.slurm.requeue_polls = 2
    cluster = cluster_on(rig, store)
    observed = cluster.observe()
    cluster.enact(RoundPlan(round=7, move={"101": placement("101", ("n1", "v100", 1))}), observed)
    assert cluster.last.outcome.moved == ["101"]


def report_training(rig: Rig, **fields: Any) -> None:
    """Slurm starts the released run on n1 and it writes its progress report."""
    rig.slurm.start("101", "n1")
    rig.slurm.jobs["101"]["nodes"] = "n1"
    payload = {
        "job_key": "101",
        "job_id": "101",
        "restart_count": 1,
        "step": 160,
        "total_steps": 20000,
        "steps_per_s": 4.0,
        "gpu_type": "v100",
        "num_gpus": 1,
        "node": "n1",
        "status": "running",
    } | fields
    (rig.folder("101") / "progress.json").write_text(json.dumps(payload))


def journal_times(store: SqliteStore) -> tuple[float, float]:
    """(signal journaled, release done) of job 101's move, from the store's journal."""
    actions = store.actions(job_key="101")
    signal = next(a for a in actions if a.kind == "signal" and a.status == "done")
    release = [a for a in actions if a.kind == "release" and a.status == "done"][-1]
    assert release.finished_at is not None
    return signal.created_at, release.finished_at


def test_a_move_is_watched_measured_and_kept_across_store_reopens(rig: Rig, tmp_path: Path) -> None:
    path = tmp_path / "rounds.sqlite"
    store = SqliteStore(path, clock=rig.clock)
    move_job_101(rig, store)
    signal_s, release_s = journal_times(store)
    assert release_s > signal_s
    assert store.restart_moves() == [
        {
            "job": "101",
            "round": 7,
            "job_id": "101",
            "restart_count": 1,
            "signal_s": signal_s,
            "release_s": release_s,
            "ack_step": 120,
        }
    ]
    assert store.restart_samples() == {}
    store.close()  # the controller restarts before the new run reports

    # The new run trains: 40 steps past the acked 120 at 4 steps/s, reported 30 s after the
    # release, so it began 20 s after the release; the round sees it 40 s after the release.
    rig.clock.now = release_s + 40.0
    report_training(rig, updated_at=release_s + 30.0)
    expected = release_s + 20.0 - signal_s
    store = SqliteStore(path, clock=rig.clock)
    view = cluster_on(rig, store).read_view(None)
    (job,) = view.snapshot.jobs
    assert job.key == "101" and job.restart_s == pytest.approx(expected)
    assert store.restart_samples() == {"101": ([pytest.approx(expected)], 1)}
    assert store.restart_moves() == [], "measured once, not again next round"
    store.close()

    store = SqliteStore(path, clock=rig.clock)
    cluster = cluster_on(rig, store)
    (job,) = cluster.read_view(None).snapshot.jobs
    assert job.restart_s == pytest.approx(expected)
    assert cluster.restarts is not None
    assert cluster.restarts.estimates["101"] == RestartEstimate(
        pytest.approx(expected), "measured", 1
    )
    store.close()


def test_a_hostile_report_moves_the_sample_only_within_the_journals_bounds(
    rig: Rig, tmp_path: Path
) -> None:
    """A report claiming the run trained long before its release gives the release's time:
    the controller's own signal-to-release, never zero."""
    store = SqliteStore(tmp_path / "rounds.sqlite", clock=rig.clock)
    move_job_101(rig, store)
    signal_s, release_s = journal_times(store)
    rig.clock.now = release_s + 40.0
    report_training(
        rig, step=10**12, total_steps=10**12, steps_per_s=1e-300, updated_at=release_s + 30.0
    )
    (job,) = cluster_on(rig, store).read_view(None).snapshot.jobs
    assert job.restart_s == pytest.approx(release_s - signal_s) and job.restart_s > 0
    store.close()


def test_status_and_dry_runs_measure_in_memory_and_keep_nothing(rig: Rig, tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "rounds.sqlite", clock=rig.clock)
    move_job_101(rig, store)
    _, release_s = journal_times(store)
    moves = store.restart_moves()
    rig.clock.now = release_s + 40.0
    report_training(rig, updated_at=release_s + 30.0)
    cluster = cluster_on(rig, store, save=False)
    (job,) = cluster.read_view(None).snapshot.jobs
    assert job.restart_s is not None
    assert store.restart_moves() == moves and store.restart_samples() == {}
    store.close()


def test_a_stop_is_not_watched(rig: Rig, tmp_path: Path) -> None:
    """A stopped job's restart includes its wait in the queue: no move to time."""
    store = SqliteStore(tmp_path / "rounds.sqlite", clock=rig.clock)
    rig.slurm.add_running("101", "n2", "p100")
    cluster = cluster_on(rig, store)
    observed = cluster.observe()
    cluster.enact(RoundPlan(round=7, stop=("101",)), observed)
    assert cluster.last.outcome.stopped == ["101"]
    assert store.restart_moves() == []
    store.close()


# -- the tracker alone -------------------------------------------------------------------------


def empty_view(now_s: float, **fields: Any) -> SlurmView:
    snapshot = ClusterSnapshot(now_s=now_s, nodes=(), jobs=())
    return SlurmView(now_s=now_s, managed={}, rejected=(), nodes=(), snapshot=snapshot, **fields)


def test_a_newer_move_replaces_one_not_measured_yet(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "rounds.sqlite", clock=lambda: 1000.0)
    for round_, restart in ((7, 0), (8, 1)):
        for kind in ("signal", "ack", "release"):
            detail = {"restart_count": restart} if kind == "signal" else {}
            action = store.begin_action(round_, "101", "101", kind, detail)
            store.finish_action(action, True, "step 50 in ckpt-50" if kind == "ack" else "")
        RestartTracker(store, RestartSettings()).moved(round_, ["101"])
    (row,) = store.restart_moves()
    assert (row["round"], row["restart_count"], row["ack_step"]) == (8, 2, 50)
    store.close()


def test_a_jobs_samples_are_forgotten_when_its_key_is_free_again(tmp_path: Path) -> None:
    """Key 102 is still bound (its job left recently), 101 is free: the next job keyed 101 may
    be another user's, and starts from the defaults. A watched move of a job that left is
    settled without a sample."""
    store = SqliteStore(tmp_path / "rounds.sqlite")
    store.save_restart_samples({"101": ([8.0], 1), "102#1": ([9.0], 2)})
    move = WatchedMove(7, "101", 1, signal_s=1.0, release_s=2.0, ack_step=None)
    store.save_restart_moves([{"job": "101"} | dataclasses.asdict(move)])
    bound = {"102": KeyBinding("102", 1000, "alice", "102", 1.0, 1.0, ended_s=4000.0)}
    RestartTracker(store, RestartSettings()).observe(empty_view(5000.0, key_bindings=bound))
    assert store.restart_samples() == {"102#1": ([9.0], 2)}
    assert store.restart_moves() == []
    store.close()


# -- hetsched status -----------------------------------------------------------------------------


class FakeSlurm:
    """The two calls `hetsched status` makes, answered from builders."""

    def __init__(self, jobs: list[SlurmJob], nodes: list[SlurmNode]) -> None:
        self.jobs = jobs
        self.nodes = nodes

    def list_jobs(self) -> list[SlurmJob]:
        return self.jobs

    def list_nodes(self) -> list[SlurmNode]:
        return self.nodes

    def version(self) -> SlurmVersion:
        return SlurmVersion(22, 5, 8)


def test_status_shows_each_jobs_restart_cost_and_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    resnet = "ResNet-50 (batch size 64)"
    config = tmp_path / "hetsched.toml"
    config.write_text(
        '[controller]\nstore = "rounds.sqlite"\nstate_root = "state"\n'
        f'[moves]\nrestart_s = 25.0\nrestart_s_by_class = {{ "{resnet}" = 60.0 }}\n'
    )
    (tmp_path / "state").mkdir(mode=0o711)
    store = SqliteStore(tmp_path / "rounds.sqlite")
    store.save_restart_samples({"302": ([7.5, 8.5], 4)})
    store.close()
    a3c = "hetsched:class=A3C;steps=100"
    jobs = [
        running("301", "n1", "v100", user_id=os.getuid()),
        running("302", "n2", "p100", comment=a3c, user_id=os.getuid()),
        slurm_job("303", comment=a3c, user_id=os.getuid()),
    ]
    monkeypatch.setattr(commands, "CliSlurmBackend", lambda cli: FakeSlurm(jobs, NODES))
    assert main(["status", "--config", str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Slurm 22.05.8 (commands on PATH)"
    header = next(line for line in out if line.startswith("KEY "))
    assert header.split() == [
        "KEY", "JOBID", "USER", "STATE", "CLASS", "GPUS", "RESTART", "TARGET", "SHARE",
    ]  # fmt: skip
    rows = {line.split()[0]: line for line in out if line[:3] in ("301", "302", "303")}
    column = header.index("RESTART")
    restart = {key: line[column : column + 20].strip() for key, line in rows.items()}
    assert restart == {
        "301": "60.0s class default",
        "302": "8.0s measured 4x",
        "303": "25.0s default",
    }
    reopened = SqliteStore(tmp_path / "rounds.sqlite")
    assert reopened.restart_samples() == {"302": ([7.5, 8.5], 4)}, "status writes nothing"
    reopened.close()
