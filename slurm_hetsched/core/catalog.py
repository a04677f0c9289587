"""The GPU type catalog: per-type site data (`gpu_types.toml`), parsed from an already-read dict.

GPU types are data: the catalog lists whatever types the file names. Parsing is strict
(unknown keys are rejected with the valid ones listed). No I/O: `slurm_hetsched.data_files`
reads the file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from slurm_hetsched.core.model import GpuType
from slurm_hetsched.errors import ConfigError

_FIELDS = {"price_per_hour"}


def parse_gpu_types(data: Mapping[str, Any], where: str = "gpu_types") -> dict[str, GpuType]:
    """{type: {"price_per_hour": x}} -> {type: GpuType}.

    Args:
        data: the parsed TOML (or the `gpu_types` object of a what-if problem).
        where: names the source in error messages.

    Raises:
        ConfigError: a table is not a table, a key is unknown, or a price is not a number >= 0.
    """
    catalog: dict[str, GpuType] = {}
    for name, fields in data.items():
        if not isinstance(fields, Mapping):
            raise ConfigError(f"{where}: [{name}] must be a table of fields, got {fields!r}")
        unknown = sorted(set(fields) - _FIELDS)
        if unknown:
            raise ConfigError(
                f"{where}: [{name}] unknown key(s) {unknown}; valid keys are {sorted(_FIELDS)}"
            )
        price = fields.get("price_per_hour")
        if price is not None and (
            isinstance(price, bool)
            or not isinstance(price, (int, float))
            or not math.isfinite(price)
            or price < 0
        ):
            raise ConfigError(f"{where}: [{name}] price_per_hour {price!r} must be a number >= 0")
        catalog[name] = GpuType(name=name, price_per_hour=None if price is None else float(price))
    return catalog


def merge_gpu_types(
    base: Mapping[str, GpuType], overrides: Mapping[str, GpuType]
) -> dict[str, GpuType]:
    """`base` with each overriding type's given fields replacing the base's."""
    merged = dict(base)
    for name, override in overrides.items():
        old = merged.get(name, GpuType(name))
        price = override.price_per_hour
        merged[name] = GpuType(name, old.price_per_hour if price is None else price)
    return merged
