"""The Gavel-faithful mode's choices, one by one, on tiny traces worked out by hand
(docs/simulation.md, "Gavel-faithful mode")."""

from __future__ import annotations

import random

import cvxpy as cp
import numpy as np
import pytest

from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.cluster import SimulationError
from slurm_hetsched.sim.faithful import catalog
from slurm_hetsched.sim.faithful.catalog import faithful_form
from slurm_hetsched.sim.faithful.choices import FaithfulChoices
from slurm_hetsched.sim.faithful.forms import Demand, isolated_rate
from slurm_hetsched.sim.faithful.loop import faithful_result, simulate_faithful
from slurm_hetsched.sim.faithful.rounds import GavelRounds
from slurm_hetsched.sim.run import SimSettings
from slurm_hetsched.sim.traces import TraceJob

# "one": 1 step/s on a V100, 0.5 on a K80. "odd": 0.7 steps/s on a V100 only; 0.7 x 360 is
# 251.99999999999997 in floating point, so a round runs int() of it: 251 steps.
# "pair": a 2-GPU class, 1 step/s on two V100s.
TABLE = ThroughputTable.from_dict(
    {
        "format": "hetsched-throughputs/1",
        "throughputs": {
            "one": {"1": {"v100": 1.0, "k80": 0.5}},
            "odd": {"1": {"v100": 0.7, "k80": 0.0}},
            "pair": {"2": {"v100": 1.0, "k80": 0.0}},
        },
    }
)
SITE = SiteData(TABLE, shipped_gpu_types(), shipped_site_energy())
SETTINGS = SimSettings()  # 360 s rounds, resets at least 1920 s apart


def job(job_id: str, cls: str, steps: int, arrival_s: float = 0.0, gpus: int = 1) -> TraceJob:
    return TraceJob(job_id, arrival_s, cls, gpus, steps)


def run(trace: list[TraceJob], counts: dict[str, int], policy: str = "fifo_perf", seed: int = 0):
    settings = SimSettings(seed=seed)
    result = faithful_result(trace, counts, faithful_form(policy, "CLARABEL", seed), SITE, settings)
    return {r.job_id: r for r in result.jobs}, result


def test_a_round_runs_whole_steps_and_ends_with_its_slowest_job() -> None:
    # "odd" runs 251 steps a round (251 / 0.7 = 358.57 s), "one" 360 steps (360 s): each round
    # lasts 360 s, so "odd" makes 251 steps per 360 s, not 0.7 x 360.
    per_round = int(0.7 * 360)
    assert per_round == 251
    jobs, _ = run([job("a", "odd", 1000), job("b", "one", 1080)], {"v100": 2})
    assert jobs["b"].end_s == pytest.approx(3 * 360.0)
    assert jobs["a"].end_s == pytest.approx(3 * 360.0 + (1000 - 3 * per_round) / 0.7)


def test_a_round_of_jobs_that_run_short_ends_early_and_the_next_job_starts_then() -> None:
    # "a" alone: its rounds last 251 / 0.7 s. "c" arrives at 100 s and starts at the end of
    # the first round (the first reset was at time 0, which Gavel counts as no reset yet).
    jobs, _ = run([job("a", "odd", 1000), job("c", "one", 100, arrival_s=100.0)], {"v100": 2})
    assert jobs["c"].start_s == pytest.approx(251 / 0.7)
    assert jobs["c"].end_s == pytest.approx(251 / 0.7 + 100.0)


def test_a_new_job_waits_for_the_next_reset_at_least_1920_s_after_the_last() -> None:
    # "a" arrives at 10 s (a reset at 10 s); rounds end at 10 + 360 k. "b" arrives at 500 s
    # with a GPU free, but no allocation has it until a reset is due: the first round end
    # with now - 10 >= 1920 is 10 + 6 x 360 = 2170 s.
    jobs, _ = run(
        [job("a", "one", 100_000, arrival_s=10.0), job("b", "one", 100, arrival_s=500.0)],
        {"v100": 2},
    )
    assert jobs["b"].start_s == pytest.approx(10.0 + 6 * 360.0)
    assert jobs["b"].end_s == pytest.approx(10.0 + 6 * 360.0 + 100.0)


