"""Which holds the controller lifts when it hands a refused job back to Slurm, and a dry run
that leaves no store behind."""

from __future__ import annotations

from pathlib import Path

from controller_builders import held, slurm_job

from slurm_hetsched.controller.commands import service_settings
from slurm_hetsched.controller.config import ControllerConfig
from slurm_hetsched.controller.dry_run import DryRunController
from slurm_hetsched.controller.round_report import hold_is_ours
from slurm_hetsched.slurm.records import JobState


def test_the_submission_hold_and_any_hold_of_a_job_managed_before_are_ours() -> None:
    assert hold_is_ours(held("1")), "the template's --hold, first time seen"
    requeued = slurm_job(
        "2",
        state=JobState.PENDING,
        reason="job_requeued_in_held_state",
        admin_comment="hetsched r=7 - share=k80:1 prio=2 stopped:queued",
    )
    assert hold_is_ours(requeued), "the controller's own requeue-hold of a job it managed"
    admin = slurm_job("3", state=JobState.PENDING, reason="JobHeldAdmin")
    assert not hold_is_ours(admin), "an admin's hold on a job the controller never managed"
    handed_back = held("4", admin_comment="hetsched not-managed: unknown key 'stepz'")
    assert not hold_is_ours(handed_back), "a hold the user set after the hand-back is theirs"
    given_back = held("5", admin_comment="hetsched handed-back: controller silent")
    assert not hold_is_ours(given_back), "a hold set after `hetsched handback` is the user's"


def test_a_dry_run_creates_no_store(tmp_path: Path) -> None:
    store = tmp_path / "var" / "rounds.sqlite"
    config = ControllerConfig(store=store, state_root=tmp_path / "state")
    controller = DryRunController(service_settings(config))
    try:
        assert controller._last_record() is None
    finally:
        controller.close()
    assert not store.exists() and not store.parent.exists()
