"""What the controller sees in Slurm (`build_view`): the recorded `squeue --json` /
`sinfo --json` of the real clusters (tests/golden/), and records built as the parser builds them."""

from __future__ import annotations

import dataclasses

import pytest
from controller_builders import (
    RESNET,
    SPEC,
    TABLE,
    TZ,
    VERSIONS,
    golden_ids,
    golden_jobs,
    golden_nodes,
    held,
    running,
    slurm_job,
    slurm_node,
)

from slurm_hetsched.controller.jobview import Progress, SlurmView, build_view
from slurm_hetsched.core.model import Job
from slurm_hetsched.core.throughput.prior import with_estimates
from slurm_hetsched.data_files import shipped_gpu_types
from slurm_hetsched.slurm.records import JobState, SlurmJob, SlurmNode

NODES = [
    slurm_node("n1", {"v100": 2}),
    slurm_node("n2", {"p100": 2}),
    slurm_node("n3", {"k80": 4}),
]


def view(jobs: list[SlurmJob], nodes: list[SlurmNode] | None = None, **kwargs: object) -> SlurmView:
    options: dict[str, object] = {"now_s": 10_000.0, "table": TABLE, "local_tz": TZ}
    options.update(kwargs)
    return build_view(jobs, NODES if nodes is None else nodes, **options)  # type: ignore[arg-type]


def snapshot_job(v: SlurmView, key: str) -> Job:
    (job,) = [j for j in v.snapshot.jobs if j.key == key]
    return job


def in_use(v: SlurmView) -> dict[str, dict[str, int]]:
    return {n.name: dict(n.gpus_in_use) for n in v.snapshot.nodes}


def reason_of(v: SlurmView, job_id: str) -> str:
    (rejected,) = [r for r in v.rejected if r.job_id == job_id]
    return rejected.reason


# ----------------------------------------------------------------------------------------------
# Recorded on the real clusters


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_cluster_typed_job_is_rejected_and_others_jobs_keep_their_gpus(
    version: str,
) -> None:
    """Job A carries a spec but asks for typed GPUs (gpu:v100:2): refused with the reason. No
    job is managed, so every GPU Slurm shows in use stays in use for the decision."""
    ids = golden_ids(version)
    v = view(golden_jobs(version), golden_nodes(version))
    assert v.managed == {}
    assert [r.job_id for r in v.rejected] == [ids["A"]]
    assert reason_of(v, ids["A"]).startswith("typed GPU request gpu:v100:2")
    assert "--gres=gpu:N" in reason_of(v, ids["A"])
    assert in_use(v) == {"n1": {"v100": 2}, "n2": {"p100": 2}, "n3": {"k80": 3}}
    assert v.snapshot.gpu_types == ("k80", "p100", "v100")
    assert v.snapshot.jobs == () and v.unprofiled_gpu_types == ()


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_cluster_with_specs_on_the_untyped_jobs(version: str) -> None:
    """Jobs B (running untyped gpu:1 on n2) and C (held, untyped gpu:2) given a spec become
    managed; B's GPU is the controller's to give, the het job's p100 on n2 stays in use."""
    ids = golden_ids(version)
    jobs = [
        dataclasses.replace(j, comment=SPEC) if j.job_id in (ids["B"], ids["C"]) else j
        for j in golden_jobs(version)
    ]
    v = view(jobs, golden_nodes(version))
    assert sorted(v.managed) == sorted([ids["B"], ids["C"]])
    b, c = v.managed[ids["B"]], v.managed[ids["C"]]
    assert b.running and b.num_gpus == 1 and b.gpus_by_node() == {"n2": 1}
    assert c.state is JobState.PENDING and c.leader.held and c.gpus_by_node() == {}
    assert in_use(v) == {"n1": {"v100": 2}, "n2": {"p100": 1}, "n3": {"k80": 3}}
    assert [j.key for j in v.snapshot.jobs] == sorted([ids["B"], ids["C"]])
    assert snapshot_job(v, ids["C"]).num_gpus == 2
    assert snapshot_job(v, ids["B"]).slurm_job_ids == (ids["B"],)
    assert snapshot_job(v, ids["B"]).job_class == RESNET


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_heterogeneous_job_with_typed_components_is_rejected(version: str) -> None:
    ids = golden_ids(version)
    jobs = [
        dataclasses.replace(j, comment=SPEC) if ids["D"] in (j.job_id, j.het_job_id) else j
        for j in golden_jobs(version)
    ]
    v = view(jobs, golden_nodes(version))
    assert "typed GPU request gpu:p100:1" in reason_of(v, ids["D"])
    assert ids["D"] not in v.managed


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_finished_jobs_with_a_spec_are_ignored(version: str) -> None:
    ids = golden_ids(version)
    jobs = [
        dataclasses.replace(j, comment=SPEC) if j.job_id in (ids["E"], ids["G"]) else j
        for j in golden_jobs(version)
    ]
    v = view(jobs, golden_nodes(version))
    assert {r.job_id for r in v.rejected} == {ids["A"]} and v.managed == {}


