"""HadarE's job tracker, one round of one job (core/fork_rounds.py): copies wanted, copies
started, budgets in proportion to throughput and within the round, what a step counts."""

from __future__ import annotations

import pytest

from slurm_hetsched.core.fork_rounds import (
    DEFAULT_ROUND_OVERHEAD_S,
    DEFAULT_STEP_EFFICIENCY,
    Demand,
    ForkSettings,
    copies_allowed,
    copies_offered,
    credit_of,
    offer_copies,
    plan_round,
)
from slurm_hetsched.errors import ConfigError

FREE = ForkSettings(5, overhead_s=0.0, efficiency=1.0)


def test_the_measured_knobs_are_named_and_the_default_does_not_fork() -> None:
    assert DEFAULT_ROUND_OVERHEAD_S == 5.0
    assert DEFAULT_STEP_EFFICIENCY == 0.5
    settings = ForkSettings()
    assert settings.max_copies == 1
    assert settings.describe() == "no forking"
    assert "0.5" in ForkSettings(3).describe() and "5 s" in ForkSettings(3).describe()


@pytest.mark.parametrize(
    "kwargs",
    [{"max_copies": 0}, {"max_copies": True}, {"overhead_s": -1.0}, {"efficiency": 0.0},
     {"efficiency": 1.5}, {"efficiency": float("nan")}],
)  # fmt: skip
def test_bad_knobs_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        ForkSettings(**kwargs)  # type: ignore[arg-type]


def test_a_job_never_has_more_copies_than_nodes_that_can_run_it() -> None:
    assert copies_allowed(5, 3) == 3
    assert copies_allowed(2, 5) == 2
    assert copies_allowed(5, 0) == 1


def test_an_averaged_step_counts_the_efficiency_a_lone_one_a_whole_step() -> None:
    assert credit_of(1, 0.9) == 1.0
    assert credit_of(2, 0.9) == 0.9


def test_budgets_are_proportional_to_throughput_and_need_remaining_over_efficiency() -> None:
    settings = ForkSettings(3, overhead_s=8.0, efficiency=0.9)
    offers = {"a": (3.0, 120.0), "b": (2.0, 120.0), "c": (1.0, 120.0)}
    planned = plan_round(540.0, offers, settings)
    # Fewer than three cannot make it in 120 - 8 s; 540 / 0.9 = 600 raw steps, split 3:2:1,
    # each finishing in 100 s (+ 8 s overhead).
    assert planned.budgets == {"a": 300.0, "b": 200.0, "c": 100.0}
    assert planned.overhead_s == 8.0
    assert planned.credit == 0.9
    assert planned.running == ("a", "b", "c")


def test_a_budget_is_at_most_what_the_copy_can_do_in_the_round() -> None:
    settings = ForkSettings(2, overhead_s=10.0, efficiency=1.0)
    planned = plan_round(1e6, {"a": (2.0, 100.0), "b": (1.0, 100.0)}, settings)
    assert planned.budgets == {"a": 180.0, "b": 90.0}  # (100 - 10) s at each rate


def test_a_capped_copy_leaves_its_excess_to_the_others() -> None:
    # b restarts (50 s of its 100 left): capped at 40; the rest goes to a (cap 90).
    settings = ForkSettings(2, overhead_s=10.0, efficiency=1.0)
    planned = plan_round(120.0, {"a": (1.0, 100.0), "b": (1.0, 50.0)}, settings)
    assert planned.budgets == {"a": 80.0, "b": 40.0}


def test_the_fastest_copy_alone_finishes_a_remainder_it_can_do_in_the_round() -> None:
    """The paper's last round: the beta fastest finish; the others' share would take less
    than the overhead they would cost."""
    settings = ForkSettings(3, overhead_s=8.0, efficiency=0.9)
    planned = plan_round(100.0, {"slow": (1.0, 90.0), "fast": (4.0, 90.0)}, settings)
    assert planned.running == ("fast",)
    assert planned.budgets == {"slow": 0.0, "fast": 100.0}
    assert (planned.overhead_s, planned.credit) == (0.0, 1.0)
    assert copies_offered(100.0, [1.0, 4.0, 1.0], 90.0, settings) == 1
    assert copies_offered(360.0, [1.0, 4.0, 1.0], 90.0, settings) == 1
    assert copies_offered(365.0, [1.0, 4.0, 1.0], 90.0, settings) == 2  # 0.9 x (4 + 1) x 82 s
    assert copies_offered(1e6, [1.0, 4.0, 1.0], 90.0, settings) == 3


