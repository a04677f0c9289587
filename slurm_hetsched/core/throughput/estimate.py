"""Speed estimates for GPU types the throughput table has no column for, from datasheet figures
(docs/throughput.md, "Estimates for unprofiled types").

The model: a class's steps/s on GPU type t is

    r_t = s * C_t ** w * B_t ** (1 - w)

with C_t the type's compute (dense FP16/BF16 tensor TFLOPS; FP32 for a type without fast half
precision), B_t its memory bandwidth (GB/s), both from `gpu_types.toml`; w in [0, 1] the
share of compute in what limits training, and s the class's own scale. The share is fitted once
per table, over every class on the types it profiles (least squares in log space, each row with
its own scale): with two or three profiled types a share per class overfits (on Gavel's table
a per-class share predicts a left-out type worse than a fixed one), a share per table does not.
The scale comes from the class's own measured rates. With no table at all the share is the
neutral 0.5: compute and bandwidth alike.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from slurm_hetsched.core.model import GpuType
from slurm_hetsched.core.throughput.table import ThroughputTable

# The share with nothing to fit it on: compute and memory bandwidth weigh alike.
NEUTRAL_SHARE = 0.5
# Shares tried by the fit: a grid fine enough that the fit's error is the model's, not the grid's.
_SHARES = np.linspace(0.0, 1.0, 201)


@dataclass(frozen=True, slots=True)
class Figures:
    """What predicts a GPU type's training speed: compute (TFLOPS) and memory bandwidth (GB/s)."""

    compute: float
    bandwidth: float


def type_figures(gpu_type: GpuType) -> Figures | None:
    """The type's figures from its catalog entry; None if it lacks compute or bandwidth."""
    compute = gpu_type.fp16_tflops or gpu_type.fp32_tflops
    if not compute or not gpu_type.mem_bw_gbs:
        return None
    return Figures(compute=compute, bandwidth=gpu_type.mem_bw_gbs)


def catalog_figures(catalog: Mapping[str, GpuType]) -> dict[str, Figures]:
    """Figures of every catalog type that has them."""
    found = {name: type_figures(gpu_type) for name, gpu_type in catalog.items()}
    return {name: figures for name, figures in found.items() if figures is not None}


def fit_share(rows: Iterable[Mapping[str, float]], figures: Mapping[str, Figures]) -> float:
    """The compute share w that best explains `rows` (each: GPU type -> steps/s of one class),
    each row with its own scale; types without figures and rates <= 0 are left out, and so
    are rows with fewer than two such types. NEUTRAL_SHARE if no row is left."""
    log_c: list[np.ndarray] = []
    log_b: list[np.ndarray] = []
    log_r: list[np.ndarray] = []
    for row in rows:
        usable = [t for t, r in row.items() if r > 0 and t in figures]
        if len(usable) < 2:
            continue
        log_c.append(np.log([figures[t].compute for t in usable]))
        log_b.append(np.log([figures[t].bandwidth for t in usable]))
        log_r.append(np.log([row[t] for t in usable]))
    if not log_r:
        return NEUTRAL_SHARE
    errors = np.zeros(len(_SHARES))
    for c, b, r in zip(log_c, log_b, log_r, strict=True):
        # residual of each share, before the row's scale: r - (w c + (1 - w) b)
        residual = r[None, :] - (_SHARES[:, None] * c[None, :] + (1 - _SHARES[:, None]) * b)
        centred = residual - residual.mean(axis=1, keepdims=True)  # the best scale per share
        errors += (centred**2).sum(axis=1)
    return float(_SHARES[int(np.argmin(errors))])


def estimate_rates(
    rates: Mapping[str, float],
    figures: Mapping[str, Figures],
    share: float,
    targets: Sequence[str],
) -> dict[str, float]:
    """Steps/s on each of `targets` from the class's measured `rates` (GPU type -> steps/s)
    and the share: the class's scale is the geometric mean over its measured types with
    figures. A target without figures, or a class with no such measured type, is left out
    (nothing to go on)."""
    known = [t for t, r in rates.items() if r > 0 and t in figures]
    if not known:
        return {}

    def shape(gpu_type: str) -> float:
        f = figures[gpu_type]
        return share * math.log(f.compute) + (1 - share) * math.log(f.bandwidth)

    log_scale = sum(math.log(rates[t]) - shape(t) for t in known) / len(known)
    return {t: math.exp(log_scale + shape(t)) for t in targets if t in figures}


@dataclass(frozen=True, slots=True)
class LeaveOneOut:
    """How well a left-out type is predicted: mean |log(predicted / measured)| over every
    (row, left-out type) with a measured rate and two other measured types."""

    estimator_error: float
    neutral_error: float
    predictions: int
    shares: Mapping[str, float]  # left-out type -> the share fitted without it


def leave_one_type_out(table: ThroughputTable, figures: Mapping[str, Figures]) -> LeaveOneOut:
    """Predict each type of `table` from the others, for every row: with the share fitted on
    the other types (the estimator) and with NEUTRAL_SHARE (the neutral prior)."""
    types = [t for t in table.gpu_types if t in figures]
    rows = [dict(zip(table.gpu_types, row.tolist(), strict=True)) for row in table.rows.values()]
    estimator: list[float] = []
    neutral: list[float] = []
    shares: dict[str, float] = {}
    for left_out in types:
        others = [t for t in types if t != left_out]
        share = fit_share(({t: row[t] for t in others} for row in rows), figures)
        shares[left_out] = share
        for row in rows:
            measured = {t: row[t] for t in others if row[t] > 0}
            if row[left_out] <= 0 or len(measured) < 2:
                continue
            for fitted, errors in ((share, estimator), (NEUTRAL_SHARE, neutral)):
                guess = estimate_rates(measured, figures, fitted, [left_out])[left_out]
                errors.append(abs(math.log(guess / row[left_out])))
    if not estimator:
        return LeaveOneOut(math.nan, math.nan, 0, shares)
    return LeaveOneOut(
        estimator_error=float(np.mean(estimator)),
        neutral_error=float(np.mean(neutral)),
        predictions=len(estimator),
        shares=shares,
    )