# ----------------------------------------------------------------------------------------------
# Managed, unmanaged, rejected


def test_managed_and_unmanaged_jobs() -> None:
    v = view(
        [
            held("10"),
            running("11", "n1", "v100", gpus=2),
            slurm_job("12", comment="", state=JobState.RUNNING, nodes="n3", gpus=3),
            slurm_job("13", comment="just a note", state=JobState.PENDING),
        ],
        [
            slurm_node("n1", {"v100": 2}, {"v100": 2}),
            slurm_node("n2", {"p100": 2}),
            slurm_node("n3", {"k80": 4}, {"k80": 3}),
        ],
    )
    assert sorted(v.managed) == ["10", "11"] and v.rejected == ()
    # The managed job's v100s are the controller's; the unmanaged job's k80s are not.
    assert in_use(v) == {"n1": {"v100": 0}, "n2": {"p100": 0}, "n3": {"k80": 3}}
    assert [j.key for j in v.snapshot.jobs] == ["10", "11"]
    assert v.busy == ()


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (held("20", comment="hetsched:class=LM (batch size 20);stepz=5"), "unknown key 'stepz'"),
        (held("20", comment="hetsched:steps=5"), "missing class="),
        (held("20", comment="hetsched:class=A3C;steps=-3"), "steps='-3'"),
        (held("20", comment="hetsched:class=A3C;weight=0"), "weight='0'"),
        (held("20", comment="hetsched:class=A3C;due=tomorrow"), "due='tomorrow'"),
        (held("20", comment="hetsched:class=A3C;class=A3C"), "key 'class' given twice"),
        (held("20", gpus=None), "asks for no GPUs"),
        (held("20", gpus=2, gpu_type="k80"), "typed GPU request gpu:k80:2"),
        (held("20", comment=SPEC + ";gpus=2"), "gpus=2 in the spec but the job asks for 1 GPUs"),
        (
            held("20", comment="hetsched:class=ResNet-50 (batch size 63)"),
            "unknown job class 'ResNet-50 (batch size 63)': not in the throughput table; "
            "did you mean 'ResNet-50 (batch size 64)'",
        ),
        (
            held("20", comment="hetsched:class=Nothing like it"),
            "`hetsched allocate --list-classes`",
        ),
        (held("20", gpus=3), "no GPU type of this cluster (k80, p100, v100) can run class"),
    ],
)
def test_rejected_jobs_carry_the_reason(job: SlurmJob, expected: str) -> None:
    v = view([job, held("21")])
    assert list(v.managed) == ["21"]
    assert expected in reason_of(v, "20")
    (rejected,) = v.rejected
    assert (rejected.user, rejected.job) == ("alice", job)
    assert [j.key for j in v.snapshot.jobs] == ["21"]


def test_a_matching_gpus_key_is_accepted() -> None:
    v = view([held("20", gpus=2, comment=SPEC + ";gpus=2")])
    assert v.managed["20"].num_gpus == 2 and v.rejected == ()