def test_a_copy_that_adds_less_than_averaging_costs_is_not_started() -> None:
    """A slow copy at efficiency 0.5: 0.5 x (10 + 1) < 10 steps/s, so the fast one runs alone
    and nothing is averaged (no winning by construction: forking is not always taken)."""
    settings = ForkSettings(2, overhead_s=0.0, efficiency=0.5)
    planned = plan_round(1e6, {"fast": (10.0, 100.0), "slow": (1.0, 100.0)}, settings)
    assert planned.running == ("fast",)
    assert planned.credit == 1.0
    # Nor is it offered: its node stays free for another job.
    assert copies_offered(1e6, [10.0, 1.0], 100.0, settings) == 1


def test_budgets_add_up_to_whole_steps_and_cover_the_job() -> None:
    settings = ForkSettings(3, overhead_s=0.0, efficiency=0.9)
    planned = plan_round(600.0, {"a": (7.0, 50.0), "b": (5.0, 50.0), "c": (3.0, 50.0)}, settings)
    total = sum(planned.budgets.values())
    assert all(b == int(b) for b in planned.budgets.values())
    assert total == 667  # ceil(600 / 0.9): all three are needed within 50 s
    assert total * planned.credit >= 600.0


def test_nothing_runs_where_no_copy_can() -> None:
    planned = plan_round(10.0, {"a": (0.0, 100.0)}, FREE)
    assert planned.running == ()
    assert copies_offered(10.0, [], 100.0, FREE) == 1


def test_at_efficiency_0_5_a_job_whose_slow_nodes_add_less_than_its_fastest_is_not_forked() -> None:
    """Forked, the job makes 0.5 x (its fastest node + the others): it pays only when the
    others add more than the fastest, net of the overhead; then on all of them, although two or
    three copies would lose (the rule is the best count, not copy by copy)."""
    half = ForkSettings(4, overhead_s=0.0, efficiency=0.5)
    assert copies_offered(1e6, [10.0, 3.0, 3.0, 3.0], 100.0, half) == 1  # 0.5 x 19 < 10
    assert copies_offered(1e6, [10.0, 4.0, 4.0, 4.0], 100.0, half) == 4  # 0.5 x 22 > 10
    # Net of the overhead: 0.5 x 22 x (100 - 5) s > 1000 steps, 0.5 x 22 x (100 - 10) s < 1000.
    assert copies_offered(1e6, [4.0, 10.0, 4.0, 4.0], 100.0, ForkSettings(4, 5.0, 0.5)) == 4
    assert copies_offered(1e6, [4.0, 10.0, 4.0, 4.0], 100.0, ForkSettings(4, 10.0, 0.5)) == 1
    # The last round is unchanged: the fewest fastest that finish.
    assert copies_offered(1000.0, [10.0, 4.0, 4.0, 4.0], 100.0, half) == 1


def test_with_free_forking_every_copy_is_offered_whatever_the_contention() -> None:
    """Efficiency 1, no overhead: a copy's steps are worth another job's on its node, so every
    job offers all its copies (the paper's rule, as before the room rule)."""
    assert copies_offered(1e6, [10.0, 1.0, 1.0], 100.0, FREE) == 3
    assert copies_offered(1e6, [10.0, 1.0, 1.0], 100.0, FREE, room=0) == 3
    demands = {j: Demand(1e6, (3.0, 2.0, 1.0), 100.0) for j in ("a", "b", "c", "d")}
    assert offer_copies(demands, 3, FREE) == {"a": 3, "b": 3, "c": 3, "d": 3}


def test_copies_beyond_the_first_are_offered_only_on_spare_gpus_when_forking_costs() -> None:
    """0.9 and 8 s: a second copy pays for the job (0.9 x 5 x 92 > 3 x 100 steps) but would take
    a node another job's first copy could use at full credit; so only spare GPUs take copies,
    first the job whose copies add most per GPU."""
    costly = ForkSettings(3, overhead_s=8.0, efficiency=0.9)
    fast, slow = Demand(1e6, (3.0, 2.0, 1.0), 100.0), Demand(1e6, (1.0, 1.0, 0.5), 100.0)
    assert offer_copies({"a": fast, "b": slow}, 2, costly) == {"a": 1, "b": 1}
    assert offer_copies({"b": slow, "a": fast}, 3, costly) == {"a": 2, "b": 1}
    assert offer_copies({"a": fast, "b": slow}, 4, costly) == {"a": 3, "b": 1}
    assert offer_copies({"a": fast, "b": slow}, 6, costly) == {"a": 3, "b": 3}
    assert copies_offered(1e6, [3.0, 2.0, 1.0], 100.0, costly, room=1) == 2
    # A copy takes the job's GPUs on one node: 3 spare GPUs are one more copy of 2 GPUs.
    big = Demand(1e6, (3.0, 2.0, 1.0), 100.0, gpus=2)
    assert offer_copies({"a": big}, 5, costly) == {"a": 2}
