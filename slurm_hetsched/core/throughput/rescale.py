"""The online update of docs/interfaces.md: a job's measured steps/s rescale its throughput row
(`rescale_row`), with each measurement clipped to [MIN_FACTOR, MAX_FACTOR] of the profile.

The measurements are the job's own progress reports, so they are untrusted: bad values are
ignored and outliers clipped, each logged with the job and GPU type.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

# The package's name, which log lines have always shown for the online update.
logger = logging.getLogger("slurm_hetsched.core.throughput")

# Online update: one factor per job, clipped so a bad measurement cannot move a job's row by
# more than 5x either way (docs/interfaces.md).
MIN_FACTOR, MAX_FACTOR = 0.2, 5.0


@dataclass(frozen=True, slots=True)
class RescaledRow:
    """A job's throughput row after online measurements (see `rescale_row`).

    Attributes:
        steps_per_s: (n_types,) the job's estimated steps/s per type.
        factor: the one factor applied to types not measured yet (1.0 without measurements).
        outliers: types whose measured/profile ratio fell outside [0.2, 5] and was clipped.
    """

    steps_per_s: np.ndarray  # (n_types,)
    factor: float
    outliers: tuple[str, ...]


def rescale_row(
    profile: np.ndarray,
    gpu_types: Sequence[str],
    measured: Mapping[str, float],
    *,
    job_id: str = "",
) -> RescaledRow:
    """Online update of one job's throughputs from what it was measured doing.

    Each measured type gets the ratio measured / profile, clipped to [0.2, 5] (an outlier is
    logged, with the job and type); types not measured yet are scaled by one factor, the
    geometric mean of the clipped ratios, so the profile's ratios between GPU types stay
    until a type is measured itself (docs/interfaces.md). A type the profile says cannot run
    but that was measured running takes the measured value. Non-finite or non-positive
    measurements are ignored with a warning (the job's own report is untrusted input).

    Args:
        profile: (n_types,) steps/s from the table, at the job's num_gpus; 0 = cannot run.
        gpu_types: the column names of `profile`.
        measured: GPU type -> measured steps/s at the job's num_gpus (e.g. a windowed mean).
        job_id: for log messages only.

    Returns:
        The estimated row; `profile` itself is not modified.
    """
    profile = np.asarray(profile, dtype=float)
    estimate = profile.copy()
    log_ratios: list[float] = []
    outliers: list[str] = []
    for gpu_type, value in measured.items():
        if gpu_type not in gpu_types:
            logger.warning("job_id=%s measured on unknown GPU type %r; ignored", job_id, gpu_type)
            continue
        if not (math.isfinite(value) and value > 0):
            logger.warning("job_id=%s bad measurement %r on %s; ignored", job_id, value, gpu_type)
            continue
        j = list(gpu_types).index(gpu_type)
        if profile[j] <= 0:
            logger.info("job_id=%s runs on %s, which its profile says it cannot", job_id, gpu_type)
            estimate[j] = value
            continue
        ratio = value / profile[j]
        clipped = min(max(ratio, MIN_FACTOR), MAX_FACTOR)
        if clipped != ratio:
            outliers.append(gpu_type)
            logger.warning(
                "job_id=%s gpu_type=%s measured %.4g steps/s vs profile %.4g (ratio %.3g): "
                "outlier, clipped to %.3g",
                job_id,
                gpu_type,
                value,
                profile[j],
                ratio,
                clipped,
            )
        estimate[j] = profile[j] * clipped
        log_ratios.append(math.log(clipped))
    factor = math.exp(sum(log_ratios) / len(log_ratios)) if log_ratios else 1.0
    unmeasured = np.array([t not in measured for t in gpu_types]) & (profile > 0)
    estimate[unmeasured] = profile[unmeasured] * factor
    estimate.flags.writeable = False
    return RescaledRow(steps_per_s=estimate, factor=factor, outliers=tuple(outliers))


def prior_scaled(
    prior: np.ndarray, gpu_types: Sequence[str], measured: Mapping[str, float]
) -> np.ndarray:
    """A neutral prior row (a class in no table) moved to the scale of the job's measurements:
    times the geometric mean of measured / prior over the measured types where both are
    positive and finite; unchanged without such a type. Not clipped: the prior says nothing
    of a class's scale, only of the ratios between types, which `rescale_row` then learns
    within its bounds."""
    ratios = [
        math.log(value / prior[i])
        for i, t in enumerate(gpu_types)
        if (value := measured.get(t)) is not None
        and math.isfinite(value)
        and value > 0
        and prior[i] > 0
    ]
    if not ratios:
        return np.asarray(prior, dtype=float)
    return np.asarray(prior, dtype=float) * math.exp(sum(ratios) / len(ratios))
