"""Re-submission carries the whole job (controller/resubmit_options.py, controller/enact.py):
QOS, error file, the rest of the time limit; a failed submission leaves the old job held and
intact for the next round; a heterogeneous job moved back to one node becomes a plain job.
Against Slurm as recorded (recorded_slurm.py), with the real backend building every argv."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path

import pytest
from controller_builders import managed, placement
from enact_rig import Rig, make_rig
from recorded_slurm import SPEC

from slurm_hetsched.controller.jobview import SlurmView
from slurm_hetsched.controller.resubmit_options import remaining_minutes, resubmission_options
from slurm_hetsched.core.jobspec import parse_job_spec
from slurm_hetsched.core.model import RoundPlan
from slurm_hetsched.slurm.records import JobState

NOW = 1_800_000_000


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    rig = make_rig(tmp_path)
    yield rig
    assert not rig.slurm.surprises, "the fake was asked something it has no recording of"


def _options(argv: list[str]) -> list[dict[str, str]]:
    """Each component's --name=value options of one sbatch argv."""
    groups: list[dict[str, str]] = [{}]
    for arg in argv[1:]:
        if arg == ":":
            groups.append({})
        elif arg.startswith("--") and "=" in arg:
            name, _, value = arg[2:].partition("=")
            groups[-1][name] = value
    return groups


def test_the_rest_of_the_time_limit_counts_the_run_the_move_ended(rig: Rig) -> None:
    rig.slurm.add_running("102", "n3", "k80", time_limit=60, start_time=NOW - 601)
    rig.slurm.add_running("103", "n3", "k80", time_limit=None, start_time=NOW - 601)
    rig.slurm.add_pending("104", time_limit=60, start_time=NOW - 601)
    rig.slurm.add_running("105", "n3", "k80", time_limit=5, start_time=NOW - 3600)
    record = rig.slurm.record
    # 10 min and 1 s used: 11 whole minutes gone, never less than one left.
    assert remaining_minutes(record("102"), NOW) == 49
    assert remaining_minutes(record("103"), NOW) is None
    assert remaining_minutes(record("104"), NOW) == 60  # held since an earlier round
    assert remaining_minutes(record("105"), NOW) == 1


def test_every_component_keeps_qos_error_file_account_and_time(rig: Rig) -> None:
    rig.slurm.add_running(
        "102", "n3", "k80", qos="high", standard_error="/home/u/err-%j.txt",
        account="acct-a", partition="gpu", time_limit=120, start_time=NOW - 60,
    )  # fmt: skip
    job = managed(rig.slurm.record("102"))
    target = placement("102", ("n1", "v100", 2), ("n3", "k80", 1))
    options = resubmission_options(job, target, {"PATH": "/bin"}, NOW)
    assert [(o.nodelist, o.constraint, o.ntasks) for o in options] == [
        ("n1", "v100", 2),
        ("n3", "k80", 1),
    ]
    for component in options:
        assert (component.error, component.account, component.partition) == (
            "/home/u/err-%j.txt",
            "acct-a",
            "gpu",
        )
        assert component.open_mode_append and component.requeue
        assert dict(component.extra) == {"qos": "high", "time": "119"}


def test_a_moved_job_is_resubmitted_with_its_limit_qos_and_files(rig: Rig) -> None:
    rig.slurm.add_running(
        "102", "n3", "k80", qos="high", standard_error="/tmp/e.txt", time_limit=30,
        start_time=int(rig.clock.now) - 300,
    )  # fmt: skip
    plan = RoundPlan(round=3, move={"102": placement("102", ("n1", "v100", 1), ("n2", "p100", 1))})
    report, out = rig.enactor().enact(rig.view(), plan)
    assert report.failed == {} and out.resubmitted == {"102": "200"}
    ((argv, _, _),) = rig.slurm.submissions
    first, second = _options(argv)
    for component in (first, second):
        assert component["qos"] == "high" and component["error"] == "/tmp/e.txt"
        assert component["time"] == "25" and component["open-mode"] == "append"
    resubmit = rig.journal.first("resubmit", "102")
    assert resubmit.outcome == "job 102 replaced by job 200"


