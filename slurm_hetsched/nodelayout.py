"""The node layout file: which nodes exist and which typed GPUs each one has.

A format shared beside the core, like the state folder: the dev cluster (devcluster/) builds
its Slurm from it and the simulator (sim/layout.py) its nodes, neither importing the other.
The same TOML format describes the local dev cluster (`etc/devcluster.toml`) and a cluster to
simulate, so an admin can simulate the very cluster the controller runs. Parsing is strict:
unknown keys are rejected with the list of valid ones.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_hetsched.errors import ConfigError

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_GPU_TYPE = re.compile(r"^[a-z][a-z0-9_.-]{0,31}$")
# Fake GPUs are device nodes /dev-style files numbered per node; keep it within what a
# single machine can pretend to have.
MAX_GPUS_PER_NODE = 64
DEFAULT_CPUS_PER_NODE = 8
DEFAULT_MEMORY_MB_PER_NODE = 4000


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node: its name and its GPUs per type (e.g. {"v100": 2})."""

    name: str
    gpus: Mapping[str, int]
    cpus: int
    memory_mb: int

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(self.gpus)

    @property
    def total_gpus(self) -> int:
        return sum(self.gpus.values())


@dataclass(frozen=True, slots=True)
class DevClusterConfig:
    """A whole cluster layout plus the dev cluster's Slurm settings."""

    nodes: tuple[NodeSpec, ...]
    name: str = "hetsched"
    slurmctld_port: int = 6817
    slurmd_port_base: int = 6820
    partition: str = "gpu"
    cpus_per_node: int = DEFAULT_CPUS_PER_NODE
    memory_mb_per_node: int = DEFAULT_MEMORY_MB_PER_NODE
    # Scheduler timing chosen so that tests and demos see changes within seconds.
    sched_interval_s: int = 2
    bf_interval_s: int = 5
    cred_expire_s: int = 10
    kill_wait_s: int = 5
    extra: Mapping[str, str] = field(default_factory=dict)

    def slurmd_port(self, node_index: int) -> int:
        """Port of the node at `node_index` (0-based)."""
        return self.slurmd_port_base + node_index + 1

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """Every GPU type of the cluster, in order of first appearance."""
        seen: dict[str, None] = {}
        for node in self.nodes:
            seen.update(dict.fromkeys(node.gpus))
        return tuple(seen)


_CLUSTER_KEYS = {
    "name": str,
    "slurmctld_port": int,
    "slurmd_port_base": int,
    "partition": str,
    "cpus_per_node": int,
    "memory_mb_per_node": int,
    "sched_interval_s": int,
    "bf_interval_s": int,
    "cred_expire_s": int,
    "kill_wait_s": int,
}
_NODE_KEYS = {"name", "gpus", "cpus", "memory_mb"}


def _reject_unknown(
    where: str, given: Mapping[str, Any], valid: set[str] | Mapping[str, Any]
) -> None:
    unknown = sorted(set(given) - set(valid))
    if unknown:
        valid_keys = ", ".join(sorted(valid))
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; valid keys are {valid_keys}"
        )


def _positive_int(where: str, value: Any, upper: int = 1_000_000) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper:
        raise ConfigError(f"{where}: expected a whole number from 1 to {upper}, got {value!r}")
    return value


def parse_devcluster_config(data: Mapping[str, Any], source: str = "<config>") -> DevClusterConfig:
    """Build a DevClusterConfig from parsed TOML.

    Raises:
        ConfigError: naming the offending key and value.
    """
    _reject_unknown(source, data, {"cluster", "nodes", "slurm"})
    cluster = data.get("cluster", {})
    if not isinstance(cluster, Mapping):
        raise ConfigError(f"{source}: [cluster] must be a table")
    _reject_unknown(f"{source} [cluster]", cluster, _CLUSTER_KEYS)
    settings: dict[str, Any] = {}
    for key, kind in _CLUSTER_KEYS.items():
        if key not in cluster:
            continue
        value = cluster[key]
        if kind is int:
            upper = 65535 if key.endswith("port") or key.endswith("port_base") else 1_000_000
            settings[key] = _positive_int(f"{source} [cluster] {key}", value, upper)
        elif not isinstance(value, str) or not _NAME.match(value):
            raise ConfigError(
                f"{source} [cluster] {key}: expected a lower-case name like 'gpu', got {value!r}"
            )
        else:
            settings[key] = value

    slurm_extra = data.get("slurm", {})
    if not isinstance(slurm_extra, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str | int) for k, v in slurm_extra.items()
    ):
        raise ConfigError(f'{source}: [slurm] holds extra slurm.conf lines as Key = "value"')

    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise ConfigError(f"{source}: needs at least one [[nodes]] entry with a name and gpus")
    cpus = settings.get("cpus_per_node", DEFAULT_CPUS_PER_NODE)
    memory = settings.get("memory_mb_per_node", DEFAULT_MEMORY_MB_PER_NODE)
    nodes = tuple(
        _parse_node(f"{source} nodes[{i}]", raw, cpus, memory) for i, raw in enumerate(raw_nodes)
    )
    names = [n.name for n in nodes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{source}: node name(s) used twice: {', '.join(duplicates)}")
    return DevClusterConfig(
        nodes=nodes, extra={k: str(v) for k, v in slurm_extra.items()}, **settings
    )


def _parse_node(where: str, raw: Any, cpus: int, memory_mb: int) -> NodeSpec:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: must be a table with name and gpus")
    _reject_unknown(where, raw, _NODE_KEYS)
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{where}: name must be a lower-case node name like 'n1', got {name!r}")
    gpus = raw.get("gpus")
    if not isinstance(gpus, Mapping) or not gpus:
        raise ConfigError(f"{where} ({name}): gpus must be a table like {{ v100 = 2 }}")
    parsed: dict[str, int] = {}
    for gpu_type, count in gpus.items():
        if not _GPU_TYPE.match(gpu_type):
            raise ConfigError(
                f"{where} ({name}): GPU type {gpu_type!r} must be lower case, like the Slurm "
                "GRES type (e.g. 'v100')"
            )
        parsed[gpu_type] = _positive_int(f"{where} ({name}) gpus.{gpu_type}", count)
    if sum(parsed.values()) > MAX_GPUS_PER_NODE:
        raise ConfigError(f"{where} ({name}): at most {MAX_GPUS_PER_NODE} GPUs per node")
    return NodeSpec(
        name=name,
        gpus=parsed,
        cpus=_positive_int(f"{where} ({name}) cpus", raw.get("cpus", cpus)),
        memory_mb=_positive_int(f"{where} ({name}) memory_mb", raw.get("memory_mb", memory_mb)),
    )


def load_devcluster_config(path: Path | None) -> DevClusterConfig:
    """Read a layout file; None gives the built-in layout (n1=2xv100, n2=2xp100, n3=4xk80)."""
    if path is None:
        return default_devcluster_config()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read cluster layout {path}: {exc.strerror}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    return parse_devcluster_config(data, str(path))


def default_devcluster_config() -> DevClusterConfig:
    """The embedded default, identical to the shipped etc/devcluster.toml (a test checks)."""
    return DevClusterConfig(
        nodes=(
            NodeSpec("n1", {"v100": 2}, 8, 4000),
            NodeSpec("n2", {"p100": 2}, 8, 4000),
            NodeSpec("n3", {"k80": 4}, 8, 4000),
        )
    )
