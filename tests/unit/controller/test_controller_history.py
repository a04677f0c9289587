"""`hetsched rounds`: the history table of rounds and actions, read back from a real SQLite
store filled through its API (rounds saved as the tick saves them, actions journaled as the
enactment journals them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from controller_builders import placement, round_record

from slurm_hetsched.cli import main
from slurm_hetsched.controller.history import format_rounds
from slurm_hetsched.core.ports import RoundRecord
from slurm_hetsched.store.sqlite import SqliteStore

T0 = 1_790_000_000.0
SHARES = {"j1": {"v100": 0.61, "p100": 0.39}, "j2": {"k80": 1.0}}


def when(now_s: float) -> str:
    return datetime.fromtimestamp(now_s).isoformat(sep=" ", timespec="seconds")


def with_restart(record: RoundRecord, job: str, restart_s: float) -> RoundRecord:
    """The round with `job`'s restart cost in its snapshot, as the live controller fills it."""
    assert record.snapshot is not None
    jobs = tuple(
        dataclasses.replace(j, restart_s=restart_s) if j.key == job else j
        for j in record.snapshot.jobs
    )
    return dataclasses.replace(record, snapshot=dataclasses.replace(record.snapshot, jobs=jobs))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    """Three rounds: j1 and j2 start; j2 is moved (its requeue fails); j1 is stopped, and the
    controller dies before that round is enacted. From round 2 on, j2 has a measured restart
    cost of 8.3 s in the snapshot; j1 has none (the default)."""
    db = SqliteStore(tmp_path / "rounds.sqlite", clock=lambda: T0)
    first = round_record(
        1,
        T0,
        SHARES,
        start={
            "j1": placement("j1", ("n1", "v100", 2)),
            "j2": placement("j2", ("n3", "k80", 1)),
        },
        priority={"j1": 1.8, "j2": 1.0},
        recomputed=True,
        solve_s=0.05,
    )
    db.save_planned(first)
    for key, job_id, kind in (
        ("j1", "101", "update"),
        ("j1", "101", "release"),
        ("j2", "102", "release"),
    ):
        db.finish_action(db.begin_action(1, key, job_id, kind, {}), True)
    db.save_enacted(first)

    second = round_record(
        2,
        T0 + 360,
        SHARES,
        keep={"j1": placement("j1", ("n1", "v100", 2))},
        move={"j2": placement("j2", ("n2", "p100", 1))},
        priority={"j1": 1.2, "j2": 2.5},
        failed={"j2": "requeue_hold failed: Slurm said no"},
    )
    second = with_restart(second, "j2", 8.3)
    db.save_planned(second)
    db.finish_action(db.begin_action(2, "j2", "102", "signal", {"signal": "USR2"}), True)
    db.finish_action(db.begin_action(2, "j2", "102", "ack", {}), False, "no ack within 30 s")
    db.finish_action(db.begin_action(2, "j2", "102", "requeue_hold", {}), False, "Slurm said no")
    db.save_enacted(second)

    third = round_record(
        3,
        T0 + 720,
        SHARES,
        keep={"j2": placement("j2", ("n3", "k80", 1))},
        stop=("j1",),
        priority={"j1": 0.9, "j2": 1.1},
        enacted=False,
    )
    third = with_restart(third, "j2", 8.3)
    db.save_planned(third)
    db.begin_action(3, "j1", "101", "signal", {"signal": "USR2"})  # never finished
    yield db
    db.close()


def test_the_round_table(store: SqliteStore) -> None:
    lines = format_rounds(store.rounds(), store.actions()).splitlines()
    assert lines[0].split() == [
        "ROUND", "TIME", "POLICY", "SOLVED", "JOBS", "PLACED", "KEPT", "MOVED", "STARTED",
        "STOPPED", "FAILED",
    ]  # fmt: skip
    rows = [line.split() for line in lines[1:]]
    date, time = when(T0).split()
    assert rows[0] == ["1", date, time, "max_min_fairness_perf", "yes", "2", "2", "0", "0", "2",
                       "0", "0"]  # fmt: skip
    assert rows[1][3:] == ["max_min_fairness_perf", "no", "2", "2", "1", "1", "0", "0", "1"]
    assert rows[2][:1] == ["3"] and lines[3].endswith("(not enacted: interrupted)")
    assert rows[2][4:12] == ["no", "2", "1", "1", "0", "0", "1", "0"]
    assert len(lines) == 4


