"""Checks of single fields of the what-if JSON: each returns the value or raises
InvalidProblemError naming where it is and what was expected."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from slurm_hetsched.core.model import InvalidProblemError
from slurm_hetsched.core.utility import Utility, UtilityFieldError, utility_from_fields

UTILITY_KEYS = ("kind", "umax", "target_s", "sharp")


def check_keys(data: Mapping[str, Any], valid: set[str], where: str) -> None:
    """Reject keys of `data` not in `valid`, listing the valid ones."""
    unknown = sorted(set(data) - valid)
    if unknown:
        raise InvalidProblemError(
            f"{where}: unknown key(s) {unknown}; valid keys are {sorted(valid)}"
        )


def check_types(per_type: Mapping[str, Any], gpu_types: tuple[str, ...], where: str) -> None:
    """Reject a GPU type key that is not one of the problem's types."""
    unknown = [t for t in per_type if t not in gpu_types]
    if unknown:
        raise InvalidProblemError(
            f"{where}: unknown GPU type {unknown[0]!r}; the problem's types are {list(gpu_types)}"
        )


def object_at(
    data: Mapping[str, Any], key: str, where: str, required: bool = True
) -> Mapping[str, Any]:
    """`data[key]`, which must be an object; {} when absent and not required."""
    if key not in data:
        if required:
            raise InvalidProblemError(f"{where}: `{key}` is missing")
        return {}
    value = data[key]
    if not isinstance(value, Mapping):
        raise InvalidProblemError(f"{where}: `{key}` must be an object, got {value!r}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number_at(
    data: Mapping[str, Any],
    key: str,
    default: float,
    positive: bool = False,
    where: str | None = None,
) -> float:
    """`data[key]` (default if absent) as a float; not NaN, and > 0 if `positive`."""
    where = where or f"job {data.get('id')!r}"
    value = data.get(key, default)
    if not _is_number(value) or math.isnan(value):
        raise InvalidProblemError(f"{where}: `{key}` must be a number, got {value!r}")
    if positive and not value > 0:
        raise InvalidProblemError(f"{where}: `{key}` must be > 0, got {value!r}")
    return float(value)


def non_negative(value: Any, where: str) -> float:
    """`value` as a float, finite and >= 0."""
    if not _is_number(value) or not math.isfinite(value) or value < 0:
        raise InvalidProblemError(f"{where}: {value!r} must be a finite number >= 0")
    return float(value)


def whole_count(value: Any, where: str) -> int:
    """`value` as an int, a whole number >= 0."""
    if not _is_number(value) or value < 0 or value != int(value):
        raise InvalidProblemError(f"{where}: {value!r} must be a whole number >= 0")
    return int(value)


def utility_at(
    job: Mapping[str, Any], due_s: float | None, tardiness_weight: float
) -> Utility | None:
    """The job's `utility` object ({"kind", "umax", "target_s", "sharp"}, all optional, as the
    job spec's `utility=`, `umax=`, `target=` and `sharp=`; core/utility.py
    `utility_from_fields`), or None when the job has none."""
    if "utility" not in job:
        return None
    where = f"job {job.get('id')!r} / utility"
    raw = object_at(job, "utility", f"job {job.get('id')!r}")
    check_keys(raw, set(UTILITY_KEYS), where)
    numbers: dict[str, float | None] = {}
    for key in UTILITY_KEYS[1:]:
        value = raw.get(key)
        if value is not None and not _is_number(value):
            raise InvalidProblemError(f"{where}: `{key}` must be a number, got {value!r}")
        numbers[key] = None if value is None else float(value)
    try:
        return utility_from_fields(
            raw.get("kind"),
            numbers["umax"],
            numbers["target_s"],
            numbers["sharp"],
            due_s,
            tardiness_weight,
            kind_key="kind",
        )
    except UtilityFieldError as exc:
        raise InvalidProblemError(f"{where}: {exc}") from None
