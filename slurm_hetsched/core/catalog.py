"""The GPU type catalog: per-type site data (`gpu_types.toml`), parsed from an already-read dict.

GPU types are data: the catalog lists whatever types the file names, one table each. The
site-wide energy keys (`electricity_per_kwh`, `pue`, `node_base_w`) are top-level numbers of
the same file (`parse_site_energy`). Parsing is strict (unknown keys are rejected with the valid
ones listed). No I/O: `slurm_hetsched.data_files` reads the file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from slurm_hetsched.core.costs import SiteEnergy
from slurm_hetsched.core.model import GpuType
from slurm_hetsched.errors import ConfigError

# Per-type keys (GpuType's fields): price, power, and the datasheet figures that predict
# training speed (core/throughput/estimate.py).
_FIELDS_IN_ORDER = (
    "price_per_hour",
    "busy_w",
    "idle_w",
    "fp16_tflops",
    "fp32_tflops",
    "mem_bw_gbs",
    "mem_gib",
)
_FIELDS = set(_FIELDS_IN_ORDER)
SITE_FIELDS = {"electricity_per_kwh", "pue", "node_base_w"}


def parse_site_energy(
    data: Mapping[str, Any], where: str = "gpu_types", base: SiteEnergy | None = None
) -> SiteEnergy:
    """The top-level site keys of a `gpu_types.toml` (or a what-if `gpu_types` object).

    Args:
        data: the parsed TOML; its GPU type tables are ignored here.
        where: names the source in error messages.
        base: values for the keys `data` does not give (default: SiteEnergy()'s, no cost).

    Raises:
        ConfigError: a site key is not a number, is negative, or `pue` is below 1.
    """
    base = base or SiteEnergy()
    values = {
        "electricity_per_kwh": base.electricity_per_kwh,
        "pue": base.pue,
        "node_base_w": base.node_base_w,
    }
    for key in SITE_FIELDS & set(data):
        values[key] = _number(data[key], f"{where}: {key}")
    try:
        return SiteEnergy(**values)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def parse_gpu_types(data: Mapping[str, Any], where: str = "gpu_types") -> dict[str, GpuType]:
    """{type: {"price_per_hour": x, "busy_w": w, "idle_w": w, "fp16_tflops": f, ...}} ->
    {type: GpuType} (every key optional; the keys are GpuType's fields).

    Top-level numbers named in SITE_FIELDS are site keys (see parse_site_energy), skipped here.

    Args:
        data: the parsed TOML (or the `gpu_types` object of a what-if problem).
        where: names the source in error messages.

    Raises:
        ConfigError: a table is not a table, a key is unknown, a value is not a number >= 0,
            or idle_w is above busy_w.
    """
    catalog: dict[str, GpuType] = {}
    for name, fields in data.items():
        if not isinstance(fields, Mapping):
            if name in SITE_FIELDS:
                continue
            raise ConfigError(
                f"{where}: [{name}] must be a table of fields, got {fields!r}; top-level "
                f"numbers may only be the site keys {sorted(SITE_FIELDS)}"
            )
        unknown = sorted(set(fields) - _FIELDS)
        if unknown:
            raise ConfigError(
                f"{where}: [{name}] unknown key(s) {unknown}; valid keys are {sorted(_FIELDS)}"
            )
        values = {
            key: None if key not in fields else _number(fields[key], f"{where}: [{name}] {key}")
            for key in _FIELDS_IN_ORDER
        }
        busy, idle = values["busy_w"], values["idle_w"]
        if busy is not None and idle is not None and idle > busy:
            raise ConfigError(f"{where}: [{name}] idle_w {idle} is above busy_w {busy}")
        catalog[name] = GpuType(name=name, **values)
    return catalog


def merge_gpu_types(
    base: Mapping[str, GpuType], overrides: Mapping[str, GpuType]
) -> dict[str, GpuType]:
    """`base` with each overriding type's given fields replacing the base's."""
    merged = dict(base)
    for name, override in overrides.items():
        old = merged.get(name, GpuType(name))

        def pick(new: float | None, before: float | None) -> float | None:
            return before if new is None else new

        merged[name] = GpuType(
            name,
            **{key: pick(getattr(override, key), getattr(old, key)) for key in _FIELDS_IN_ORDER},
        )
    return merged


def _number(value: Any, what: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ConfigError(f"{what} {value!r} must be a number >= 0")
    return float(value)
