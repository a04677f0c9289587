"""A throughput table that answers for every GPU type with figures and every job class: estimated
columns for the catalog's types the table never profiled, and a neutral row for a class it does
not know (docs/throughput.md, "Estimates for unprofiled types").

`with_estimates(table, catalog)` is what every entry point (controller, simulate, allocate)
decides on. Its estimates are marked: `ThroughputTable.estimated_types` names the estimated
columns, `ThroughputTable.is_prior(job_class)` tells a class answered by the neutral row.
Online learning (core.throughput.rescale, through the job's measurements) then replaces both
with what the job is measured doing.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from slurm_hetsched.core.model import GpuType
from slurm_hetsched.core.model.problem import SUBLINEAR_EXPONENT
from slurm_hetsched.core.throughput.estimate import (
    Figures,
    catalog_figures,
    estimate_rates,
    fit_share,
)
from slurm_hetsched.core.throughput.table import ThroughputTable

# A class nobody profiled is taken, before its first report, to run at the speed of the
# table's median class (its scale), with the table's compute share: a typical model.
_NO_TABLE_LOG_SCALE = 0.0  # 1 step/s on a type of compute x bandwidth = 1, with no table at all


@dataclass(frozen=True, slots=True)
class NeutralPrior:
    """The row of a class no table knows: r_t = s * C_t ** w * B_t ** (1 - w), with the table's
    share w and the median scale s of its classes at one GPU; other counts scale sublinearly
    from there (as `core.problem.table_rate` does). A type without figures gets 0: nothing is
    known of it, so nothing is run there until a profile says so.

    Attributes:
        gpu_types: the columns of the rows it gives (the table's, estimated ones included).
        figures: GPU type -> its compute and bandwidth.
        share: the compute share w.
        log_scale: log s.
    """

    gpu_types: tuple[str, ...]
    figures: Mapping[str, Figures]
    share: float
    log_scale: float

    def row(self, num_gpus: int) -> np.ndarray:
        """Steps/s on each of `gpu_types` at `num_gpus`, shape (len(gpu_types),)."""
        boost = max(1, num_gpus) ** SUBLINEAR_EXPONENT
        return np.array([self.rate(t) * boost for t in self.gpu_types])

    def rate(self, gpu_type: str) -> float:
        """Steps/s on one GPU of `gpu_type`; 0.0 without figures."""
        f = self.figures.get(gpu_type)
        if f is None:
            return 0.0
        shape = self.share * math.log(f.compute) + (1 - self.share) * math.log(f.bandwidth)
        return math.exp(self.log_scale + shape)


def with_estimates(
    table: ThroughputTable, catalog: Mapping[str, GpuType], *, prior: bool = True
) -> ThroughputTable:
    """`table` with a column for every catalog type that has figures and no column yet, each
    row estimated from its own measured types (`estimate_rates` with the share fitted on the
    whole table), and (with `prior`) a `NeutralPrior` for classes it does not know.

    A row with no measured type of known figures stays 0 in the new columns (nothing to go on);
    the unconsolidated and space-sharing variants are not estimated (NaN and 0: the
    consolidated estimate stands for both, and no pair shares an estimated type).
    """
    figures = catalog_figures(catalog)
    rows = [dict(zip(table.gpu_types, row.tolist(), strict=True)) for row in table.rows.values()]
    share = fit_share(rows, figures)
    added = tuple(sorted(t for t in figures if t not in table.gpu_types))
    gpu_types = table.gpu_types + added
    new_rows: dict[tuple[str, int], np.ndarray] = {}
    for key, row in table.rows.items():
        measured = dict(zip(table.gpu_types, row.tolist(), strict=True))
        guess = estimate_rates(measured, figures, share, added)
        new_rows[key] = np.concatenate([row, [guess.get(t, 0.0) for t in added]])
    unconsolidated = {
        key: np.concatenate([row, np.full(len(added), math.nan)])
        for key, row in table.unconsolidated.items()
    }
    packed = {
        key: np.concatenate([pair, np.zeros((len(added), pair.shape[1]))])
        for key, pair in table.packed.items()
    }
    neutral = NeutralPrior(gpu_types, figures, share, _median_log_scale(table, figures, share))
    return ThroughputTable(
        gpu_types=gpu_types,
        rows=new_rows,
        unconsolidated=unconsolidated,
        packed=packed,
        source=table.source,
        estimated_types=tuple(dict.fromkeys(table.estimated_types + added)),
        prior=neutral if prior else None,
    )


def _median_log_scale(
    table: ThroughputTable, figures: Mapping[str, Figures], share: float
) -> float:
    """The median over the table's classes at one GPU of log s (each class's scale, as
    `estimate_rates` takes it); the neutral scale when the table has none."""
    scales: list[float] = []
    for (_, num_gpus), row in table.rows.items():
        if num_gpus != 1:
            continue
        usable = [(t, r) for t, r in zip(table.gpu_types, row.tolist(), strict=True) if r > 0]
        usable = [(t, r) for t, r in usable if t in figures]
        if not usable:
            continue
        logs = [
            math.log(r)
            - share * math.log(figures[t].compute)
            - (1 - share) * math.log(figures[t].bandwidth)
            for t, r in usable
        ]
        scales.append(sum(logs) / len(logs))
    return float(np.median(scales)) if scales else _NO_TABLE_LOG_SCALE


def estimated_entries(
    table: ThroughputTable, job_class: str, gpu_types: Sequence[str]
) -> list[str]:
    """Which of `gpu_types` the table's figure for `job_class` is an estimate on: every one
    for a class answered by the neutral prior, else the estimated columns among them."""
    if table.is_prior(job_class):
        return list(gpu_types)
    return [t for t in gpu_types if t in table.estimated_types]


def without(
    table: ThroughputTable, gpu_types: Sequence[str] = (), *, every: bool = False
) -> ThroughputTable:
    """`table` as a site that never profiled `gpu_types` would have it (their columns gone), or
    with nothing at all (`every`): what `hetsched simulate --unprofiled` lets the policy see."""
    if every:
        return ThroughputTable(gpu_types=(), rows={}, unconsolidated={}, packed={}, source="none")
    keep = [i for i, t in enumerate(table.gpu_types) if t not in set(gpu_types)]
    return ThroughputTable(
        gpu_types=tuple(table.gpu_types[i] for i in keep),
        rows={key: row[keep] for key, row in table.rows.items()},
        unconsolidated={key: row[keep] for key, row in table.unconsolidated.items()},
        packed={key: pair[keep] for key, pair in table.packed.items()},
        source=table.source,
    )
