"""sim/generate.py: Gavel-style synthetic traces, seeded, with the documented distributions.

The statistical checks use 20,000 jobs and tolerances of about 4 standard errors, so a correct
generator fails them with negligible probability (and the seeds are fixed anyway).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.data_files import shipped_throughputs
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.generate import (
    GAVEL_SLO_FACTORS,
    GAVEL_WEIGHT_MIX,
    GPU_MIXES,
    DurationBand,
    generate_trace,
    run_generate,
)
from slurm_hetsched.sim.traces import TraceJob, format_trace, read_trace, validate_trace

N = 20_000


@pytest.fixture(scope="module")
def table() -> ThroughputTable:
    return shipped_throughputs()


@pytest.fixture(scope="module")
def big(table: ThroughputTable) -> tuple[TraceJob, ...]:
    return generate_trace(N, seed=7, table=table, rate_per_hour=1.2, due_factor=(1.5, 3.0))


def durations_min(trace: tuple[TraceJob, ...], table: ThroughputTable) -> np.ndarray:
    """Each job's duration in minutes on the reference type (v100), recovered from its steps."""
    rates = table.matrix([(j.job_class, j.num_gpus) for j in trace], ["v100"])[:, 0]
    return np.array([j.total_steps for j in trace]) / rates / 60.0


def within(observed: float, expected: float, n: int) -> bool:
    """|observed - expected| <= 4 standard errors of a proportion."""
    return abs(observed - expected) <= 4 * math.sqrt(expected * (1 - expected) / n)


# ----------------------------------------------------------------------------------------------
# Determinism


def test_same_seed_same_trace(table: ThroughputTable) -> None:
    a = generate_trace(300, seed=3, table=table, lam_s=600, due_factor=(1, 2))
    b = generate_trace(300, seed=3, table=table, lam_s=600, due_factor=(1, 2))
    assert a == b
    assert format_trace(a, "jsonl") == format_trace(b, "jsonl")


def test_different_seeds_differ(table: ThroughputTable) -> None:
    a = generate_trace(50, seed=0, table=table, lam_s=600)
    b = generate_trace(50, seed=1, table=table, lam_s=600)
    assert [j.arrival_s for j in a] != [j.arrival_s for j in b]
    assert [j.job_class for j in a] != [j.job_class for j in b]
    assert [j.total_steps for j in a] != [j.total_steps for j in b]


def test_rate_per_hour_and_lam_s_are_the_same_knob(table: ThroughputTable) -> None:
    by_rate = generate_trace(100, seed=5, table=table, rate_per_hour=1.2)
    by_lam = generate_trace(100, seed=5, table=table, lam_s=3000)
    assert by_rate == by_lam


def test_options_do_not_shift_other_draws(table: ThroughputTable) -> None:
    multi = generate_trace(500, seed=2, table=table, lam_s=600, mix="multi")
    single = generate_trace(500, seed=2, table=table, lam_s=600, mix="single")
    due = generate_trace(500, seed=2, table=table, lam_s=600, due_factor=(1, 2))
    assert [j.arrival_s for j in multi] == [j.arrival_s for j in single]
    assert np.allclose(durations_min(multi, table), durations_min(single, table), rtol=1e-3)
    assert [(j.job_class, j.total_steps) for j in due] == [
        (j.job_class, j.total_steps) for j in multi
    ]


# ----------------------------------------------------------------------------------------------
# Distributions


def test_gpu_count_mix(big: tuple[TraceJob, ...]) -> None:
    counts = np.array([j.num_gpus for j in big])
    assert set(np.unique(counts)) == {1, 2, 4, 8}
    philly = {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}  # Gavel's _generate_scale_factor
    assert GPU_MIXES["multi"] == philly
    for n, p in philly.items():
        share = float(np.mean(counts == n))
        assert within(share, p, N), (n, share, p)


def test_single_mix_is_all_one_gpu(table: ThroughputTable) -> None:
    trace = generate_trace(2000, seed=1, table=table, lam_s=60, mix="single")
    assert {j.num_gpus for j in trace} == {1}
    assert {j.job_class for j in trace} == set(table.classes)  # all 26 classes get drawn


def test_custom_gpu_mix(table: ThroughputTable) -> None:
    trace = generate_trace(4000, seed=1, table=table, lam_s=60, mix={1: 0.5, 2: 0.5})
    share = np.mean([j.num_gpus == 2 for j in trace])
    assert within(float(share), 0.5, 4000)


