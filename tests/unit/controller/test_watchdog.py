"""`hetsched watchdog`: the verdict from the heartbeat's age and the controller's lock (`judge`,
with an injected clock), the hand-back it runs when the controller is gone and only then, the
heartbeat the service records after every round, and the `watchdog.after_s` setting."""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path

import pytest
from controller_builders import held

from slurm_hetsched.cli import main
from slurm_hetsched.controller.commands import service_settings
from slurm_hetsched.controller.config import ConfigError, ControllerConfig, load_config
from slurm_hetsched.controller.dry_run import DryRunController
from slurm_hetsched.controller.service import Controller, SingleControllerLock
from slurm_hetsched.controller.watchdog import _when, judge, run_watchdog
from slurm_hetsched.slurm.records import JobUpdate, SlurmJob
from slurm_hetsched.store.sqlite import Heartbeat, SqliteStore

NOW = 1_700_000_000.0
AFTER = 900.0


def beat(age_s: float, round_: int | None = 12) -> Heartbeat:
    return Heartbeat(NOW - age_s, 4242, "ctl-host", round_)


@pytest.mark.parametrize(
    ("heartbeat", "written_age_s", "lock_held", "hand_back", "says"),
    [
        (beat(10), None, True, False, "controller alive: pid 77 holds its lock"),
        (beat(5000), None, True, False, "may hang"),
        (None, None, False, False, "no controller has run with this store"),
        (beat(899), None, False, False, "handed back after 900 s of silence"),
        (beat(900), None, False, True, "silent since"),
        (beat(5000), None, False, True, "round 12"),
        (None, 3600.0, False, True, "silent since"),  # a store of a version without beats
        (None, 60.0, False, False, "last heard from"),
        (beat(-30), None, False, False, "(0 s ago)"),  # a clock behind the controller's
    ],
)
def test_the_verdict(
    heartbeat: Heartbeat | None,
    written_age_s: float | None,
    lock_held: bool,
    hand_back: bool,
    says: str,
) -> None:
    verdict = judge(
        now_s=NOW,
        after_s=AFTER,
        beat=heartbeat,
        last_written_s=None if written_age_s is None else NOW - written_age_s,
        lock_holder=77,
        lock_held=lock_held,
    )
    assert verdict.hand_back is hand_back
    assert says in verdict.message
    if hand_back:
        last = heartbeat.at_s if heartbeat else NOW - (written_age_s or 0)
        assert verdict.reason == f"controller silent since {_when(last)}"


class FakeSlurm:
    def __init__(self, jobs: list[SlurmJob]) -> None:
        self.jobs = jobs
        self.calls: list[tuple[str, str]] = []

    def list_jobs(self, job_ids: object = None) -> list[SlurmJob]:
        self.calls.append(("list", ""))
        return self.jobs

    def release(self, job_id: str) -> None:
        self.calls.append(("release", job_id))

    def update(self, job_id: str, update: JobUpdate) -> None:
        self.calls.append(("update", update.admin_comment or ""))


def _config(tmp_path: Path) -> ControllerConfig:
    return ControllerConfig(store=tmp_path / "rounds.sqlite", state_root=tmp_path / "state")


def _store_with_beat(config: ControllerConfig, at_s: float) -> None:
    store = SqliteStore(config.store)
    store.beat(at_s, 12)
    store.close()


def test_a_silent_controller_s_jobs_are_handed_back(tmp_path: Path) -> None:
    config = _config(tmp_path)
    _store_with_beat(config, NOW - 3600)
    slurm = FakeSlurm([held("1")])
    out = io.StringIO()
    status = run_watchdog(config, after_s=AFTER, out=out, slurm=slurm, clock=lambda: NOW)
    assert status == 0, out.getvalue()
    since = _when(NOW - 3600)
    assert slurm.calls == [
        ("list", ""),
        ("release", "1"),
        ("update", f"hetsched handed-back: controller silent since {since}"),
    ]
    assert out.getvalue().startswith("watchdog: controller not running and silent since")
    store = SqliteStore(config.store)
    try:
        assert [(a.kind, a.status, a.round) for a in store.actions()] == [("handback", "done", 0)]
    finally:
        store.close()


