"""How the value types stay frozen and valid: checked, read-only copies of the arrays and mappings
they are given, and `InvalidProblemError`, raised when a value is malformed.

Every value type of `core.model` normalises its fields in `__post_init__` with these helpers, so
a frozen value stays frozen: its arrays cannot be written and its mappings cannot be changed.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from slurm_hetsched.errors import HetschedError

T = TypeVar("T")

EMPTY: Mapping[str, Any] = types.MappingProxyType({})  # default of every mapping field


class InvalidProblemError(HetschedError, ValueError):
    """A problem (or a piece of one) is malformed; the message names the job, type or key."""


def frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A read-only copy of `value` ({} for None)."""
    if not value:
        return EMPTY  # the one shared empty mapping: nothing to copy
    return types.MappingProxyType(dict(value))


def frozen_array(
    value: Any,
    dtype: type,
    what: str,
    shape: tuple[int, ...],
    *,
    allow_nan: bool = False,
    allow_inf: bool = False,
) -> np.ndarray:
    """A read-only copy of `value` with the given dtype and shape; raises on a mismatch.

    NaN and +inf are rejected unless allowed (they mean "none" for due dates and SLOs).
    """
    try:
        # A read-only array of the right type is kept as it is (nobody can write into it);
        # anything else is copied.
        keep = isinstance(value, np.ndarray) and not value.flags.writeable
        array: np.ndarray = np.array(value, dtype=dtype, copy=not keep or value.dtype != dtype)
    except (TypeError, ValueError) as exc:
        raise InvalidProblemError(f"{what}: not numeric ({exc})") from None
    if array.shape != shape:
        raise InvalidProblemError(f"{what}: shape {array.shape}, expected {shape}")
    # One sum finds most arrays clean (a NaN or an infinity makes it non-finite); only then,
    # or when it overflows, is each value looked at.
    if array.dtype.kind == "f" and not math.isfinite(array.sum()):
        bad = np.isneginf(array)
        if not allow_nan:
            bad |= np.isnan(array)
        if not allow_inf:
            bad |= np.isposinf(array)
        if bad.any():
            raise InvalidProblemError(f"{what}: non-finite value {array[bad].flat[0]!r}")
    if array.flags.writeable:
        array.flags.writeable = False
    return array


def set_field(obj: object, name: str, value: object) -> None:
    """Assign a field of a frozen dataclass during its own __post_init__ (normalisation)."""
    object.__setattr__(obj, name, value)


def copy_with(value: T, names: tuple[str, ...], name: str, new: object) -> T:
    """`value` (a frozen dataclass whose fields are `names`) with field `name` set to `new`,
    without __init__: the caller has checked `new`, and the rest was checked when `value`
    was made (the rounds' hot path, where a full rebuild and re-check cost the most)."""
    copy = object.__new__(type(value))
    for field_name in names:
        object.__setattr__(copy, field_name, getattr(value, field_name))
    object.__setattr__(copy, name, new)
    return copy


# The last few name tuples indexed, by identity (held here, so an id is never reused while
# cached): the rounds index the same allocation's job ids round after round.
_INDEXED: list[tuple[tuple[str, ...], Mapping[str, int]]] = []


def index_of(names: Sequence[str]) -> Mapping[str, int]:
    """Name -> its position in `names` (read-only; the same mapping while `names` is the same
    tuple object)."""
    for held, index in _INDEXED:
        if held is names:
            return index
    index = types.MappingProxyType({name: i for i, name in enumerate(names)})
    if not isinstance(names, tuple):
        return index  # a list could change under the cache
    _INDEXED.append((names, index))
    del _INDEXED[:-3]
    return index