def test_an_elastic_job_is_its_smallest_gang_allowed_every_count_up_to_its_largest() -> None:
    for asked in (2, 4):  # as submitted, and as the controller re-submitted it after growing
        v = view([held("20", gpus=asked, comment=SPEC + ";gpus=2-4")])
        assert v.managed["20"].num_gpus == asked and v.rejected == ()
        (job,) = v.snapshot.jobs
        assert (job.num_gpus, job.allowed_gpus) == (2, (2, 3, 4))
    v = view([held("20", gpus=1, comment=SPEC + ";gpus=2-4")])
    assert "gpus=2-4 in the spec but the job asks for 1 GPUs" in reason_of(v, "20")


def test_a_rejected_running_jobs_gpus_stay_in_use() -> None:
    v = view(
        [slurm_job("30", state=JobState.RUNNING, nodes="n1", gpus=2, gpu_type="v100")],
        [slurm_node("n1", {"v100": 2}, {"v100": 2})],
    )
    assert "30" not in v.managed and in_use(v) == {"n1": {"v100": 2}}


def test_duplicate_key_keeps_the_newer_job() -> None:
    old = running("40", "n1", "v100", comment=SPEC + ";key=train")
    new = held("45", comment=SPEC + ";key=train")
    for order in ([old, new], [new, old]):
        v = view(order)
        assert list(v.managed) == ["train"] and v.managed["train"].slurm_id == "45"
        assert reason_of(v, "40") == "job key 'train' is also used by job 45"
        assert [j.slurm_job_ids for j in v.snapshot.jobs] == [("45",)]


def test_duplicate_key_with_the_old_job_completing_does_not_block_the_new_one() -> None:
    """A re-submission: the old job is cancelled (COMPLETING), the new one waits. The key is
    the new job's, which is not busy, so the round may start it."""
    old = slurm_job("40", state=JobState.COMPLETING, nodes="n1", comment=SPEC + ";key=train")
    new = held("45", comment=SPEC + ";key=train")
    for order in ([old, new], [new, old]):
        v = view(order)
        assert v.managed["train"].slurm_id == "45"
        assert v.busy == ()


def test_a_completing_managed_job_is_busy_and_keeps_its_gpus() -> None:
    done = slurm_job("50", state=JobState.COMPLETING, nodes="n1", gpus=2)
    v = view([done], [slurm_node("n1", {"v100": 2}, {"v100": 2})])
    assert v.busy == ("50",)
    assert v.snapshot.jobs == ()
    assert in_use(v) == {"n1": {"v100": 2}}


def test_heterogeneous_managed_job_sums_its_components() -> None:
    leader = running(
        "70", "n1", "v100", het_job_id="70", het_job_offset=0, comment=SPEC + ";key=k70"
    )
    second = running("71", "n2", "p100", het_job_id="70", het_job_offset=1, comment=SPEC)
    v = view(
        [second, leader],
        [slurm_node("n1", {"v100": 2}, {"v100": 1}), slurm_node("n2", {"p100": 2}, {"p100": 1})],
    )
    job = v.managed["k70"]
    assert job.slurm_id == "70" and [c.job_id for c in job.components] == ["70", "71"]
    assert job.num_gpus == 2 and job.gpus_by_node() == {"n1": 1, "n2": 1}
    assert in_use(v) == {"n1": {"v100": 0}, "n2": {"p100": 0}}


# ----------------------------------------------------------------------------------------------
# GPU types, arrivals, progress


def test_unprofiled_gpu_types_are_left_out() -> None:
    nodes = [
        slurm_node("n1", {"v100": 2}),
        slurm_node("n9", {"h100": 8}, {"h100": 3}),
        slurm_node("n8", {"a100": 4, "k80": 2}, {"a100": 1}),
    ]
    v = view([held("80")], nodes)
    assert v.unprofiled_gpu_types == ("a100", "h100")
    assert v.snapshot.gpu_types == ("k80", "v100")
    gpus = {n.name: dict(n.gpus) for n in v.snapshot.nodes}
    assert gpus == {"n1": {"v100": 2}, "n9": {}, "n8": {"k80": 2}}
    assert list(v.managed) == ["80"]


