"""A utility's value at many completion times at once (numpy), for the schedule searches that
weigh many ends (OASiS's dynamic programme and its payoff bound). core/utility.py stays on
the standard library: the job wrapper imports it. Pure."""

from __future__ import annotations

import numpy as np

from slurm_hetsched.core.utility import Utility

_HOUR_S = 3600.0


def utility_values(utility: Utility, completions_s: np.ndarray, arrival_s: float) -> np.ndarray:
    """`utility.value` of each completion time in `completions_s` (same clock as
    `arrival_s`)."""
    when = np.asarray(completions_s, dtype=float)
    elapsed = np.maximum(when - arrival_s, 0.0)
    top = utility.max_utility
    if utility.kind == "sigmoid":
        assert utility.target_s is not None
        exponent = utility.sharpness_per_h * (elapsed - utility.target_s) / _HOUR_S
        with np.errstate(over="ignore"):
            out = top / (1.0 + np.exp(np.minimum(exponent, 700.0)))
        return np.where(exponent > 700, 0.0, out)
    if utility.kind == "linear":
        assert utility.target_s is not None
        return top * np.maximum(0.0, 1.0 - elapsed / utility.target_s)
    if utility.kind == "deadline":
        deadline = utility.due_s if utility.target_s is None else arrival_s + utility.target_s
        if deadline is None:
            return np.zeros_like(when)
        return np.where(when <= deadline, top, 0.0)
    if utility.kind == "tardiness" and utility.due_s is not None:
        late_s = np.maximum(0.0, when - utility.due_s)
        return np.maximum(0.0, top - utility.tardiness_weight * late_s)
    return np.full_like(when, top)
