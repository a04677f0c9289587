"""Which jobs `hetsched handback` gives back to Slurm and what each takes (`plan_handback`):
one row per situation, the expected untargeting, release, comment and notes in the row."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from controller_builders import SPEC, TZ, held, running, slurm_job

from slurm_hetsched.controller.handback import (
    HandbackItem,
    Resume,
    format_handback_comment,
    plan_handback,
)
from slurm_hetsched.controller.round_report import hold_is_ours
from slurm_hetsched.controller.scope import Scope
from slurm_hetsched.slurm.records import JobState, SlurmJob

REASON = "controller retired"
COMMENT = "hetsched handed-back: controller retired"
MANAGED = "hetsched r=7 v100x1@n1 share=v100:1 prio=1 started"
NOW = 1_000_000.0


def targeted(job: SlurmJob, features: str, nodes: str) -> SlurmJob:
    return dataclasses.replace(job, features=features, required_nodes=nodes)


def plan_of(*jobs: SlurmJob, scope: Scope | None = None) -> dict[str, HandbackItem]:
    items = plan_handback(jobs, scope or Scope(), REASON, now_s=NOW, local_tz=TZ)
    return {item.job_id: item for item in items}


CASES: list[tuple[str, SlurmJob, dict[str, Any]]] = [
    (
        "the template's submission hold on a job the controller never saw",
        held("1"),
        {"untarget": (), "release": True, "comment": COMMENT, "resume": None},
    ),
    (
        "requeue-held and retargeted by a controller that stopped mid-move",
        targeted(
            slurm_job("2", reason="job_requeued_in_held_state", admin_comment=MANAGED),
            "v100",
            "n1",
        ),
        {"untarget": ("2",), "release": True, "comment": COMMENT},
    ),
    (
        "released onto its target, waiting for it",
        targeted(slurm_job("3", reason="Resources", admin_comment=MANAGED), "p100", "n2"),
        {"untarget": ("3",), "release": False, "comment": COMMENT},
    ),
    (
        "a target the user asked for on a job the controller never placed stays",
        targeted(held("4"), "v100", "n1"),
        {"untarget": (), "release": True},
    ),
    (
        "the controller's hold on a job that started anyway (priority 0 while it runs)",
        running("5", "n1", "v100", reason="JobHeldAdmin", admin_comment=MANAGED, group_id=50),
        {"untarget": (), "release": True, "resume": Resume(1000, 50, "5", 0)},
    ),
    (
        "a hold the user set after an earlier hand-back is theirs",
        held("6", admin_comment="hetsched handed-back: maintenance"),
        {
            "release": False,
            "comment": COMMENT,
            "notes": ("left held: the hold (JobHeldUser) is not the controller's",),
        },
    ),
    (
        "an admin's hold on a job the controller never managed",
        slurm_job("7", reason="JobHeldAdmin"),
        {
            "release": False,
            "notes": ("left held: the hold (JobHeldAdmin) is not the controller's",),
        },
    ),
    (
        "handed back before with this reason: nothing left to do",
        slurm_job("8", reason="Priority", admin_comment=COMMENT),
        {"untarget": (), "release": False, "comment": None, "resume": None},
    ),
    (
        "ending: left alone",
        slurm_job("9", state=JobState.COMPLETING, admin_comment=MANAGED),
        {"untarget": (), "release": False, "comment": None, "notes": ("ending",)},
    ),
]


@pytest.mark.parametrize(("situation", "job", "expected"), CASES, ids=[c[0] for c in CASES])
def test_what_each_job_takes(situation: str, job: SlurmJob, expected: dict[str, Any]) -> None:
    item = plan_of(job)[job.job_id]
    got = {name: getattr(item, name) for name in expected}
    assert got == expected, situation


def test_a_running_job_keeps_its_target_and_is_told_to_train_on() -> None:
    job = targeted(running("4", "n1", "v100", admin_comment=MANAGED), "v100", "n1")
    item = plan_of(job)["4"]
    assert item.untarget == () and not item.release
    assert item.comment == COMMENT + " [target kept while running]", "marked for a later run"
    assert item.resume == Resume(1000, None, "4", 0)
    assert item.notes == ("keeps Features/ReqNodeList while it runs (Slurm refuses the change)",)


def test_a_target_kept_while_running_is_cleared_once_slurm_requeued_the_job() -> None:
    requeued = targeted(
        slurm_job(
            "4",
            reason="BeginTime",
            admin_comment="hetsched handed-back: before [target kept while running]",
        ),
        "v100",
        "n1",
    )
    item = plan_of(requeued)["4"]
    assert item.untarget == ("4",) and item.comment == COMMENT
    # Without the mark, Features set after the hand-back are the user's own.
    users = targeted(slurm_job("5", admin_comment="hetsched handed-back: before"), "k80", "")
    assert plan_of(users)["5"].untarget == ()


def test_only_jobs_with_a_spec_that_the_controller_would_manage_are_handed_back() -> None:
    jobs = [
        held("1"),
        held("2", comment="my own job, held by me"),
        held("3", admin_comment="hetsched not-managed: unknown key 'stepz'"),
        slurm_job("4", state=JobState.COMPLETED, admin_comment=MANAGED),
        slurm_job("5", state=JobState.CANCELLED),
        held("6", partition="cpu"),
    ]
    assert sorted(plan_of(*jobs)) == ["1", "6"], "every partition when the config names none"
    assert sorted(plan_of(*jobs, scope=Scope.of(["gpu"]))) == ["1"], "the managed partitions"


def test_a_heterogeneous_job_is_untargeted_per_component_and_released_as_one() -> None:
    leader = targeted(
        slurm_job(
            "20",
            reason="JobHeldAdmin",
            admin_comment=MANAGED,
            het_job_id="20",
            het_job_offset=0,
            comment=SPEC + ";key=train",
        ),
        "v100",
        "n1",
    )
    other = targeted(dataclasses.replace(leader, job_id="21", het_job_offset=1), "p100", "n2")
    items = plan_of(other, leader)
    assert list(items) == ["20"], "one item, addressed by the leader"
    assert items["20"].untarget == ("20", "21") and items["20"].release
    # 22.05 takes Features but refuses ReqNodeList on the leader's id.
    assert items["20"].keep_nodes == ("20",)
    assert "its first component keeps ReqNodeList=n1" in items["20"].notes
    assert items["20"].identity == "train"


def test_the_identity_is_the_key_and_copy_else_the_job_id() -> None:
    items = plan_of(
        held("1", comment=SPEC + ";key=train;copy=2"),
        held("2", comment="hetsched:class=nope;steps=many"),
        held("3"),
    )
    assert [items[j].identity for j in ("1", "2", "3")] == ["train#2", "2", "3"]
    assert all(items[j].release for j in ("1", "2", "3")), "a bad spec is handed back too"


def test_the_comment_is_one_printable_line_and_bounded() -> None:
    assert format_handback_comment("  node\nfailure\t\x1b[31m ") == (
        "hetsched handed-back: node failure [31m"
    )
    assert len(format_handback_comment("x" * 1000)) == 250
    kept = format_handback_comment("x" * 1000, target_kept=True)
    assert len(kept) == 250 and kept.endswith(" [target kept while running]")


def test_a_hold_after_an_earlier_hand_back_is_never_the_controllers() -> None:
    assert hold_is_ours(held("1"))
    assert hold_is_ours(slurm_job("2", reason="JobHeldAdmin", admin_comment=MANAGED))
    assert not hold_is_ours(held("3", admin_comment="hetsched handed-back: x"))
    assert not hold_is_ours(held("4", admin_comment="hetsched not-managed: bad spec"))