def test_duration_mix(big: tuple[TraceJob, ...], table: ThroughputTable) -> None:
    minutes = durations_min(big, table)
    # Steps are rounded to whole steps: allow that much slack at the ends.
    assert minutes.min() >= 10**1.5 * 0.999 and minutes.max() <= 10**4 * 1.001
    log_min = np.log10(minutes)
    long = log_min >= 3.0
    assert within(float(np.mean(long)), 0.2, N)
    # Log-uniform inside each band: the mean of log10(minutes) sits mid-band, and half the jobs
    # of a band fall below its midpoint.
    for mask, lo, hi in ((~long, 1.5, 3.0), (long, 3.0, 4.0)):
        band = log_min[mask]
        width = hi - lo
        assert abs(band.mean() - (lo + hi) / 2) <= 4 * width / math.sqrt(12 * band.size)
        assert within(float(np.mean(band < (lo + hi) / 2)), 0.5, band.size)
        quartile = float(np.mean(band < lo + width / 4))
        assert within(quartile, 0.25, band.size)


def test_custom_durations(table: ThroughputTable) -> None:
    one_hour = (DurationBand(1.0, math.log10(60), math.log10(60)),)
    trace = generate_trace(200, seed=0, table=table, lam_s=60, durations=one_hour)
    assert np.allclose(durations_min(trace, table), 60.0, rtol=1e-3)


def test_steps_come_from_the_reference_type(table: ThroughputTable) -> None:
    on_v100 = generate_trace(300, seed=4, table=table, lam_s=60)
    on_k80 = generate_trace(300, seed=4, table=table, lam_s=60, reference_gpu_type="k80")
    for a, b in zip(on_v100, on_k80, strict=True):
        if a.job_class != b.job_class:
            continue  # the candidate classes differ where k80 cannot run a class
        ratio = b.total_steps / a.total_steps
        expected = table.steps_per_s(a.job_class, "k80", a.num_gpus) / table.steps_per_s(
            a.job_class, "v100", a.num_gpus
        )
        assert ratio == pytest.approx(expected, rel=1e-3)


def test_poisson_arrivals(big: tuple[TraceJob, ...]) -> None:
    arrivals = np.array([j.arrival_s for j in big])
    assert arrivals[0] == 0.0
    assert np.all(np.diff(arrivals) >= 0)
    gaps = np.diff(arrivals)
    lam = 3600 / 1.2
    se = lam / math.sqrt(gaps.size)
    assert abs(gaps.mean() - lam) <= 4 * se
    # Exponential gaps: standard deviation equal to the mean, and P(gap > mean) = 1/e.
    assert gaps.std() == pytest.approx(gaps.mean(), rel=0.05)
    assert within(float(np.mean(gaps > lam)), math.exp(-1), gaps.size)


def test_lam_zero_is_a_static_trace(table: ThroughputTable) -> None:
    trace = generate_trace(20, seed=0, table=table, lam_s=0)
    assert {j.arrival_s for j in trace} == {0.0}


def test_classes_run_at_their_gpu_count(big: tuple[TraceJob, ...], table: ThroughputTable) -> None:
    pairs = {(j.job_class, j.num_gpus) for j in big}
    for job_class, n in pairs:
        assert table.steps_per_s(job_class, "v100", n) > 0
    eight = {c for c, n in pairs if n == 8}
    assert eight == {c for c in table.classes if table.steps_per_s(c, "v100", 8) > 0}
    assert len(eight) == 19
    validate_trace(big, table, table.gpu_types)
    assert [j.job_id for j in big[:3]] == ["0", "1", "2"]


def test_gpu_types_restrict_the_classes(table: ThroughputTable) -> None:
    trace = generate_trace(3000, seed=0, table=table, lam_s=60, gpu_types=["k80"])
    assert ("ResNet-50 (batch size 128)", 2) not in {(j.job_class, j.num_gpus) for j in trace}
    validate_trace(trace, table, ["k80"])


def test_due_dates(big: tuple[TraceJob, ...], table: ThroughputTable) -> None:
    keys = [(j.job_class, j.num_gpus) for j in big]
    fastest = table.matrix(keys, table.gpu_types).max(axis=1)
    min_exec = np.array([j.total_steps for j in big]) / fastest
    factor = np.array([j.due_s - j.arrival_s for j in big]) / min_exec  # type: ignore[operator]
    assert factor.min() >= 1.5 - 1e-3 and factor.max() <= 3.0 + 1e-3
    assert abs(factor.mean() - 2.25) <= 4 * 1.5 / math.sqrt(12 * N)
    assert {j.tardiness_weight for j in big} == {1.0}