def test_an_arrival_into_an_idle_cluster_waits_for_the_next_arrival() -> None:
    # "a" runs 10 s from 10 s. "b" arrives at 100 s on an idle cluster, 90 s after the last
    # reset: no allocation has it, nothing runs, and the clock jumps to "c" at 5000 s, where
    # a reset is due and both start.
    trace = [
        job("a", "one", 10, arrival_s=10.0),
        job("b", "one", 100, arrival_s=100.0),
        job("c", "one", 100, arrival_s=5000.0),
    ]
    jobs, _ = run(trace, {"v100": 2})
    assert jobs["a"].end_s == pytest.approx(20.0)
    assert jobs["b"].start_s == pytest.approx(5000.0)
    assert jobs["c"].start_s == pytest.approx(5000.0)


def test_with_nothing_left_to_arrive_an_idle_cluster_resets_at_once() -> None:
    jobs, _ = run(
        [job("a", "one", 10, arrival_s=10.0), job("b", "one", 100, arrival_s=100.0)], {"v100": 2}
    )
    assert jobs["b"].start_s == pytest.approx(100.0)
    assert jobs["b"].end_s == pytest.approx(200.0)


def test_a_multi_gpu_job_with_fewer_steps_than_gpus_fails_five_rounds_and_is_dropped() -> None:
    # 361 steps on 2 GPUs: one round of 360 steps, then 1 step left for 2 GPUs (0 each but
    # the last): the round fails; after 5 failed rounds the job is dropped, never completed.
    jobs, result = run([job("p", "pair", 361, gpus=2)], {"v100": 2})
    assert jobs["p"].end_s is None
    assert jobs["p"].steps_done == 360
    assert result.completed == 0


def test_a_job_time_shares_by_gavels_priorities() -> None:
    # FIFO gives "a" and "b" the V100 and "c" the K80; "c" is allocated nothing on the V100
    # and FIFO never runs a job of priority 0, so the V100 is not shared.
    jobs, _ = run(
        [job("a", "one", 720), job("b", "one", 720), job("c", "one", 360)], {"v100": 2, "k80": 1}
    )
    assert jobs["a"].end_s == pytest.approx(720.0)
    assert jobs["b"].end_s == pytest.approx(720.0)
    assert jobs["c"].end_s == pytest.approx(720.0)  # 360 steps at 0.5 steps/s
    assert jobs["c"].gpu_s == pytest.approx({"k80": 720.0})


def test_fifo_perf_gives_the_fastest_type_with_room_and_decides_afresh() -> None:
    # "a" and "b" arrive at 0: "a" takes the V100, "b" the K80 (0.5 steps/s). "a" ends at
    # 360 s; the next allocation comes with a reset, which is due at once (the last reset was
    # at time 0), and moves "b" to the V100: 180 steps done, 180 left at 1 step/s.
    jobs, _ = run([job("a", "one", 360), job("b", "one", 360)], {"v100": 1, "k80": 1})
    assert jobs["a"].end_s == pytest.approx(360.0)
    assert jobs["b"].end_s == pytest.approx(360.0 + 180.0)
    assert jobs["b"].gpu_s == pytest.approx({"k80": 360.0, "v100": 180.0})


@pytest.mark.parametrize("seed", range(4))
def test_agnostic_fifo_gives_the_alphabetically_last_open_type(seed: int) -> None:
    # Gavel draws a type among those with room but gives the job its loop variable's type,
    # the last open type alphabetically: "a" gets the V100 (not the K80) whatever the draw.
    jobs, _ = run([job("a", "one", 360)], {"v100": 1, "k80": 1}, policy="fifo", seed=seed)
    assert jobs["a"].gpu_s == pytest.approx({"v100": 360.0})


