"""sim/arrivals.py and its use by the generator: bursty arrivals (bursts of at most N jobs, each
within its window, quiet periods between), Poisson arrivals unchanged, restart costs per class,
all deterministic for a seed."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.data_files import shipped_throughputs
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.arrivals import Bursts, bursty_arrivals, poisson_arrivals
from slurm_hetsched.sim.generate import generate_trace


@pytest.fixture(scope="module")
def table() -> ThroughputTable:
    return shipped_throughputs()


def split_bursts(arrival_s: np.ndarray, window_s: float) -> list[np.ndarray]:
    """Bursts recovered from arrival times alone: a burst starts at the first job after the
    last one's window and holds every job within `window_s` of its start. Exact when bursts
    are as documented (the next burst starts after the window of the one before)."""
    bursts: list[list[float]] = []
    for t_s in arrival_s:
        if bursts and t_s <= bursts[-1][0] + window_s:
            bursts[-1].append(float(t_s))
        else:
            bursts.append([float(t_s)])
    return [np.array(b) for b in bursts]


def test_bursts_hold_at_most_the_max_within_their_window_with_gaps_between() -> None:
    shape = Bursts(jobs_max=30, window_s=1800.0, quiet_s=7200.0)
    arrival, burst = bursty_arrivals(2000, shape, np.random.default_rng(11))
    assert len(arrival) == len(burst) == 2000
    assert arrival[0] == 0.0
    assert np.all(np.diff(arrival) >= 0)
    assert np.all(np.diff(burst) >= 0) and burst[0] == 0
    starts = []
    for k in range(int(burst[-1]) + 1):
        times = arrival[burst == k]
        assert 1 <= len(times) <= 30
        assert times[-1] - times[0] <= 1800.0
        starts.append(times[0])
    gaps = np.diff(starts) - 1800.0  # from the end of each window to the next burst
    assert np.all(gaps > 0)
    # The same bursts come back from the times alone, so a trace shows them too.
    recovered = split_bursts(arrival, 1800.0)
    assert [len(b) for b in recovered] == list(np.bincount(burst))


def test_burst_sizes_and_quiet_periods_follow_their_distributions() -> None:
    # Sizes uniform in 1..20 (mean 10.5), quiet periods exponential with mean 3600 s, over
    # about 5000 bursts: 4 standard errors of each mean as tolerance.
    shape = Bursts(jobs_max=20, window_s=600.0, quiet_s=3600.0)
    arrival, burst = bursty_arrivals(50_000, shape, np.random.default_rng(5))
    sizes = np.bincount(burst)[:-1]  # the last burst is cut to the jobs left
    n = len(sizes)
    assert n > 4000
    sd_size = math.sqrt((20**2 - 1) / 12)
    assert abs(sizes.mean() - 10.5) < 4 * sd_size / math.sqrt(n)
    assert sizes.min() == 1 and sizes.max() == 20
    starts = np.array([arrival[burst == k][0] for k in range(len(sizes) + 1)])
    quiet = np.diff(starts) - 600.0
    assert abs(quiet.mean() - 3600.0) < 4 * 3600.0 / math.sqrt(len(quiet))
    # Within a burst the jobs after the first spread over the window: mean offset ~ 300 s.
    offsets = np.concatenate([arrival[burst == k][1:] - starts[k] for k in range(len(sizes))])
    assert abs(offsets.mean() - 300.0) < 4 * (600.0 / math.sqrt(12)) / math.sqrt(len(offsets))


def test_bursty_arrivals_are_deterministic_per_seed() -> None:
    shape = Bursts()
    a = bursty_arrivals(500, shape, np.random.default_rng(2))
    b = bursty_arrivals(500, shape, np.random.default_rng(2))
    c = bursty_arrivals(500, shape, np.random.default_rng(3))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])


def test_zero_quiet_puts_bursts_back_to_back() -> None:
    arrival, burst = bursty_arrivals(300, Bursts(10, 100.0, 0.0), np.random.default_rng(0))
    starts = [arrival[burst == k][0] for k in range(int(burst[-1]) + 1)]
    assert np.allclose(np.diff(starts), 100.0)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"jobs_max": 0}, "burst jobs max 0"),
        ({"jobs_max": 2.5}, "burst jobs max 2.5"),
        ({"window_s": 0.0}, "burst window 0.0 s"),
        ({"window_s": math.inf}, "burst window inf s"),
        ({"quiet_s": -1.0}, "burst quiet period -1.0 s"),
    ],
)
def test_bad_burst_shapes(kwargs: dict[str, float], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        Bursts(**kwargs)  # type: ignore[arg-type]


def test_poisson_arrivals_are_gavels() -> None:
    arrival = poisson_arrivals(4, 100.0, np.random.default_rng(1))
    gaps = np.random.default_rng(1).exponential(100.0, 3)
    assert arrival == pytest.approx(np.round(np.concatenate(([0.0], np.cumsum(gaps))), 3))
    assert np.array_equal(poisson_arrivals(3, 0.0, np.random.default_rng(1)), np.zeros(3))


# ----------------------------------------------------------------------------------------------
# In generated traces


def test_a_bursty_trace_comes_in_bursts_and_keeps_the_other_draws(table: ThroughputTable) -> None:
    shape = Bursts(jobs_max=25, window_s=3600.0, quiet_s=6 * 3600.0)
    trace = generate_trace(400, seed=4, table=table, bursts=shape)
    arrival = np.array([j.arrival_s for j in trace])
    assert arrival[0] == 0.0 and np.all(np.diff(arrival) >= 0)
    assert [j.job_id for j in trace] == [str(i) for i in range(400)]
    bursts = split_bursts(arrival, 3600.0)
    assert len(bursts) >= 400 / 25
    assert all(len(b) <= 25 and b[-1] - b[0] <= 3600.0 for b in bursts)
    assert generate_trace(400, seed=4, table=table, bursts=shape) == trace
    assert generate_trace(400, seed=5, table=table, bursts=shape) != trace
    # Only the arrivals differ from a Poisson trace of the same seed.
    poisson = generate_trace(400, seed=4, table=table, rate_per_hour=4.0)
    keep = [(j.job_class, j.num_gpus, j.total_steps) for j in trace]
    assert keep == [(j.job_class, j.num_gpus, j.total_steps) for j in poisson]


def test_arrival_options_are_exclusive(table: ThroughputTable) -> None:
    with pytest.raises(ConfigError, match="give exactly one of rate_per_hour"):
        generate_trace(5, seed=0, table=table, rate_per_hour=1.0, bursts=Bursts())
    with pytest.raises(ConfigError, match="give exactly one of rate_per_hour"):
        generate_trace(5, seed=0, table=table)


def test_restart_range_gives_one_cost_per_class_in_range(table: ThroughputTable) -> None:
    trace = generate_trace(600, seed=8, table=table, rate_per_hour=6.0, restart_range=(25, 250))
    by_class: dict[str, set[float | None]] = {}
    for job in trace:
        by_class.setdefault(job.job_class, set()).add(job.restart_s)
    assert len(by_class) > 20
    assert all(len(costs) == 1 for costs in by_class.values())
    costs = [next(iter(c)) for c in by_class.values()]
    assert all(c is not None and 25.0 <= c <= 250.0 for c in costs)
    assert len(set(costs)) == len(costs)  # drawn per class, not one for all
    again = generate_trace(600, seed=8, table=table, rate_per_hour=6.0, restart_range=(25, 250))
    assert again == trace
    # The costs are a stream of their own: without them the trace is the same but for restart_s.
    plain = generate_trace(600, seed=8, table=table, rate_per_hour=6.0)
    assert all(j.restart_s is None for j in plain)
    assert [replace(j, restart_s=None) for j in trace] == list(plain)


def test_a_class_keeps_its_cost_whatever_else_the_trace_holds(table: ThroughputTable) -> None:
    # Costs are drawn for every class of the table, so a shorter trace gives the same ones.
    long = generate_trace(300, seed=1, table=table, lam_s=60, restart_range=(25, 250))
    short = generate_trace(20, seed=1, table=table, lam_s=60, restart_range=(25, 250))
    cost = {j.job_class: j.restart_s for j in long}
    assert all(cost[j.job_class] == j.restart_s for j in short if j.job_class in cost)


def test_bad_restart_range(table: ThroughputTable) -> None:
    with pytest.raises(ConfigError, match="restart_range 250,25"):
        generate_trace(5, seed=0, table=table, lam_s=1, restart_range=(250, 25))
