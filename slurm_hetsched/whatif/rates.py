"""The jobs' steps/s in a what-if problem, from each job's `throughput` or its `class` in the
throughput table: per GPU type at its GPU count, at every GPU count it allows, and in pairs
packed on one GPU."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from slurm_hetsched.core.model import InvalidProblemError, PackedPairs
from slurm_hetsched.core.policies.packing import packed_pairs_from_table
from slurm_hetsched.core.throughput import ThroughputTable, UnknownJobClassError
from slurm_hetsched.data_files import shipped_throughputs
from slurm_hetsched.whatif.fields import check_types, non_negative, object_at


def throughput_row(
    job: Mapping[str, Any], num_gpus: int, gpu_types: tuple[str, ...], table: ThroughputTable | None
) -> list[float]:
    """The job's (n_types,) steps/s at `num_gpus`: from its `throughput` or its `class`."""
    where = f"job {job['id']!r}"
    if ("throughput" in job) == ("class" in job):
        raise InvalidProblemError(f"{where}: give exactly one of `throughput` and `class`")
    if "class" in job:
        table = table or shipped_throughputs()
        known = [t for t in gpu_types if t in table.gpu_types]
        try:
            found = dict(zip(known, table.row(str(job["class"]), num_gpus, known), strict=True))
        except UnknownJobClassError as exc:
            raise InvalidProblemError(f"{where}: {exc}") from None
        return [float(found.get(t, 0.0)) for t in gpu_types]  # no column: cannot run there
    per_type = object_at(job, "throughput", where)
    check_types(per_type, gpu_types, f"{where} / throughput")
    row = []
    for t in gpu_types:
        value = per_type.get(t, 0.0)
        if isinstance(value, Mapping):  # {"1": t1, "2": t2, ...} per GPU count
            value = value.get(str(num_gpus), 0.0)
        row.append(non_negative(value, f"{where} / throughput / {t!r}"))
    return row


def throughput_at(
    jobs: list[Mapping[str, Any]],
    allowed: list[tuple[int, ...] | None],
    gpu_types: tuple[str, ...],
    table: ThroughputTable | None,
) -> np.ndarray:
    """(n_jobs, n_types, max allowed count) steps/s at every GPU count; NaN = not given.

    A `throughput` given per GPU count fills the counts it names; a `class` fills the counts
    the table has for that class (a type without a column: 0, cannot run). The rest is NaN,
    for Problem.rates_at to scale.
    """
    width = max(max(a) for a in allowed if a is not None)
    out = np.full((len(jobs), len(gpu_types), width), np.nan)
    for m, job in enumerate(jobs):
        if "class" in job:
            table = table or shipped_throughputs()
            known = [t for t in gpu_types if t in table.gpu_types]
            for g in table.gpu_counts(str(job["class"])):
                if g <= width:
                    row = dict(zip(known, table.row(str(job["class"]), g, known), strict=True))
                    out[m, :, g - 1] = [row.get(t, 0.0) for t in gpu_types]
            continue
        for j, t in enumerate(gpu_types):
            value = object_at(job, "throughput", f"job {job['id']!r}").get(t, 0.0)
            if isinstance(value, Mapping):
                for count, rate in value.items():
                    at = f"job {job['id']!r} / throughput / {t!r} / {count!r}"
                    if not str(count).isdigit() or int(count) < 1:
                        raise InvalidProblemError(f"{at}: a GPU count must be a whole number >= 1")
                    if int(count) <= width:
                        out[m, j, int(count) - 1] = non_negative(rate, at)
            elif value == 0.0:
                out[m, j, :] = 0.0  # a type the job cannot run on, at any count
    return out


def packed_pairs(
    jobs: list[Mapping[str, Any]], ids: tuple[str, ...], gpu_types: tuple[str, ...]
) -> PackedPairs | None:
    """The pairs the jobs' `packed` keys give ({partner: {type: [a, b]}}), or None."""
    pairs: dict[tuple[int, int], np.ndarray] = {}
    for i, job in enumerate(jobs):
        where = f"job {job['id']!r} / packed"
        for partner, per_type in object_at(
            job, "packed", f"job {job['id']!r}", required=False
        ).items():
            if partner not in ids:
                raise InvalidProblemError(f"{where}: unknown partner job {partner!r}")
            if not isinstance(per_type, Mapping):
                raise InvalidProblemError(f"{where} / {partner!r}: expected {{type: [a, b]}}")
            check_types(per_type, gpu_types, f"{where} / {partner!r}")
            j = ids.index(partner)
            key = (min(i, j), max(i, j))
            if key in pairs:
                raise InvalidProblemError(f"{where}: the pair with {partner!r} is given twice")
            tput = np.zeros((len(gpu_types), 2))
            for t, value in per_type.items():
                if not isinstance(value, list) or len(value) != 2:
                    raise InvalidProblemError(f"{where} / {partner!r} / {t!r}: expected [a, b]")
                a, b = (non_negative(v, f"{where} / {partner!r} / {t!r}") for v in value)
                tput[gpu_types.index(t)] = (a, b) if i < j else (b, a)
            pairs[key] = tput
    if not pairs:
        return None
    keys = sorted(pairs)
    return PackedPairs(pairs=np.array(keys), throughput=np.array([pairs[k] for k in keys]))


def with_table_pairs(
    given: PackedPairs | None,
    jobs: list[Mapping[str, Any]],
    num_gpus: np.ndarray,
    gpu_types: tuple[str, ...],
    table: ThroughputTable | None,
) -> PackedPairs | None:
    """The given pairs plus every pair of `class` jobs the table lists together (same
    num_gpus); a pair given in the file wins over the table's."""
    with_class = [i for i, job in enumerate(jobs) if "class" in job]
    if len(with_class) < 2:
        return given
    found = packed_pairs_from_table(
        table or shipped_throughputs(),
        [str(jobs[i]["class"]) for i in with_class],
        num_gpus[with_class],
        gpu_types,
    )
    pairs: dict[tuple[int, int], np.ndarray] = {}
    if found is not None:
        for (a, b), tput in zip(found.pairs, found.throughput, strict=True):
            pairs[(with_class[a], with_class[b])] = tput
    if given is not None:
        for (a, b), tput in zip(given.pairs, given.throughput, strict=True):
            pairs[(int(a), int(b))] = tput
    if not pairs:
        return None
    keys = sorted(pairs)
    return PackedPairs(pairs=np.array(keys), throughput=np.array([pairs[k] for k in keys]))