@pytest.mark.parametrize("seed", range(4))
def test_agnostic_fifo_closes_the_drawn_type_when_the_given_one_fills(seed: int) -> None:
    # "a" fills the V100; Gavel then closes the type it drew (index randrange(2) of
    # [k80, v100]). Drawn k80: "b" finds no open type with room and waits for "a" to leave;
    # drawn v100: "b" gets the K80.
    drew_k80 = random.Random(seed).randrange(2) == 0
    jobs, _ = run([job("a", "one", 360), job("b", "one", 180)], {"v100": 1, "k80": 1}, "fifo", seed)
    if drew_k80:
        assert jobs["b"].start_s == pytest.approx(360.0)
    else:
        assert jobs["b"].gpu_s == pytest.approx({"k80": 360.0})


def test_the_agnostic_type_order_is_shuffled_like_gavels() -> None:
    # Gavel shuffles [v100, p100, k80] each round with random.Random(seed + 5); the faithful
    # mode walks the same orders (here the first order decides where "a" runs on one GPU of
    # each type: the first type walked).
    order = ["v100", "k80"]
    random.Random(7 + 5).shuffle(order)
    jobs, _ = run([job("a", "one", 180)], {"v100": 1, "k80": 1}, "max_min_fairness", seed=7)
    assert set(jobs["a"].gpu_s) == {order[0]}


def test_priorities_count_the_time_of_jobs_that_left_and_half_a_round_each() -> None:
    rounds = GavelRounds(("v100",), 360.0, 1920.0)
    for name in ("a", "b"):
        rounds.add_job(name)
    rounds.maybe_reallocate(0.0, lambda: {"a": {"v100": 0.5}, "b": {"v100": 0.5}})
    assert rounds.type_time == {"v100": 360.0}  # two jobs x half a round
    rounds.record("a", "v100", 360.0)
    rounds.remove_job("a")
    rounds.add_job("c")  # arrives: its half round counts for itself only
    priority = rounds.priorities(lambda job, gpu_type: True)["v100"]
    # b: 0.5 / (180 / 720); c: not in the allocation yet -> 0.
    assert priority["b"] == pytest.approx(0.5 / (180.0 / 720.0))
    assert priority["c"] == 0.0


def test_isolated_rate_is_gavels_equal_share_per_gpu() -> None:
    # 2 V100 + 1 K80, two jobs: each gets (1, 0.5) of the types, divided by its GPU count,
    # scaled so its fractions add up to at most 1: (1, 0.5)/1.5 for the 1-GPU job and
    # (0.5, 0.25) for the 2-GPU one.
    demand = Demand(
        job_ids=("x", "y"),
        gpu_types=("v100", "k80"),
        throughput=np.array([[3.0, 1.5], [4.0, 2.0]]),
        num_gpus=np.array([1.0, 2.0]),
        weight=np.ones(2),
        steps_left=np.ones(2),
        since_arrival_s=np.zeros(2),
        capacity=np.array([2.0, 1.0]),
    )
    assert isolated_rate(demand) == pytest.approx([(3.0 + 0.75) / 1.5, 4.0 * 0.5 + 2.0 * 0.25])


def test_min_total_duration_bisects_to_five_percent() -> None:
    # One job of 1000 steps at 1 step/s on the V100 only: the makespan is 1000 s; the
    # bisection's last feasible makespan is within 5% above it, and the allocation meets it.
    demand = Demand(
        job_ids=("x",),
        gpu_types=("k80", "v100"),
        throughput=np.array([[0.0, 1.0]]),
        num_gpus=np.array([1.0]),
        weight=np.ones(1),
        steps_left=np.array([1000.0]),
        since_arrival_s=np.zeros(1),
        capacity=np.array([1.0, 1.0]),
    )
    x = faithful_form("min_total_duration_perf", "CLARABEL").allocate(demand)
    makespan = 1000.0 / float(x[0, 1])
    assert 1000.0 * (1 - 1e-6) <= makespan <= 1000.0 * 1.05 * 1.05