def test_a_controller_heard_from_recently_is_waited_for(tmp_path: Path) -> None:
    config = _config(tmp_path)
    _store_with_beat(config, NOW - 60)
    slurm = FakeSlurm([held("1")])
    out = io.StringIO()
    assert run_watchdog(config, after_s=AFTER, out=out, slurm=slurm, clock=lambda: NOW) == 0
    assert slurm.calls == [] and "last heard from" in out.getvalue()


def test_a_controller_holding_its_lock_is_never_overruled(tmp_path: Path) -> None:
    config = _config(tmp_path)
    _store_with_beat(config, NOW - 3600)  # stale, yet the lock is held: it may hang, not gone
    slurm = FakeSlurm([held("1")])
    out = io.StringIO()
    with SingleControllerLock(config.lock_path):
        status = run_watchdog(config, after_s=AFTER, out=out, slurm=slurm, clock=lambda: NOW)
    assert status == 0 and slurm.calls == []
    assert f"controller alive: pid {os.getpid()} holds its lock" in out.getvalue()
    assert "may hang" in out.getvalue()


def test_without_a_store_nothing_is_touched_or_created(tmp_path: Path) -> None:
    config = _config(tmp_path)
    slurm = FakeSlurm([held("1")])
    out = io.StringIO()
    assert run_watchdog(config, after_s=0.0, out=out, slurm=slurm, clock=lambda: NOW) == 0
    assert slurm.calls == [] and "no store at" in out.getvalue()
    assert not config.store.exists() and not config.lock_path.exists()


def test_the_service_beats_after_every_round_and_a_dry_run_never(tmp_path: Path) -> None:
    # No Slurm here (an empty bin folder): every round is skipped, and still beats.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    config = dataclasses.replace(_config(tmp_path), bin_dir=str(bin_dir), retries=0)
    dry = DryRunController(service_settings(config))
    try:
        dry.serve(once=True)
    finally:
        dry.close()
    assert not config.store.exists(), "a dry run has no store to beat in"
    controller = Controller(service_settings(config))
    try:
        controller.serve(once=True)
        first = controller.store.last_beat()
        controller.serve(once=True)
        second = controller.store.last_beat()
    finally:
        controller.close()
    assert first is not None and second is not None
    assert first.pid == os.getpid() and first.round is None, "a skipped round has no number"
    assert second.at_s >= first.at_s


def test_the_limit_comes_from_the_config_else_three_rounds_or_15_minutes(tmp_path: Path) -> None:
    assert ControllerConfig(round_s=60.0).watchdog_after() == 900.0
    assert ControllerConfig().watchdog_after() == 1080.0, "3 rounds of the default 360 s"
    path = tmp_path / "hetsched.toml"
    path.write_text("[watchdog]\nafter_s = 1200\n")
    assert load_config(path).watchdog_after() == 1200.0
    path.write_text("[watchdog]\nafter_s = 0\n")
    with pytest.raises(ConfigError, match=r"watchdog.after_s: expected a number > 0"):
        load_config(path)


def test_the_commands_refuse_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "hetsched.toml"
    config.write_text(f'[controller]\nstore = "{tmp_path / "rounds.sqlite"}"\n')
    assert main(["handback", "--config", str(config), "--reason", "  "]) == 1
    assert "--reason must not be empty" in capsys.readouterr().err
    assert main(["watchdog", "--config", str(config), "--after", "-5"]) == 1
    assert "--after -5.0: expected a number of seconds >= 0" in capsys.readouterr().err
    assert main(["watchdog", "--config", str(config)]) == 0
    assert "no controller has run with this config" in capsys.readouterr().out
