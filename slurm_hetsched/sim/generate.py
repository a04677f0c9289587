"""Synthetic job traces in the style of Gavel's evaluation (docs/simulation.md, "Trace formats").

`generate_trace` draws, from one seed:
- arrivals: the first job at 0, then exponential gaps with mean `lam_s` (a Poisson process of
  rate 3600 / lam_s jobs per hour), as Gavel's generator does; lam_s = 0 puts every job at 0
  (a static trace); or, with `bursts`, bursts of jobs separated by quiet periods
  (sim/arrivals.py);
- durations: Gavel's Philly-derived mixture, log-uniform in minutes: with probability 0.8
  10^U(1.5, 3) minutes, else 10^U(3, 4) minutes (Gavel's `utils._generate_duration`);
- GPU counts: "multi" 70% 1, 10% 2, 15% 4, 5% 8 (Gavel's `_generate_scale_factor`), or
  "single" (all 1), or any {count: probability};
- job classes: uniform over the classes the throughput table can run at the drawn GPU count
  (positive steps/s on the reference type and on at least one of the cluster's types);
- steps: duration x steps/s of the class at its GPU count on the reference GPU type (V100 by
  default, as in Gavel's `generate_job`), rounded to a whole number (at least 1);
- optionally due dates (arrival + U(a, b) x the job's shortest execution time over the GPU
  types) with tardiness weights, Gavel-style SLOs, priority weights, accounts, and restart
  costs (one per job class, uniform in a range; sim/restart_costs.py).

Every quantity has its own random stream spawned from the seed, so changing one option (say the
GPU-count mix) leaves the others' draws (arrivals, durations) unchanged. No I/O here except in
`run_generate`, the entry point of `hetsched trace generate`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slurm_hetsched import data_files
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.arrivals import Bursts, bursty_arrivals, poisson_arrivals
from slurm_hetsched.sim.restart_costs import check_restart_range, draw_restart_costs
from slurm_hetsched.sim.traces import REFERENCE_GPU_TYPE, Trace, TraceJob, write_trace

GPU_MIXES: Mapping[str, Mapping[int, float]] = {
    "single": {1: 1.0},
    "multi": {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05},
}


@dataclass(frozen=True, slots=True)
class DurationBand:
    """With `probability`, a duration of 10^U(log10_min_lo, log10_min_hi) minutes."""

    probability: float
    log10_min_lo: float
    log10_min_hi: float


PHILLY_DURATIONS = (DurationBand(0.8, 1.5, 3.0), DurationBand(0.2, 3.0, 4.0))
# Gavel's SLO choices (multiples of the job's duration on the reference type), 1/3 each.
GAVEL_SLO_FACTORS = (1.2, 2.0, 10.0)
# Gavel's multi-priority jobs: 20% of the jobs have weight 5.
GAVEL_WEIGHT_MIX: Mapping[float, float] = {1.0: 0.8, 5.0: 0.2}
# Streams spawned from the seed by position: a new one goes last, so older ones keep their draws.
_STREAMS = (
    "arrival", "gpus", "duration", "class", "due", "tardiness", "slo", "weight", "account",
    "restart",
)  # fmt: skip
_DECIMALS = 3  # due times are rounded to milliseconds, as arrivals are


def generate_trace(
    n_jobs: int,
    *,
    seed: int,
    table: ThroughputTable,
    rate_per_hour: float | None = None,
    lam_s: float | None = None,
    bursts: Bursts | None = None,
    mix: str | Mapping[int, float] = "multi",
    durations: Sequence[DurationBand] = PHILLY_DURATIONS,
    reference_gpu_type: str = REFERENCE_GPU_TYPE,
    gpu_types: Sequence[str] | None = None,
    due_factor: tuple[float, float] | None = None,
    tardiness_weight: tuple[float, float] = (1.0, 1.0),
    slo_factors: Sequence[float] | None = None,
    weight_mix: Mapping[float, float] | None = None,
    accounts: Sequence[str] = (),
    restart_range: tuple[float, float] | None = None,
) -> Trace:
    """A seeded synthetic trace (see the module docstring for the distributions).

    Args:
        n_jobs: how many jobs (>= 1); job ids are "0", "1", ... in arrival order.
        seed: the seed; the same arguments and seed give the same trace.
        table: the throughput table classes and steps/s come from.
        rate_per_hour: mean arrivals per hour (> 0); give exactly one of this, `lam_s` and
            `bursts`.
        lam_s: mean seconds between arrivals (Gavel's `lam`); 0 = every job at time 0.
        bursts: bursty arrivals instead of Poisson ones (`Bursts`, sim/arrivals.py).
        mix: "multi", "single" or {num_gpus: probability} (probabilities sum to 1).
        durations: the duration mixture; default Gavel's Philly-derived one.
        reference_gpu_type: the type steps are derived on (steps = duration x its steps/s).
        gpu_types: the cluster's types; a class is drawn only if one of them can run it at
            the drawn count, and due dates use the fastest. Default: every type of `table`.
        due_factor: (a, b): due_s = arrival_s + U(a, b) x the job's shortest execution time
            (total_steps / its highest steps/s over `gpu_types`); None for no due dates.
        tardiness_weight: (lo, hi): with due dates, each job's tardiness weight ~ U(lo, hi)
            (cost per second late); 0 without due dates.
        slo_factors: if given, slo_s = a factor drawn uniformly from these x the job's
            duration (Gavel: GAVEL_SLO_FACTORS); None for no SLOs.
        weight_mix: {weight: probability} (Gavel's multi-priority jobs: GAVEL_WEIGHT_MIX);
            None for weight 1.
        accounts: if given, each job's account is drawn uniformly from them.
        restart_range: (lo, hi) seconds: one restart cost per class of `table`, uniform in
            [lo, hi], becomes the `restart_s` of every job of that class (published
            checkpoint-restores: PUBLISHED_RESTART_RANGE_S); None leaves restart_s unset.

    Returns:
        The trace, in arrival order.

    Raises:
        ConfigError: naming the bad parameter, e.g. a mix that does not sum to 1, a reference
            type the table lacks, or a GPU count no class can run at.
    """
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1:
        raise ConfigError(f"n_jobs is {n_jobs!r}; expected a whole number >= 1")
    mean_gap_s = _mean_gap_s(rate_per_hour, lam_s, bursts)
    if restart_range is not None:
        restart_range = check_restart_range(restart_range, "restart_range")
    gpu_mix = _gpu_mix(mix)
    bands = _bands(durations)
    types_ = tuple(table.gpu_types if gpu_types is None else gpu_types)
    for name, value in (("reference_gpu_type", (reference_gpu_type,)), ("gpu_types", types_)):
        missing = [t for t in value if t not in table.gpu_types]
        if missing or not value:
            raise ConfigError(
                f"{name} {list(value)}: {missing or 'none'} not in the throughput table "
                f"({table.source or 'no source'}); its types: {list(table.gpu_types)}"
            )
    candidates = {n: _classes_at(table, n, reference_gpu_type, types_) for n in gpu_mix}
    for n, classes in candidates.items():
        if not classes:
            raise ConfigError(
                f"GPU-count mix: no job class of the throughput table runs on {n} GPUs of "
                f"{reference_gpu_type} and of one of {list(types_)}; drop {n} from the mix"
            )
    if due_factor is not None:
        _check_range("due_factor", due_factor, low=0.0, strict=True)
        _check_range("tardiness_weight", tardiness_weight, low=0.0, strict=False)
    if slo_factors is not None and (
        not slo_factors or not all(math.isfinite(f) and f > 0 for f in slo_factors)
    ):
        raise ConfigError(f"slo_factors {list(slo_factors)}: expected numbers > 0")
    weight_values, weight_p = (
        _distribution("weight_mix", weight_mix, positive_keys=True)
        if weight_mix is not None
        else (np.ones(1), np.ones(1))
    )

    rng = random_streams(seed, _STREAMS)
    if bursts is None:
        arrival = poisson_arrivals(n_jobs, mean_gap_s, rng["arrival"])  # (n_jobs,) s
    else:
        arrival, _ = bursty_arrivals(n_jobs, bursts, rng["arrival"])

    counts = np.array(sorted(gpu_mix), dtype=np.int64)
    num_gpus = rng["gpus"].choice(counts, size=n_jobs, p=[gpu_mix[int(n)] for n in counts])

    band = rng["duration"].choice(len(bands), size=n_jobs, p=[b.probability for b in bands])
    lo = np.array([b.log10_min_lo for b in bands])[band]
    hi = np.array([b.log10_min_hi for b in bands])[band]
    duration_s = 60.0 * 10.0 ** rng["duration"].uniform(lo, hi)  # (n_jobs,)

    pick = rng["class"].random(n_jobs)
    job_class: list[str] = []
    for n, u in zip(num_gpus, pick, strict=True):
        classes = candidates[int(n)]
        job_class.append(classes[min(int(u * len(classes)), len(classes) - 1)])

    keys = [(c, int(n)) for c, n in zip(job_class, num_gpus, strict=True)]
    reference_rate = table.matrix(keys, (reference_gpu_type,))[:, 0]  # (n_jobs,) steps/s
    steps = np.maximum(1, np.rint(duration_s * reference_rate)).astype(np.int64)

    due_s: list[float | None] = [None] * n_jobs
    tardiness = np.zeros(n_jobs)
    if due_factor is not None:
        best_rate = table.matrix(keys, types_).max(axis=1)  # (n_jobs,) steps/s, > 0 by choice
        factor = rng["due"].uniform(due_factor[0], due_factor[1], n_jobs)
        due = np.round(arrival + factor * steps / best_rate, _DECIMALS)
        due_s = [float(d) for d in due]
        tardiness = rng["tardiness"].uniform(tardiness_weight[0], tardiness_weight[1], n_jobs)
    slo_s: list[float | None] = [None] * n_jobs
    if slo_factors is not None:
        chosen = rng["slo"].choice(np.asarray(slo_factors, dtype=float), size=n_jobs)
        slo_s = [float(s) for s in chosen * duration_s]
    weight = rng["weight"].choice(weight_values, size=n_jobs, p=weight_p)
    account = (
        [str(a) for a in rng["account"].choice(np.asarray(accounts, dtype=object), n_jobs)]
        if accounts
        else [""] * n_jobs
    )
    restart_s = (
        draw_restart_costs(table.classes, restart_range, rng["restart"])
        if restart_range is not None
        else {}
    )

    source = f"generated (seed {seed})"
    return tuple(
        TraceJob(
            job_id=str(i),
            arrival_s=float(arrival[i]),
            job_class=job_class[i],
            num_gpus=int(num_gpus[i]),
            total_steps=int(steps[i]),
            weight=float(weight[i]),
            account=account[i],
            due_s=due_s[i],
            tardiness_weight=float(tardiness[i]),
            slo_s=slo_s[i],
            restart_s=restart_s.get(job_class[i]),
            source=source,
        )
        for i in range(n_jobs)
    )


def random_streams(seed: int, names: Sequence[str]) -> dict[str, np.random.Generator]:
    """One independent random stream per quantity, spawned from `seed`: drawing more of one
    quantity (more jobs) leaves the others' draws as they were."""
    spawned = np.random.SeedSequence(seed).spawn(len(names))
    return {name: np.random.default_rng(s) for name, s in zip(names, spawned, strict=True)}


def run_generate(
    output: str | Path,
    *,
    n_jobs: int,
    seed: int = 0,
    rate_per_hour: float | None = None,
    lam_s: float | None = None,
    bursts: Bursts | None = None,
    mix: str = "multi",
    fmt: str | None = None,
    throughputs: str | Path | None = None,
    reference_gpu_type: str = REFERENCE_GPU_TYPE,
    gpu_types: Sequence[str] | None = None,
    due_factor: tuple[float, float] | None = None,
    tardiness_weight: tuple[float, float] = (1.0, 1.0),
    restart_range: tuple[float, float] | None = None,
) -> str:
    """`hetsched trace generate`: generate a trace and write it in our JSONL or CSV format.

    Args:
        output: the file to write (.jsonl or .csv, or name the format with `fmt`).
        throughputs: a throughput file (docs/throughput.md); None for the shipped table.
        The others: as in `generate_trace`.

    Returns:
        A one-line summary for the user, e.g. "wrote 400 jobs to t.jsonl (...)".

    Raises:
        ConfigError: a bad parameter, or the throughput file cannot be read.
        ThroughputFormatError: the throughput file does not follow a known format.
        TraceError: the output format is not writable or the file cannot be written.
    """
    table = (
        data_files.shipped_throughputs()
        if throughputs is None
        else data_files.load_throughputs(Path(throughputs))
    )
    trace = generate_trace(
        n_jobs,
        seed=seed,
        table=table,
        rate_per_hour=rate_per_hour,
        lam_s=lam_s,
        bursts=bursts,
        mix=mix,
        reference_gpu_type=reference_gpu_type,
        gpu_types=gpu_types,
        due_factor=due_factor,
        tardiness_weight=tardiness_weight,
        restart_range=restart_range,
    )
    write_trace(output, trace, fmt)
    span_h = trace[-1].arrival_s / 3600
    kind = "Poisson" if bursts is None else "bursty"
    costs = (
        ""
        if restart_range is None
        else f", restart costs {restart_range[0]:g}-{restart_range[1]:g} s"
    )
    return (
        f"wrote {len(trace)} jobs to {output} ({mix} GPU-count mix, seed {seed}, "
        f"{kind} arrivals over {span_h:.1f} h{costs})"
    )


# ----------------------------------------------------------------------------------------------
# Parameter checks


def _mean_gap_s(rate_per_hour: float | None, lam_s: float | None, bursts: Bursts | None) -> float:
    """The Poisson arrivals' mean gap in seconds; 0 (unused) with bursts."""
    if sum(x is not None for x in (rate_per_hour, lam_s, bursts)) != 1:
        raise ConfigError(
            "give exactly one of rate_per_hour (jobs per hour, > 0), lam_s (mean seconds "
            "between arrivals, >= 0; 0 = all jobs at time 0) and bursts (bursty arrivals)"
        )
    if bursts is not None:
        return 0.0
    if rate_per_hour is not None:
        if not (math.isfinite(rate_per_hour) and rate_per_hour > 0):
            raise ConfigError(f"rate_per_hour is {rate_per_hour!r}; expected jobs per hour > 0")
        return 3600.0 / rate_per_hour
    assert lam_s is not None
    if not (math.isfinite(lam_s) and lam_s >= 0):
        raise ConfigError(f"lam_s is {lam_s!r}; expected mean seconds between arrivals >= 0")
    return lam_s


def _gpu_mix(mix: str | Mapping[int, float]) -> dict[int, float]:
    if isinstance(mix, str):
        if mix not in GPU_MIXES:
            raise ConfigError(f"GPU-count mix {mix!r} unknown; expected one of {list(GPU_MIXES)}")
        mix = GPU_MIXES[mix]
    bad = [n for n in mix if isinstance(n, bool) or not isinstance(n, int) or n < 1]
    if bad:
        raise ConfigError(f"GPU-count mix {dict(mix)}: counts {bad}; expected whole numbers >= 1")
    values, p = _distribution("GPU-count mix", mix, positive_keys=True)
    return {int(n): float(q) for n, q in zip(values, p, strict=True) if q > 0}


def _distribution(
    name: str, mix: Mapping[float, float] | Mapping[int, float], *, positive_keys: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(values, probabilities) of a {value: probability} mapping, checked."""
    values = np.array(list(mix), dtype=float)
    p = np.array(list(mix.values()), dtype=float)
    if (
        not len(p)
        or not np.all(np.isfinite(p))
        or np.any(p < 0)
        or not math.isclose(p.sum(), 1.0, abs_tol=1e-9)
        or (positive_keys and not np.all(values > 0))
    ):
        raise ConfigError(
            f"{name} {dict(mix)}: expected positive values with probabilities >= 0 summing to 1"
        )
    return values, p / p.sum()


def _bands(durations: Sequence[DurationBand]) -> tuple[DurationBand, ...]:
    bands = tuple(durations)
    p = [b.probability for b in bands]
    if (
        not bands
        or any(not (q >= 0) for q in p)
        or not math.isclose(sum(p), 1.0, abs_tol=1e-9)
        or any(
            not (math.isfinite(b.log10_min_lo) and b.log10_min_lo <= b.log10_min_hi) for b in bands
        )
        or any(not math.isfinite(b.log10_min_hi) for b in bands)
    ):
        raise ConfigError(
            f"durations {list(bands)}: expected bands with probabilities summing to 1 and "
            "log10_min_lo <= log10_min_hi"
        )
    return bands


def _check_range(name: str, value: tuple[float, float], *, low: float, strict: bool) -> None:
    a, b = value
    ok = math.isfinite(a) and math.isfinite(b) and a <= b and (a > low if strict else a >= low)
    if not ok:
        bound = f"> {low}" if strict else f">= {low}"
        raise ConfigError(f"{name} {value}: expected (a, b) with {bound} a <= b")


def _classes_at(
    table: ThroughputTable, num_gpus: int, reference_gpu_type: str, gpu_types: Sequence[str]
) -> tuple[str, ...]:
    """Classes with positive steps/s at `num_gpus` on the reference type and one of `gpu_types`."""
    out = []
    for job_class in table.classes:
        if (job_class, num_gpus) not in table.rows:
            continue
        if table.steps_per_s(job_class, reference_gpu_type, num_gpus) <= 0:
            continue
        if table.row(job_class, num_gpus, gpu_types).max() > 0:
            out.append(job_class)
    return tuple(out)