def test_the_round_table_of_the_last_rounds(store: SqliteStore) -> None:
    lines = format_rounds(store.rounds(last=2), store.actions()).splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["2", "3"]


def test_one_jobs_rounds_with_its_actions(store: SqliteStore) -> None:
    text = format_rounds(store.rounds(), store.actions(job_key="j2"), job="j2")
    lines = text.splitlines()
    assert lines[0].split() == ["ROUND", "TIME", "TARGET", "SHARE", "PRIO", "RESTART", "ACTIONS"]
    assert lines[1] == (
        f"    1  {when(T0)}  {'k80x1@n3':<22} {'k80:1':<26} {'1':>6} {'default':>8}  "
        "start: release:done"
    )
    assert lines[2].split()[3:] == [
        "p100x1@n2", "k80:1", "2.5", "8.3s", "move:", "signal:done,", "ack:failed", "(no", "ack",
        "within", "30", "s),", "requeue_hold:failed", "(Slurm", "said", "no)",
    ]  # fmt: skip
    assert lines[3].split()[3:] == ["k80x1@n3", "k80:1", "1.1", "8.3s", "keep"]
    assert len(lines) == 4


def test_a_stopped_job_shows_its_share_and_the_stop(store: SqliteStore) -> None:
    lines = format_rounds(store.rounds(), store.actions(job_key="j1"), job="j1").splitlines()
    assert lines[1].split()[3:] == [
        "v100x2@n1", "v100:.61,p100:.39", "1.8", "default", "start:", "update:done,",
        "release:done",
    ]  # fmt: skip
    assert lines[2].split()[3:] == ["v100x2@n1", "v100:.61,p100:.39", "1.2", "default", "keep"]
    assert lines[3].split()[3:] == [
        "-", "v100:.61,p100:.39", "0.9", "default", "stop:", "signal:pending",
    ]  # fmt: skip


def test_a_job_in_no_round(store: SqliteStore) -> None:
    text = format_rounds(store.rounds(), store.actions(), job="j9")
    assert text == "job 'j9' appears in none of these rounds"


def test_no_rounds_yet() -> None:
    assert format_rounds([], []) == "no rounds recorded yet"
    assert format_rounds([], [], job="j1") == "no rounds recorded yet"


def test_hetsched_rounds_prints_the_store(
    store: SqliteStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "hetsched.toml"
    config.write_text('[controller]\nstore = "rounds.sqlite"\n')
    assert main(["rounds", "--config", str(config), "--last", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ROUND") and len(out) == 2 and out[1].split()[0] == "3"
    assert main(["rounds", "--config", str(config), "--job", "j2", "--last", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    # Only the actions of the rounds shown: round 1's release is left out.
    assert [line.split()[0] for line in out[1:]] == ["2", "3"]
    assert "release:done" not in "\n".join(out)


def test_a_job_missing_from_a_rounds_snapshot_shows_no_restart_cost(store: SqliteStore) -> None:
    """A round whose snapshot does not hold the job (it was only stopped, or the record has no
    snapshot) shows '-', not a default it was never given."""
    last = store.rounds()[-1]
    assert last.snapshot is not None
    without = dataclasses.replace(last, snapshot=dataclasses.replace(last.snapshot, jobs=()))
    line = format_rounds([without], store.actions(job_key="j1"), job="j1").splitlines()[1]
    assert line.split()[3:6] == ["-", "v100:.61,p100:.39", "0.9"] and line.split()[6] == "-"
