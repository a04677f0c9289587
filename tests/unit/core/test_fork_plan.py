"""The job tracker's decisions for forked jobs (core/fork_plan.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_hetsched.core.fork_plan import (
    CopyRound,
    ForkState,
    copies_wanted,
    fastest_enough,
    finish,
    fork_section,
    plan_round,
    steps_done,
)


def _state(**changes: object) -> ForkState:
    base = ForkState(key="k", uid=1000, gid=1000, copies=3, total_steps=1000)
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("asked", "default", "cap", "fit", "expected"),
    [(3, 1, 8, 5, 3), (None, 2, 8, 5, 2), (9, 1, 4, 5, 4), (5, 1, 8, 2, 2), (None, 1, 8, 5, 1)],
)
def test_copies_wanted_never_exceeds_the_cap_or_the_nodes_that_fit(
    asked: int | None, default: int, cap: int, fit: int, expected: int
) -> None:
    assert copies_wanted(asked, default, cap, fit) == expected


def test_a_round_splits_the_work_in_proportion_to_the_rates_with_ranges_end_to_end() -> None:
    state = _state(merged_step=100)
    planned = plan_round(state, {0: 3.0, 1: 2.0, 2: 1.0}, {0: "10", 1: "11", 2: "12"}, 20.0)
    # A round of 20 s at 6 steps/s in all: 120 steps, 60/40/20.
    assert {c: w.budget for c, w in planned.work.items()} == {0: 60, 1: 40, 2: 20}
    assert [planned.work[c].data_offset for c in (0, 1, 2)] == [0, 60, 100]
    assert {w.start_step for w in planned.work.values()} == {100}
    assert planned.round == state.round + 1 and planned.work[2].job_id == "12"


def test_the_budgets_never_exceed_the_steps_left_and_add_up_to_them_at_the_end() -> None:
    state = _state(merged_step=950)
    planned = plan_round(state, {0: 3.0, 1: 2.0, 2: 1.0}, {0: "1", 1: "2", 2: "3"}, 20.0)
    assert sum(w.budget for w in planned.work.values()) == 50


def test_the_last_round_runs_the_fastest_copies_only() -> None:
    # 50 steps left: the fastest copy alone does 60 in a round, so the others wait.
    assert fastest_enough(50, {0: 1.0, 1: 3.0, 2: 2.0}, 20.0) == {1: 3.0}
    # 90 left: the two fastest (60 + 40).
    assert fastest_enough(90, {0: 1.0, 1: 3.0, 2: 2.0}, 20.0) == {1: 3.0, 2: 2.0}
    planned = plan_round(_state(merged_step=950), {0: 1.0, 1: 3.0}, {0: "1", 1: "2"}, 20.0)
    assert {c: w.budget for c, w in planned.work.items()} == {1: 50}


def test_a_copy_that_cannot_run_gets_no_work() -> None:
    planned = plan_round(_state(), {0: 2.0, 1: 0.0}, {0: "1", 1: "2"}, 10.0)
    assert set(planned.work) == {0}


def test_a_copy_that_dies_mid_round_leaves_the_steps_the_others_made() -> None:
    state = plan_round(
        _state(merged_step=100), {0: 3.0, 1: 2.0, 2: 1.0}, {0: "1", 1: "2", 2: "3"}, 20.0
    )
    acks = {0: 160, 1: None, 2: 115}  # copy 1 was killed: no ack; copy 2 stopped early
    done = {c: steps_done(state.work[c], acks[c]) for c in state.work}
    assert done == {0: 60, 1: 0, 2: 15}
    assert state.merged_step + sum(done.values()) == 175


def test_an_ack_beyond_the_budget_or_before_the_start_counts_within_it() -> None:
    work = CopyRound("1", start_step=100, data_offset=0, budget=10)
    assert steps_done(work, 500) == 10 and steps_done(work, 50) == 0 and steps_done(work, 104) == 4


def test_the_placement_section_and_the_finish_instruction() -> None:
    state = plan_round(_state(merged=None), {0: 1.0, 1: 1.0}, {0: "5", 1: "6"}, 10.0)
    section = fork_section(state, 1)
    assert section == {
        "round": 1, "copy": 1, "from": None, "start_step": 0, "data_offset": 10,
        "budget": 10, "total_steps": 1000,
    }  # fmt: skip
    assert fork_section(state, 2) is None
    done = finish(replace(state, merged_step=1000, merged="merged/ckpt-1000"), 0, "5")
    assert done.done and fork_section(done, 0) == {
        "round": 2, "copy": 0, "from": "merged/ckpt-1000", "start_step": 1000,
        "data_offset": 0, "budget": 0, "total_steps": 1000,
    }  # fmt: skip


def test_the_state_survives_its_json_form() -> None:
    state = plan_round(
        _state(merged_step=7, merged="merged/ckpt-7"), {0: 1.0, 2: 2.0}, {0: "1", 2: "3"}, 5.0
    )
    state = replace(state, resubmitted={2: 1})
    assert ForkState.from_json(state.to_json()) == state