def test_arrival_is_remembered_across_requeues() -> None:
    requeued = held("90", submit_time=5_000, restart_count=2)
    assert snapshot_job(view([requeued]), "90").arrival_s == 5_000.0
    v = view([requeued], arrivals={"90": 1_234.0, "other": 1.0})
    assert snapshot_job(v, "90").arrival_s == 1_234.0


def test_remaining_steps_come_from_the_progress_report() -> None:
    jobs = [
        running("91", "n1", "v100"),  # steps=20000 in the spec
        held("92", comment=f"hetsched:class={RESNET}"),  # no steps: the report's total
        held("93", comment=f"hetsched:class={RESNET}"),  # no steps, no report
    ]
    reports = {
        "91": Progress(step=5_000, total_steps=20_000, steps_per_s=4.0, gpu_type="v100"),
        "92": Progress(step=250, total_steps=1_000),
    }
    seen: list[str] = []

    def progress(job):  # type: ignore[no-untyped-def]
        seen.append(job.key)
        return reports.get(job.key)

    v = view(jobs, progress=progress)
    assert sorted(seen) == ["91", "92", "93"]
    assert dict(v.progress) == reports
    assert (snapshot_job(v, "91").steps_remaining, snapshot_job(v, "91").total_steps) == (
        15_000.0,
        20_000.0,
    )
    assert (snapshot_job(v, "92").steps_remaining, snapshot_job(v, "92").total_steps) == (
        750.0,
        1_000.0,
    )
    assert snapshot_job(v, "93").steps_remaining is None


def test_without_a_report_the_whole_job_remains() -> None:
    assert snapshot_job(view([held("94")]), "94").steps_remaining == 20_000.0


def test_spec_fields_reach_the_snapshot() -> None:
    comment = f"hetsched:class={RESNET};steps=100;weight=2.5;due=2030-01-01T00:00Z;tw=0.5"
    # Due dates are taken within ten years of the observation.
    v = view([held("95", comment=comment, user="bob")], now_s=1_800_000_000.0)
    job = snapshot_job(v, "95")
    assert (job.weight, job.tardiness_weight, job.user) == (2.5, 0.5, "bob")
    assert job.due_s == 1_893_456_000.0


def test_jobs_are_refused_when_no_gpu_type_of_the_cluster_is_profiled() -> None:
    refused_view = view([held("1")], [slurm_node("n9", {"h100": 4})])
    assert refused_view.managed == {} and refused_view.unprofiled_gpu_types == ("h100",)
    (refused,) = refused_view.rejected
    assert "no GPU type of this cluster is in the throughput table" in refused.reason


# ----------------------------------------------------------------------------------------------
# Hostile input: every bad job is refused on its own, the others are managed


HOSTILE_COMMENTS = [
    "hetsched:class=" + RESNET + ";steps=" + "9" * 400,
    "hetsched:class=" + RESNET + ";steps=1;weight=1e308",
    "hetsched:class=" + RESNET + ";steps=1;weight=nan",
    "hetsched:class=" + RESNET + ";steps=1;tw=inf",
    "hetsched:class=" + RESNET + ";steps=1;key=..",
    "hetsched:class=" + RESNET + ";steps=1;key=a/b",
    "hetsched:class=" + RESNET + ";steps=1;key=" + "k" * 65,
    "hetsched:class=$(reboot);steps=1",
    "hetsched:class=" + RESNET + ";steps=1;steps=2",
]


def test_hostile_specs_are_refused_one_by_one_and_the_rest_is_managed() -> None:
    jobs = [held(str(100 + i), comment=c) for i, c in enumerate(HOSTILE_COMMENTS)]
    v = view([*jobs, held("1"), held("2")], now_s=1_800_000_000.0)
    assert sorted(v.managed) == ["1", "2"]
    assert sorted(r.job_id for r in v.rejected) == sorted(j.job_id for j in jobs)
    assert all(len(r.reason) < 200 for r in v.rejected), "reasons go into admin comments"
    assert "9" * 50 not in " ".join(r.reason for r in v.rejected)


