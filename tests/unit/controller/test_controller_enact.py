"""What each managed job needs this round (`classify`) and whether a running job already holds
its placement (`runs_on`): pure functions of Slurm's records and the plan, so enacting is
idempotent and a restarted controller converges."""

from __future__ import annotations

from controller_builders import held, managed, placement, running, slurm_job, view_of

from slurm_hetsched.controller.enact import Work, classify, runs_on
from slurm_hetsched.core.model import RoundPlan
from slurm_hetsched.slurm.records import JobState


def keys(work: Work) -> dict[str, list[str]]:
    return {
        "keep": sorted(work.keep),
        "move": sorted(work.move),
        "start": sorted(work.start),
        "stop": sorted(work.stop),
        "hold": sorted(work.hold),
    }


def test_each_job_gets_what_it_needs() -> None:
    on_v100 = managed(running("1", "n1", "v100", gpus=2))
    to_move = managed(running("2", "n2", "p100"))
    waiting = managed(held("3"))
    released = managed(slurm_job("4", state=JobState.PENDING, reason="Resources"))
    to_stop = managed(running("5", "n3", "k80"))
    to_hold = managed(slurm_job("6", state=JobState.PENDING, reason="Priority"))
    stays_held = managed(held("7"))
    suspended = managed(slurm_job("8", state=JobState.SUSPENDED, nodes="n3", features="k80"))
    plan = RoundPlan(
        round=5,
        keep={"1": placement("1", ("n1", "v100", 2))},
        move={"2": placement("2", ("n1", "v100", 1))},
        start={
            "3": placement("3", ("n3", "k80", 1)),
            "4": placement("4", ("n3", "k80", 1)),
            "8": placement("8", ("n3", "k80", 1)),
        },
    )
    work = classify(
        view_of(on_v100, to_move, waiting, released, to_stop, to_hold, stays_held, suspended),
        plan,
    )
    assert keys(work) == {
        "keep": ["1"],
        "move": ["2"],
        "start": ["3", "4"],
        "stop": ["5"],
        "hold": ["6"],
    }
    assert work.move["2"] == (to_move, plan.move["2"])
    assert work.start["3"] == (waiting, plan.start["3"])
    assert work.stop["5"] is to_stop and work.hold["6"] is to_hold


def test_slurm_state_decides_not_the_plans_kind() -> None:
    """After a crash the plan may say `start` for a job that already runs there, or `keep` for
    one Slurm requeued: what is done follows Slurm."""
    already = managed(running("1", "n1", "v100"))
    requeued = managed(slurm_job("2", state=JobState.PENDING, reason="BeginTime"))
    plan = RoundPlan(
        round=2,
        start={"1": placement("1", ("n1", "v100", 1))},
        keep={"2": placement("2", ("n2", "p100", 1))},
    )
    assert keys(classify(view_of(already, requeued), plan)) == {
        "keep": ["1"],
        "move": [],
        "start": ["2"],
        "stop": [],
        "hold": [],
    }


def test_busy_jobs_are_left_alone() -> None:
    completing = managed(slurm_job("1", state=JobState.COMPLETING, nodes="n1"))
    finishing_run = managed(running("2", "n2", "p100"))
    plan = RoundPlan(round=3, move={"1": placement("1", ("n2", "p100", 1))})
    work = classify(view_of(completing, finishing_run, busy=("1", "2")), plan)
    assert keys(work) == {"keep": [], "move": [], "start": [], "stop": [], "hold": []}


def test_jobs_not_managed_are_not_touched() -> None:
    plan = RoundPlan(round=1, start={"ghost": placement("ghost", ("n1", "v100", 1))})
    assert keys(classify(view_of(), plan)) == {
        "keep": [],
        "move": [],
        "start": [],
        "stop": [],
        "hold": [],
    }


# ----------------------------------------------------------------------------------------------
# runs_on


def test_runs_on_the_same_gpus() -> None:
    job = managed(running("1", "n1", "v100", gpus=2))
    assert runs_on(job, placement("1", ("n1", "v100", 2)))


def test_another_node_or_count_is_not_the_same() -> None:
    job = managed(running("1", "n1", "v100", gpus=2))
    assert not runs_on(job, placement("1", ("n2", "v100", 2)))
    assert not runs_on(job, placement("1", ("n1", "v100", 1)))
    assert not runs_on(job, placement("1", ("n1", "v100", 1), ("n2", "v100", 1)))


def test_another_type_on_the_same_node_is_not_the_same() -> None:
    """A node with two GPU types: the job's feature (the type it was retargeted to) counts."""
    job = managed(running("1", "n5", "p100"))
    assert not runs_on(job, placement("1", ("n5", "v100", 1)))
    assert runs_on(job, placement("1", ("n5", "p100", 1)))


def test_a_job_slurm_started_itself_counts_by_its_node() -> None:
    job = managed(running("1", "n1", ""))
    assert runs_on(job, placement("1", ("n1", "v100", 1)))


def test_a_pending_job_runs_nowhere() -> None:
    assert not runs_on(managed(held("1")), placement("1", ("n1", "v100", 1)))


def test_a_heterogeneous_job_on_its_slices() -> None:
    job = managed(
        running("10", "n1", "v100", het_job_id="10", het_job_offset=0),
        running("11", "n2", "p100", het_job_id="10", het_job_offset=1),
    )
    both = placement("10", ("n1", "v100", 1), ("n2", "p100", 1))
    assert runs_on(job, both)
    assert not runs_on(job, placement("10", ("n1", "v100", 1), ("n2", "k80", 1)))
    assert not runs_on(job, placement("10", ("n1", "v100", 2)))
    work = classify(view_of(job), RoundPlan(round=1, keep={"10": both}))
    assert sorted(work.keep) == ["10"]


def test_a_released_job_starting_on_its_target_is_left_to_start() -> None:
    """Released onto k80 on n3 last round and not started yet: re-placing it there would only
    race with Slurm starting it; placed elsewhere, it is held and retargeted."""
    from dataclasses import replace

    starting = managed(
        replace(
            slurm_job("9", state=JobState.PENDING, reason="Resources", features="k80"),
            required_nodes="n3",
        )
    )
    same = RoundPlan(round=6, start={"9": placement("9", ("n3", "k80", 1))})
    assert keys(classify(view_of(starting), same))["keep"] == ["9"]
    other = RoundPlan(round=6, start={"9": placement("9", ("n1", "v100", 1))})
    assert keys(classify(view_of(starting), other))["start"] == ["9"]
    still_held = managed(replace(held("9", features="k80"), required_nodes="n3"))
    assert keys(classify(view_of(still_held), same))["start"] == ["9"], "a held job is released"
