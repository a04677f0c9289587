"""The power model: per-GPU-type busy and idle watts plus the site's price, PUE and node base
power (`EnergyModel`, `SiteEnergy`; data from `gpu_types.toml`), and what a node or a job draws
and costs per unit of time under it (ANDREAS, docs/policies.md "Energy and tardiness").

- a powered node of GPU type t with G GPUs, g of them busy, draws
  P(n, g) = node_base_w + g * busy_w[t] + (G - g) * idle_w[t]  watts (IT power, as metered);
- its cost per hour is c(n, g) = P(n, g) / 1000 * pue * electricity_per_kwh: facility energy
  (IT energy times PUE) at the site's price;
- a job on g GPUs of such a node is attributed P_job = g * busy_w[t] + g / G * node_base_w: its
  GPUs' busy power and its GPUs' share of the node's base power. The jobs on a full node add up
  to P(n, G); what a partly used node draws beyond its jobs (idle GPUs, the unused share of the
  base power) is the node's idle power, counted in round and run totals but not charged to any
  job. P_job is linear in g, as ANDREAS assumes.

Energies over time (jobs, rounds, runs, decisions) are `core.costs`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slurm_hetsched.core.model.cluster import GpuType
from slurm_hetsched.errors import ConfigError

J_PER_KWH = 3.6e6
S_PER_H = 3600.0


def _non_negative(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{what} {value!r} must be a number")
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{what} {value!r} must be a finite number >= 0")
    return float(value)


@dataclass(frozen=True, slots=True)
class SiteEnergy:
    """Site-wide energy data (the top-level keys of `gpu_types.toml`).

    Attributes:
        electricity_per_kwh: price of one kWh of facility energy, in the site's currency.
        pue: power usage effectiveness (facility energy / IT energy), >= 1.
        node_base_w: power of a node without its GPUs (CPUs, memory, fans), in watts.
    """

    electricity_per_kwh: float = 0.0
    pue: float = 1.0
    node_base_w: float = 0.0

    def __post_init__(self) -> None:
        _non_negative(self.electricity_per_kwh, "electricity_per_kwh")
        _non_negative(self.node_base_w, "node_base_w")
        if not (_non_negative(self.pue, "pue") >= 1.0):
            raise ConfigError(f"pue {self.pue!r} must be >= 1 (facility / IT energy)")


@dataclass(frozen=True, slots=True)
class EnergyModel:
    """Per-GPU-type busy and idle power plus the site's data: everything a cost needs.

    Attributes:
        busy_w: GPU type -> watts of one GPU running a training job.
        idle_w: GPU type -> watts of one idle GPU (powered, no job).
        site: price, PUE and node base power.

    Raises:
        ConfigError: a negative or non-finite power, idle power above busy power, or a type
            with only one of the two.
    """

    busy_w: Mapping[str, float]
    idle_w: Mapping[str, float]
    site: SiteEnergy = field(default_factory=SiteEnergy)

    def __post_init__(self) -> None:
        if set(self.busy_w) != set(self.idle_w):
            odd = sorted(set(self.busy_w) ^ set(self.idle_w))
            raise ConfigError(f"GPU type(s) {odd}: give both busy_w and idle_w, or neither")
        for t in self.busy_w:
            busy = _non_negative(self.busy_w[t], f"[{t}] busy_w")
            idle = _non_negative(self.idle_w[t], f"[{t}] idle_w")
            if idle > busy:
                raise ConfigError(f"[{t}] idle_w {idle} is above busy_w {busy}")
        object.__setattr__(self, "busy_w", dict(self.busy_w))
        object.__setattr__(self, "idle_w", dict(self.idle_w))

    @classmethod
    def from_catalog(
        cls, catalog: Mapping[str, GpuType], site: SiteEnergy, gpu_types: Iterable[str]
    ) -> EnergyModel | None:
        """The model for `gpu_types`, or None if one of them lacks busy_w or idle_w."""
        busy, idle = {}, {}
        for t in gpu_types:
            entry = catalog.get(t)
            if entry is None or entry.busy_w is None or entry.idle_w is None:
                return None
            busy[t], idle[t] = entry.busy_w, entry.idle_w
        return cls(busy, idle, site)

    def has(self, gpu_types: Iterable[str]) -> bool:
        """Whether the model knows every one of `gpu_types`."""
        return all(t in self.busy_w for t in gpu_types)

    def busy_array(self, gpu_types: Sequence[str]) -> np.ndarray:
        """(len(gpu_types),) busy watts per GPU. Raises KeyError for an unknown type."""
        return np.array([self.busy_w[t] for t in gpu_types], dtype=float)

    def idle_array(self, gpu_types: Sequence[str]) -> np.ndarray:
        """(len(gpu_types),) idle watts per GPU. Raises KeyError for an unknown type."""
        return np.array([self.idle_w[t] for t in gpu_types], dtype=float)

    @property
    def cost_per_kwh(self) -> float:
        """Cost of one kWh of IT energy: price times PUE (ANDREAS: 0.172 x 1.33 = 0.22876)."""
        return self.site.electricity_per_kwh * self.site.pue

    def node_power_w(self, gpu_type: str, node_gpus: Any, busy_gpus: Any) -> Any:
        """P(n, g): watts of a powered node with `node_gpus` GPUs of `gpu_type`, `busy_gpus` busy.

        Arrays broadcast. A node needs 0 <= busy_gpus <= node_gpus (not checked).
        """
        busy, idle = self.busy_w[gpu_type], self.idle_w[gpu_type]
        return self.site.node_base_w + busy_gpus * busy + (node_gpus - busy_gpus) * idle

    def node_cost_per_h(self, gpu_type: str, node_gpus: Any, busy_gpus: Any) -> Any:
        """c(n, g): the node's cost per hour, facility energy at the site's price."""
        return self.node_power_w(gpu_type, node_gpus, busy_gpus) / 1000.0 * self.cost_per_kwh

    def job_power_w(self, gpu_type: str, node_gpus: Any, job_gpus: Any) -> Any:
        """Watts attributed to a job on `job_gpus` GPUs of a node with `node_gpus` GPUs in all:
        its GPUs' busy power plus their share of the node's base power."""
        return job_gpus * self.busy_w[gpu_type] + job_gpus / node_gpus * self.site.node_base_w

    def job_cost_per_s(self, gpu_type: str, node_gpus: Any, job_gpus: Any) -> Any:
        """The attributed power as cost per second (ANDREAS's c_ng for a job's configuration)."""
        watts = self.job_power_w(gpu_type, node_gpus, job_gpus)
        return watts / 1000.0 / S_PER_H * self.cost_per_kwh

    def cost(self, energy_kwh: Any) -> Any:
        """The cost of IT energy: kWh x PUE x price."""
        return energy_kwh * self.cost_per_kwh
