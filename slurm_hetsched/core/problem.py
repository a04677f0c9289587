"""From what the cluster looks like to what a policy solves: `ClusterSnapshot` -> `Problem`.

One function for the simulator and the live controller, so both give every policy the same
problem for the same cluster.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from slurm_hetsched.core.costs import EnergyModel, SiteEnergy
from slurm_hetsched.core.memory_fit import misfits
from slurm_hetsched.core.model import (
    SUBLINEAR_EXPONENT,
    Account,
    ClusterSnapshot,
    GpuType,
    InvalidProblemError,
    Placement,
    Problem,
    Reservation,
)
from slurm_hetsched.core.throughput import ThroughputTable, UnknownJobClassError, rescale_row
from slurm_hetsched.core.throughput.rescale import prior_scaled


@dataclass(frozen=True, slots=True)
class SiteData:
    """The site's data that turns a snapshot into a problem.

    Attributes:
        table: steps/s per job class, GPU type and GPU count.
        gpu_types: per GPU type price and power (`gpu_types.toml`).
        energy: electricity price, PUE, node base power.
        accounts: Slurm account -> its weight and inner policy (hierarchical policies).
    """

    table: ThroughputTable
    gpu_types: Mapping[str, GpuType] = field(default_factory=dict)
    energy: SiteEnergy = field(default_factory=SiteEnergy)
    accounts: Mapping[str, Account] = field(default_factory=dict)


def build_problem(
    snapshot: ClusterSnapshot,
    site: SiteData,
    running: Mapping[str, Placement] | None = None,
    *,
    mixed_gangs: bool = False,
    reservations: Mapping[str, Reservation] | None = None,
) -> Problem:
    """The problem of the jobs and free GPUs in `snapshot`.

    Columns are the snapshot's GPU types; capacity is each type's free GPUs on available
    nodes. A job's throughput on a type is the table's steps/s for its class at its GPU count
    (0 where the table has no such column: it cannot run there), rescaled by the job's own
    measurements where it has any (`Job.measured_steps_per_s`), and 0 on every type with less
    memory than one of its GPUs needs (`Job.mem_gib`, core/memory_fit.py).

    Args:
        snapshot: the cluster now.
        site: throughput table, GPU type data, energy data, accounts.
        running: job -> where it runs now, for the placement policies (ANDREAS keeps or
            re-plans these); jobs that left the snapshot are ignored.
        mixed_gangs: for a policy that places gangs across GPU types (`Problem.mixed_gangs`).
        reservations: the schedules a reservation policy (oasis) admitted last round
            (`Problem.reservations`); those of jobs that left are dropped.

    Raises:
        InvalidProblemError: a job whose class the table does not know, or that no GPU type of
            the cluster can run (named), or no GPUs at all while jobs wait.
    """
    jobs = snapshot.jobs
    gpu_types = snapshot.gpu_types
    known = [t for t in gpu_types if t in site.table.gpu_types]
    keys = [(job.job_class, job.num_gpus) for job in jobs]
    try:
        found = site.table.matrix(keys, known) if keys else np.zeros((0, len(known)))
    except UnknownJobClassError as exc:
        raise InvalidProblemError(f"{exc}; the job is {_job_named(snapshot, exc)}") from None
    throughput = np.zeros((len(jobs), len(gpu_types)))
    for j, t in enumerate(gpu_types):
        if t in known:
            throughput[:, j] = found[:, known.index(t)]
    from_table = throughput.copy()
    for m, job in enumerate(jobs):
        if job.measured_steps_per_s:
            # 0 measured: known not to run there (a simulated job's memory need, for one).
            ruled_out = [j for j, t in enumerate(gpu_types) if job.measured_steps_per_s.get(t) == 0]
            measured = {t: v for t, v in job.measured_steps_per_s.items() if v != 0}
            if site.table.is_prior(job.job_class) and measured:
                # A class in no table: its own reports set the scale, unclipped (the prior
                # only knows the ratios between types); rescale_row then learns each type.
                throughput[m] = prior_scaled(throughput[m], gpu_types, measured)
            if measured:
                # Online estimate: the job's own measurements rescale its profile row.
                throughput[m] = rescale_row(
                    throughput[m], gpu_types, measured, job_id=job.key
                ).steps_per_s
            throughput[m, ruled_out] = 0.0
    # Memory: no job runs on a type with less memory than one of its GPUs needs
    # (core/memory_fit.py); last, so no rescale or measurement brings a rate back.
    too_small = misfits(jobs, gpu_types, site.gpu_types)
    throughput[too_small] = 0.0
    spread = _spread_throughput(site.table, keys, known, gpu_types, throughput)
    has_steps = all(job.steps_remaining is not None for job in jobs)
    due = [math.nan if job.due_s is None else job.due_s for job in jobs]
    slo = [math.inf if job.slo_s is None else job.slo_s for job in jobs]
    prices = [_entry(site, t).price_per_hour for t in gpu_types]
    ids = {job.key for job in jobs}
    flexible = any(job.allowed_gpus for job in jobs)
    return Problem(
        job_ids=tuple(job.key for job in jobs),
        gpu_types=gpu_types,
        throughput=throughput,
        capacity=snapshot.capacity(gpu_types),
        num_gpus=np.array([job.num_gpus for job in jobs], dtype=np.int64),
        weight=np.array([job.weight for job in jobs], dtype=float),
        job_accounts=tuple(job.account for job in jobs),
        accounts=dict(site.accounts),
        arrival_s=np.array([job.arrival_s for job in jobs], dtype=float),
        now_s=snapshot.now_s,
        steps=(np.array([job.steps_remaining for job in jobs], dtype=float) if has_steps else None),
        due_s=np.array(due, dtype=float) if any(job.due_s is not None for job in jobs) else None,
        tardiness_weight=np.array([job.tardiness_weight for job in jobs], dtype=float),
        slo_s=np.array(slo, dtype=float) if any(job.slo_s is not None for job in jobs) else None,
        price_per_hour=None if None in prices else np.array(prices, dtype=float),
        nodes=snapshot.nodes,
        running={j: p for j, p in (running or {}).items() if j in ids},
        allowed_gpus=(
            tuple(job.allowed_gpus or (job.num_gpus,) for job in jobs) if flexible else None
        ),
        throughput_at=(
            _throughput_at(snapshot, site.table, known, too_small, throughput, from_table)
            if flexible
            else None
        ),
        energy=EnergyModel.from_catalog(site.gpu_types, site.energy, gpu_types),
        utilities=(
            tuple(job.the_utility() for job in jobs)
            if any(job.utility is not None for job in jobs)
            else None
        ),
        restart_s=(
            np.array([math.nan if j.restart_s is None else j.restart_s for j in jobs], float)
            if any(job.restart_s is not None for job in jobs)
            else None
        ),
        throughput_spread=spread,
        attained_gpu_s=(
            np.array([job.attained_gpu_s for job in jobs], dtype=float)
            if any(job.attained_gpu_s for job in jobs)
            else None
        ),
        mixed_gangs=mixed_gangs,
        preemptible=(
            tuple(job.preemptible for job in jobs)
            if not all(job.preemptible for job in jobs)
            else None
        ),
        reservations={j: r for j, r in (reservations or {}).items() if j in ids},
    )


def _spread_throughput(
    table: ThroughputTable,
    keys: list[tuple[str, int]],
    known: list[str],
    gpu_types: tuple[str, ...],
    throughput: np.ndarray,
) -> np.ndarray | None:
    """(n_jobs, n_types) steps/s with each job's GPUs spread over nodes: its (rescaled)
    throughput times the table's unconsolidated / consolidated ratio at its GPU count, capped
    at 1 (spreading never speeds a job up; a few of Gavel's figures say so, within their
    noise). None when no job has more than one GPU (nothing can be spread)."""
    if not any(count > 1 for _class, count in keys):
        return None
    together = table.matrix(keys, known)
    apart = table.matrix(keys, known, consolidated=False)
    ratio = np.ones((len(keys), len(gpu_types)))
    for j, t in enumerate(gpu_types):
        if t in known:
            k = known.index(t)
            ratio[:, j] = np.divide(
                apart[:, k], together[:, k], out=np.ones(len(keys)), where=together[:, k] > 0
            )
    single = np.array([count == 1 for _class, count in keys])
    ratio[single] = 1.0
    return np.asarray(throughput * np.clip(ratio, 0.0, 1.0))


# table_rate keeps at most this many answers per table.
MEMO_ENTRIES = 100_000


def table_rate(
    table: ThroughputTable, job_class: str, gpu_type: str, num_gpus: int, *, spread: bool = False
) -> float:
    """Steps/s of `job_class` on `num_gpus` GPUs of `gpu_type`, as the policies see it.

    The table's figure where it has this GPU count for the class (unconsolidated when the GPUs
    are spread over nodes); otherwise scaled from the nearest count it has (the largest below,
    else the smallest above) by (num_gpus / count) ** SUBLINEAR_EXPONENT, as
    `Problem.rates_at` does. 0 = cannot run there.
    """
    key = ("table_rate", job_class, gpu_type, num_gpus, spread)
    known = table.memo.get(key)
    if known is not None:
        return float(known)
    counts = table.gpu_counts(job_class)
    if num_gpus in counts or not counts:
        rate = table.steps_per_s(job_class, gpu_type, num_gpus, consolidated=not spread)
    else:
        below = [g for g in counts if g < num_gpus]
        base = max(below) if below else min(counts)
        rate = table.steps_per_s(job_class, gpu_type, base, consolidated=not spread)
        rate = float(rate * (num_gpus / base) ** SUBLINEAR_EXPONENT)
    if len(table.memo) >= MEMO_ENTRIES:  # bounded, whatever GPU counts jobs ask for
        table.memo.clear()
    table.memo[key] = rate  # after the lookups: an unknown class raises and is not kept
    return rate


def placement_rate(table: ThroughputTable, job_class: str, placement: Placement) -> float:
    """Steps/s of a job of `job_class` on `placement`: on one type, the table's rate at the
    placement's GPU count (unconsolidated when spread over nodes); on several types (a gang
    across types, synchronous data parallel), count x the per-GPU rate of its slowest type,
    i.e. the lowest of its types' rates at that count. 0 = cannot run there."""
    spread = len(placement.nodes) > 1
    return min(
        table_rate(table, job_class, gpu_type, placement.num_gpus, spread=spread)
        for gpu_type in placement.gpu_types
    )