def test_no_due_dates_by_default(table: ThroughputTable) -> None:
    trace = generate_trace(100, seed=0, table=table, lam_s=60)
    assert all(j.due_s is None and j.tardiness_weight == 0.0 and j.slo_s is None for j in trace)
    assert {j.weight for j in trace} == {1.0} and {j.account for j in trace} == {""}


def test_tardiness_weights_slos_weights_and_accounts(table: ThroughputTable) -> None:
    trace = generate_trace(
        3000,
        seed=0,
        table=table,
        lam_s=60,
        due_factor=(1.0, 1.0),
        tardiness_weight=(0.5, 2.0),
        slo_factors=GAVEL_SLO_FACTORS,
        weight_mix=GAVEL_WEIGHT_MIX,
        accounts=("a", "b"),
    )
    tw = np.array([j.tardiness_weight for j in trace])
    assert tw.min() >= 0.5 and tw.max() <= 2.0 and len(set(tw)) > 100
    slo_over_duration = np.array([j.slo_s for j in trace]) / (durations_min(trace, table) * 60)
    assert set(np.round(slo_over_duration, 2)) == set(GAVEL_SLO_FACTORS)
    assert within(float(np.mean([j.weight == 5.0 for j in trace])), 0.2, 3000)
    assert within(float(np.mean([j.account == "a" for j in trace])), 0.5, 3000)


# ----------------------------------------------------------------------------------------------
# Bad parameters


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"lam_s": 60, "rate_per_hour": 1.0}, "exactly one of rate_per_hour"),
        ({}, "exactly one of rate_per_hour"),
        ({"rate_per_hour": 0.0}, "rate_per_hour is 0.0"),
        ({"lam_s": -1.0}, "lam_s is -1.0"),
        ({"lam_s": 60, "mix": "many"}, "mix 'many' unknown"),
        ({"lam_s": 60, "mix": {1: 0.5, 2: 0.4}}, "probabilities >= 0 summing to 1"),
        ({"lam_s": 60, "mix": {0: 1.0}}, "counts [0]"),
        ({"lam_s": 60, "mix": {16: 1.0}}, "no job class of the throughput table runs on 16 GPUs"),
        ({"lam_s": 60, "reference_gpu_type": "a100"}, "reference_gpu_type ['a100']"),
        ({"lam_s": 60, "gpu_types": ["v100", "h100"]}, "gpu_types ['v100', 'h100']: ['h100']"),
        ({"lam_s": 60, "due_factor": (2.0, 1.0)}, "due_factor (2.0, 1.0)"),
        ({"lam_s": 60, "slo_factors": ()}, "slo_factors []"),
        ({"lam_s": 60, "durations": (DurationBand(0.5, 1, 2),)}, "durations"),
    ],
)
def test_bad_parameters(table: ThroughputTable, kwargs: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        generate_trace(10, seed=0, table=table, **kwargs)  # type: ignore[arg-type]
    assert expected in str(info.value)


def test_bad_job_count(table: ThroughputTable) -> None:
    with pytest.raises(ConfigError, match="n_jobs is 0"):
        generate_trace(0, seed=0, table=table, lam_s=1)


# ----------------------------------------------------------------------------------------------
# The command-line entry point


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_run_generate_writes_the_generated_trace(
    tmp_path: Path, table: ThroughputTable, suffix: str
) -> None:
    path = tmp_path / f"gen{suffix}"
    summary = run_generate(path, n_jobs=40, seed=9, rate_per_hour=2.0, due_factor=(1.0, 2.0))
    assert summary.startswith(f"wrote 40 jobs to {path} (multi GPU-count mix, seed 9")
    expected = generate_trace(40, seed=9, table=table, rate_per_hour=2.0, due_factor=(1.0, 2.0))
    assert read_trace(path) == expected


def test_run_generate_with_a_throughput_file(tmp_path: Path, table: ThroughputTable) -> None:
    import json

    small = {"format": "hetsched-throughputs/1", "throughputs": {"A3C": {"1": {"v100": 2.0}}}}
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(small))
    out = tmp_path / "t.csv"
    run_generate(out, n_jobs=10, seed=0, lam_s=60, mix="single", throughputs=profile)
    assert {j.job_class for j in read_trace(out)} == {"A3C"}
    with pytest.raises(ConfigError, match="runs on 2 GPUs"):
        run_generate(out, n_jobs=10, seed=0, lam_s=60, throughputs=profile)
