"""Reads the data files the decision core needs and hands it parsed values (the core does no I/O).

Shipped defaults live in `slurm_hetsched/data/` (see its README.md) and are read through
importlib.resources, so they work from a wheel as well as from a checkout. A site's own files
are read from the paths its config names.
"""

from __future__ import annotations

import functools
import json
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from slurm_hetsched.core.catalog import parse_gpu_types, parse_site_energy
from slurm_hetsched.core.costs import SiteEnergy
from slurm_hetsched.core.model import GpuType
from slurm_hetsched.core.throughput import FORMAT, ThroughputFormatError, ThroughputTable
from slurm_hetsched.errors import ConfigError

GAVEL_THROUGHPUTS = "gavel_throughputs.json"
GPU_TYPES = "gpu_types.toml"


def _shipped_text(name: str) -> str:
    return resources.files("slurm_hetsched").joinpath("data", name).read_text(encoding="utf-8")


@functools.cache
def shipped_throughputs() -> ThroughputTable:
    """Gavel's measured throughput table, shipped as package data (read once per process)."""
    data = json.loads(_shipped_text(GAVEL_THROUGHPUTS))
    return ThroughputTable.from_gavel(
        data, source="Gavel simulation_throughputs.json (shipped with slurm-hetsched)"
    )


def shipped_gpu_types() -> dict[str, GpuType]:
    """The shipped `gpu_types.toml`: per GPU type, its price per hour and busy/idle power."""
    return parse_gpu_types(tomllib.loads(_shipped_text(GPU_TYPES)), where=GPU_TYPES)


def shipped_site_energy() -> SiteEnergy:
    """The shipped `gpu_types.toml`'s site keys: electricity price, PUE, node base power."""
    return parse_site_energy(tomllib.loads(_shipped_text(GPU_TYPES)), where=GPU_TYPES)


def load_throughputs(path: Path) -> ThroughputTable:
    """A throughput file in our own format (docs/throughput.md) or Gavel's, told apart by content.

    Raises:
        ConfigError: the file cannot be read or is not valid JSON.
        ThroughputFormatError: its content does not follow either format.
    """
    data = _read_json(path)
    if isinstance(data, dict) and "format" in data:
        return ThroughputTable.from_dict(data)
    if isinstance(data, dict):
        return ThroughputTable.from_gavel(data, source=str(path))
    raise ThroughputFormatError(
        f"{path}: expected a JSON object ({FORMAT!r} format or Gavel's), got {type(data).__name__}"
    )


def load_gpu_types(path: Path) -> dict[str, GpuType]:
    """A site's `gpu_types.toml`.

    Raises:
        ConfigError: the file cannot be read, is not TOML, or has unknown keys or bad values.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read GPU types ({exc})") from exc
    return parse_gpu_types(data, where=str(path))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read JSON ({exc})") from exc