def _throughput_at(
    snapshot: ClusterSnapshot,
    table: ThroughputTable,
    known: list[str],
    too_small: np.ndarray,
    throughput: np.ndarray,
    from_table: np.ndarray,
) -> np.ndarray:
    """(n_jobs, n_types, widest allowed count) steps/s at each count the table has for the
    job's class; NaN elsewhere (Problem.rates_at scales those); 0 at every count on the types
    `too_small` (n_jobs, n_types) rules out for the job (more GPUs need as much memory each).
    A job's measurements rescale its row at num_gpus (`throughput` against `from_table`, the
    table's): its other counts are rescaled alike, so its sizes compare on one scale."""
    gpu_types = snapshot.gpu_types
    width = max(max(job.allowed_gpus or (job.num_gpus,)) for job in snapshot.jobs)
    out = np.full((len(snapshot.jobs), len(gpu_types), width), np.nan)
    for m, job in enumerate(snapshot.jobs):
        for g in table.gpu_counts(job.job_class):
            if g <= width:
                row = dict(zip(known, table.row(job.job_class, g, known), strict=True))
                out[m, :, g - 1] = [row.get(t, 0.0) for t in gpu_types]
    out[too_small] = 0.0
    scale = np.divide(
        throughput, from_table, out=np.ones_like(throughput, dtype=float), where=from_table > 0
    )
    return np.asarray(out * scale[:, :, None])


def _entry(site: SiteData, gpu_type: str) -> GpuType:
    return site.gpu_types.get(gpu_type) or GpuType(gpu_type)


def _job_named(snapshot: ClusterSnapshot, exc: UnknownJobClassError) -> str:
    """The first job whose class the table lacks, for the message."""
    for job in snapshot.jobs:
        if repr(job.job_class) in str(exc):
            return repr(job.key)
    return "unknown"