def test_simulate_faithful_counts_rounds_and_resets() -> None:
    # Two rounds of 360 steps; a reset at 0 s with the arrival, and one at 720 s when the
    # job leaves (Gavel plans once more after the last completion, with no job left).
    form = faithful_form("fifo_perf")
    outcome = simulate_faithful([job("a", "one", 720)], {"v100": 1}, form, SITE)
    assert outcome.rounds == 2
    assert outcome.resets == 2


def test_unknown_policy_and_missing_solver_are_clear_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigError, match=r"no Gavel-faithful form.*max_min_fairness_perf"):
        faithful_form("andreas")
    monkeypatch.setattr(cp, "installed_solvers", lambda: ["CLARABEL"])
    with pytest.raises(ConfigError, match=r"ECOS: not installed; `pip install ecos`"):
        faithful_form("fifo", "ECOS")
    assert faithful_form("fifo", "auto").solver == "CLARABEL"
    assert catalog.resolve_solver("auto") == "CLARABEL"


def run_except(
    trace: list[TraceJob], counts: dict[str, int], names: str, policy: str = "fifo_perf"
):
    choices = FaithfulChoices.except_for(names)
    form = faithful_form(policy, "CLARABEL")
    result = faithful_result(trace, counts, form, SITE, SETTINGS, choices=choices)
    return {r.job_id: r for r in result.jobs}


def test_each_choice_turned_back_to_ours_changes_what_it_should() -> None:
    late = [job("a", "one", 100_000, arrival_s=10.0), job("b", "one", 100, arrival_s=500.0)]
    # recompute: "b" is allocated at the first round end after it arrives, 10 + 2 x 360 s.
    assert run_except(late, {"v100": 2}, "recompute")["b"].start_s == pytest.approx(730.0)
    idle = [job("a", "one", 10, arrival_s=10.0), job("b", "one", 100, arrival_s=100.0),
            job("c", "one", 100, arrival_s=5000.0)]  # fmt: skip
    # idle: rounds every 360 s from 100 s while "b" waits; the reset is due at 10 + 1920 s.
    assert run_except(idle, {"v100": 2}, "idle")["b"].start_s == pytest.approx(100.0 + 6 * 360.0)
    # idle and recompute: allocated and started as it arrives.
    assert run_except(idle, {"v100": 2}, "idle,recompute")["b"].start_s == pytest.approx(100.0)
    # steps: 0.7 x 360 = 252 steps a round, no step lost to int().
    pair = [job("a", "odd", 1000), job("b", "one", 1080)]
    assert run_except(pair, {"v100": 2}, "steps")["a"].end_s == pytest.approx(1000 / 0.7)
    # drops: the 2-GPU job runs its last step instead of failing.
    dropped = [job("p", "pair", 361, gpus=2)]
    assert run_except(dropped, {"v100": 2}, "drops")["p"].end_s == pytest.approx(361.0)


def test_faithful_except_names_are_checked() -> None:
    assert FaithfulChoices.except_for("walk, shares").ours == ("shares", "walk")
    assert FaithfulChoices.except_for("").ours == ()
    with pytest.raises(ConfigError, match=r"--faithful-except 'speed': expected names of"):
        FaithfulChoices.except_for("walk,speed")


def test_a_job_slower_than_a_step_a_round_is_dropped_or_refused() -> None:
    # 0.7 steps/s and 1 s rounds: int(0.7) = 0 steps, every round fails, the job is dropped
    # (Gavel); without drops it could never progress, which is an error, not a hang.
    trace = [job("a", "odd", 10)]
    short = SimSettings(round_s=1.0)
    result = faithful_result(
        trace, {"v100": 1}, faithful_form("fifo_perf", "CLARABEL"), SITE, short
    )
    assert result.completed == 0
    with pytest.raises(SimulationError, match="not one whole step in a 1 s round"):
        faithful_result(
            trace,
            {"v100": 1},
            faithful_form("fifo_perf", "CLARABEL"),
            SITE,
            short,
            choices=FaithfulChoices.except_for("drops"),
        )
