"""Scheduling what was never profiled, in simulation: the policy decides on estimates and the
neutral prior, learns each job's rates as it runs, and explores (`hetsched simulate
--unprofiled`; core/throughput/prior.py, core/explore.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from slurm_hetsched.core.explore import ExploreSettings, Stint
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.problem import SiteData, table_rate
from slurm_hetsched.core.throughput.prior import with_estimates, without
from slurm_hetsched.data_files import shipped_gpu_types, shipped_throughputs
from slurm_hetsched.rounds.clocks import SimClock
from slurm_hetsched.rounds.tick import Tick, TickSettings
from slurm_hetsched.sim.cluster import SimulatedCluster
from slurm_hetsched.sim.generate import generate_trace
from slurm_hetsched.sim.layout import nodes_from_counts
from slurm_hetsched.sim.run import SimSettings, simulate
from slurm_hetsched.sim.traces import read_shipped_trace
from slurm_hetsched.store.memory import MemoryStore

CATALOG = shipped_gpu_types()
TABLE = shipped_throughputs()
TRUTH = with_estimates(TABLE, CATALOG, prior=False)
NO_TABLE = with_estimates(without(TABLE, every=True), CATALOG)
NODES = nodes_from_counts({"v100": 8, "p100": 8, "k80": 8})


def test_with_no_table_every_stint_is_on_a_type_the_job_runs_on_and_learning_finds_the_truth() -> (
    None
):
    trace = generate_trace(12, seed=3, table=TABLE, rate_per_hour=4.0)
    clock = SimClock()
    cluster = SimulatedCluster(trace, NODES, TRUTH, clock, reports_rates=True)
    site = SiteData(NO_TABLE, CATALOG)
    tick = Tick(get_policy("max_min_fairness_perf"), site, cluster, MemoryStore(), TickSettings())
    by_id = {job.job_id: job for job in trace}
    targets: set[tuple[str, str]] = set()
    learned: dict[str, dict[str, float]] = {}
    for _ in range(20_000):
        record = tick.run_round()
        for key, text in record.plan.exploring.items():
            stint = Stint.from_text(text)
            assert stint is not None
            job = by_id[key]
            # Never a type the job cannot run on (the true table's 0s are known from the start).
            assert table_rate(TRUTH, job.job_class, stint.target, job.num_gpus) > 0
            targets.add((key, stint.target))
        for job in record.snapshot.jobs:
            learned[job.key] = dict(job.measured_steps_per_s)
        if cluster.done:
            break
        if cluster.active == 0:  # nothing to run until the next arrival: jump there
            clock.sleep_until(cluster.next_arrival_s() or clock.now())
        else:
            clock.sleep_until(clock.now() + 360.0)
    assert cluster.done
    assert len(targets) >= len(trace)  # every job explored at least one type
    # What was learned is the truth, for every type a job was measured on.
    measured_types = 0
    for key, rates in learned.items():
        job = by_id[key]
        for gpu_type, rate in rates.items():
            true = table_rate(TRUTH, job.job_class, gpu_type, job.num_gpus)
            assert rate == pytest.approx(true) or rate == 0.0 == true
            measured_types += rate > 0
    assert measured_types > 1.5 * len(trace)  # stints measured more than where jobs started


def test_learning_from_nothing_stays_close_to_knowing_the_table() -> None:
    """On Gavel's shipped 96-job trace, the policy without any table (estimates, the neutral
    prior, learning and stints) completes every job, with an average JCT near the run that
    knows the true table; without stints it does worse (benchmarks/unprofiled.py has figures)."""
    trace = read_shipped_trace("max_min_fairness", table=TABLE)
    policy = get_policy("max_min_fairness_perf")
    known = simulate(trace, NODES, policy, SiteData(TRUTH, CATALOG))
    learned = simulate(trace, NODES, policy, SiteData(NO_TABLE, CATALOG), truth=TRUTH)
    blind = simulate(
        trace,
        NODES,
        policy,
        SiteData(NO_TABLE, CATALOG),
        SimSettings(explore=ExploreSettings(enabled=False)),
        truth=TRUTH,
    )
    assert learned.completed == blind.completed == known.completed == len(trace)
    assert learned.exploration_stints > 0 and blind.exploration_stints == 0
    assert "class(es) in no table" in learned.estimates and known.estimates == ""
    assert learned.avg_jct_s <= 1.15 * known.avg_jct_s
    assert learned.avg_jct_s < blind.avg_jct_s


def hetsched(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_hetsched.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_command_line_marks_what_is_estimated() -> None:
    done = hetsched(
        "simulate", "--trace", "max_min_fairness", "--cluster", "v100=4,p100=4,k80=4",
        "--policy", "max_min_fairness_perf", "--unprofiled", "k80", "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "k80 estimated from datasheet figures" in done.stdout
    assert "stints" in done.stdout
    # A cluster of a type the table never measured: simulated on its estimate, marked.
    done = hetsched(
        "simulate", "--trace", "max_min_fairness", "--cluster", "a100=4,v100=4",
        "--policy", "max_min_fairness_perf", "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "a100 estimated from datasheet figures" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--unprofiled", "zz9"], "zz9 not a column of the throughput table"),
        (["--unprofiled", "k80", "--gavel-faithful"], "--unprofiled: not with --gavel-faithful"),
    ],
)
def test_bad_unprofiled_requests_are_one_clear_line(args: list[str], message: str) -> None:
    done = hetsched(
        "simulate", "--trace", "max_min_fairness", "--cluster", "v100=4,p100=4,k80=4",
        "--policy", "max_min_fairness_perf", "--no-progress", *args,
    )  # fmt: skip
    assert done.returncode != 0
    assert message in done.stderr