def test_a_job_that_cannot_be_requeued_is_refused() -> None:
    v = view([dataclasses.replace(held("5"), requeue=False)])
    assert v.managed == {} and "cannot be requeued" in reason_of(v, "5")


def test_a_job_without_a_user_id_is_refused() -> None:
    v = view([held("5", user_id=None)])
    assert v.managed == {} and "no user id" in reason_of(v, "5")


def test_another_users_job_naming_a_bound_key_is_refused_not_the_owner() -> None:
    owner = running("1", "n1", "v100", comment=SPEC + ";key=mine", user="alice", user_id=1000)
    thief = held("2", comment=SPEC + ";key=mine", user="mallory", user_id=666, submit_time=1)
    first = view([owner])
    assert sorted(first.managed) == ["mine"]
    # The thief's job is older by submit time and newer by id: the binding and the id decide.
    v = view([owner, thief], key_bindings=first.key_bindings)
    assert sorted(v.managed) == ["mine"] and v.managed["mine"].slurm_id == "1"
    assert reason_of(v, "2") == "job key 'mine' belongs to user alice (job 1)"
    assert v.key_bindings["mine"].uid == 1000


def test_two_jobs_of_one_user_with_one_key_keep_the_newer() -> None:
    old = held("1", comment=SPEC + ";key=run")
    new = held("2", comment=SPEC + ";key=run")
    v = view([old, new])
    assert v.managed["run"].slurm_id == "2" and "also used by job 2" in reason_of(v, "1")


def test_copies_share_a_key_and_are_told_apart() -> None:
    first = held("1", comment=SPEC + ";key=run")
    copy = held("2", comment=SPEC + ";key=run;copy=1")
    v = view([first, copy])
    assert sorted(v.managed) == ["run", "run#1"]
    assert v.managed["run#1"].job_key == "run" and v.managed["run#1"].copy == 1
    assert sorted(j.key for j in v.snapshot.jobs) == ["run", "run#1"]


def test_a_set_aside_job_is_refused_until_its_comment_changes() -> None:
    from slurm_hetsched.controller.jobview import SetAside

    aside = {"7": SetAside(SPEC, "the policy fails with this job alone", 3)}
    v = view([held("7")], set_aside=aside)
    assert v.managed == {} and reason_of(v, "7").startswith("set aside in round 3")
    assert dict(v.set_aside) == aside, "still in force, so kept"
    edited = view([held("7", comment=SPEC + ";tw=0.5")], set_aside=aside)
    assert sorted(edited.managed) == ["7"] and dict(edited.set_aside) == {}


def test_a_progress_reader_that_fails_costs_only_that_jobs_report() -> None:
    def progress(job):  # type: ignore[no-untyped-def]
        if job.key == "1":
            raise RuntimeError("boom")
        return Progress(step=5)

    v = view([held("1"), held("2")], progress=progress)
    assert sorted(v.managed) == ["1", "2"] and sorted(v.progress) == ["2"]


def test_with_estimates_types_with_figures_are_scheduled_and_any_class_is_managed() -> None:
    """With the table the controller decides on (estimates from the shipped figures), an a100
    node is in the snapshot, a type without figures stays Slurm's, and a class in no table is
    managed on the neutral prior instead of refused."""
    estimated = with_estimates(TABLE, shipped_gpu_types())
    nodes = [
        slurm_node("n1", {"v100": 2}),
        slurm_node("n8", {"a100": 4, "mystery9": 2}),
    ]
    new_class = "hetsched:class=my-own-model;steps=500"
    v = view([held("80"), held("81", comment=new_class)], nodes, table=estimated)
    assert v.unprofiled_gpu_types == ("mystery9",)
    assert v.snapshot.gpu_types == ("a100", "v100")
    assert sorted(v.managed) == ["80", "81"] and v.rejected == ()
    # Without estimates the same class is refused, as before.
    refused = view([held("81", comment=new_class)], nodes)
    assert "unknown job class 'my-own-model'" in reason_of(refused, "81")