def test_a_failed_resubmission_leaves_the_old_job_held_and_the_next_round_retries(
    rig: Rig,
) -> None:
    rig.slurm.add_running("102", "n3", "k80")
    rig.slurm.refusals[("sbatch", "")] = "sbatch-too-many-gpus"
    target = placement("102", ("n1", "v100", 1), ("n2", "p100", 1))
    report, out = rig.enactor().enact(rig.view(), RoundPlan(round=3, move={"102": target}))
    assert "re-submission failed" in report.failed["102"]
    assert out.resubmitted == {}
    old = rig.slurm.record("102")
    assert (old.state, old.held) == (JobState.PENDING, True), "held, not released, not cancelled"
    assert not rig.slurm.sent("scontrol", "release", "102")
    assert not rig.slurm.sent("scancel", "--verbose", "102")
    assert len([j for j in rig.slurm.jobs if j != "102"]) == 0, "no second job"
    resubmit = rig.journal.first("resubmit", "102")
    assert resubmit.status == "failed" and "old job kept held" in resubmit.outcome

    # Slurm takes submissions again: the next round places the held job, as a new job.
    del rig.slurm.refusals[("sbatch", "")]
    report, out = rig.enactor().enact(rig.view(), RoundPlan(round=4, start={"102": target}))
    assert report.failed == {} and out.resubmitted == {"102": "200"}
    assert rig.slurm.record("102").state is JobState.CANCELLED
    assert {rig.slurm.record(j).het_job_id for j in ("200", "201")} == {"200"}


def test_a_heterogeneous_job_moved_to_one_node_is_resubmitted_as_a_plain_job(rig: Rig) -> None:
    rig.slurm.add_running("102", "n3", "k80")
    mixed = placement("102", ("n1", "v100", 2), ("n3", "k80", 1))
    _, out = rig.enactor().enact(rig.view(), RoundPlan(round=3, move={"102": mixed}))
    assert out.resubmitted == {"102": "200"}
    rig.slurm.start("200", "n1")
    rig.slurm.start("201", "n3")
    rig.slurm.jobs["200"].update(nodes="n1", gres_detail=["gpu:v100:2"])
    rig.slurm.jobs["201"].update(nodes="n3", gres_detail=["gpu:k80:1"])
    view = rig.view()
    leader, other = rig.slurm.record("200"), rig.slurm.record("201")
    het = SlurmView(
        now_s=view.now_s,
        managed={"102": managed(leader, other, key="102")},
        rejected=(),
        nodes=(),
        snapshot=view.snapshot,
    )
    plain = placement("102", ("n3", "k80", 3))
    report, out = rig.enactor().enact(het, RoundPlan(round=4, move={"102": plain}))
    assert report.failed == {} and out.resubmitted == {"102": "202"}
    (argv, _, _) = rig.slurm.submissions[-1]
    assert ":" not in argv, "one component: a plain job"
    (component,) = _options(argv)
    assert (component["nodelist"], component["constraint"], component["ntasks"]) == (
        "n3",
        "k80",
        "3",
    )
    assert rig.slurm.record("200").state is JobState.CANCELLED
    assert rig.slurm.record("202").het_job_id is None


def test_a_job_given_another_gpu_count_is_resubmitted_with_one_task_per_gpu(rig: Rig) -> None:
    """An elastic job (`gpus=2-3`) grown from 2 GPUs to 3 on its node: a batch job's tasks
    cannot change, so it is re-submitted, a plain job with 3 tasks."""
    rig.slurm.add_running("102", "n3", "k80", gpus=2, comment=f"{SPEC};gpus=2-3")
    grown = placement("102", ("n3", "k80", 3))
    view = rig.view()
    job = view.managed["102"]
    elastic = dataclasses.replace(
        job, spec=parse_job_spec(f"{SPEC};gpus=2-3", local_tz=UTC, now_s=NOW)
    )
    view = dataclasses.replace(view, managed={"102": elastic})
    report, out = rig.enactor().enact(view, RoundPlan(round=3, move={"102": grown}))
    assert report.failed == {} and out.resubmitted == {"102": "200"}
    ((argv, _, _),) = rig.slurm.submissions
    (component,) = _options(argv)
    assert (component["ntasks"], component["gres"], component["nodelist"]) == ("3", "gpu:3", "n3")
    assert rig.slurm.record("102").state is JobState.CANCELLED
