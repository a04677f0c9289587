"""The simulated cluster's nodes: from GPU counts per type, or from a node layout file in the
dev cluster's format (etc/devcluster.toml), so an admin can simulate the very cluster they run.
"""

from __future__ import annotations

import re
from pathlib import Path

from slurm_hetsched.core.model import Node
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.nodelayout import load_devcluster_config

DEFAULT_GPUS_PER_SERVER = 4
_COUNT = re.compile(r"^\s*([a-z0-9][a-z0-9_.-]*)\s*=\s*(\d+)\s*$")


def parse_counts(text: str) -> dict[str, int]:
    """ "v100=8,p100=16,k80=24" -> {"v100": 8, "p100": 16, "k80": 24}.

    Raises:
        ConfigError: a malformed item, a type named twice, or no GPU at all.
    """
    counts: dict[str, int] = {}
    for item in text.split(","):
        match = _COUNT.match(item)
        if match is None:
            raise ConfigError(
                f"cluster {text!r}: item {item.strip()!r} is not TYPE=COUNT (lower-case GPU "
                "type, whole number), e.g. v100=8,p100=16,k80=24"
            )
        gpu_type, count = match.group(1), int(match.group(2))
        if gpu_type in counts:
            raise ConfigError(f"cluster {text!r}: GPU type {gpu_type!r} given twice")
        counts[gpu_type] = count
    if sum(counts.values()) == 0:
        raise ConfigError(f"cluster {text!r}: no GPUs at all")
    return counts


def nodes_from_counts(
    counts: dict[str, int], gpus_per_server: int = DEFAULT_GPUS_PER_SERVER
) -> tuple[Node, ...]:
    """Servers of `gpus_per_server` GPUs of one type each (the last one may hold fewer),
    named TYPE-1, TYPE-2, ..."""
    if gpus_per_server < 1:
        raise ConfigError(f"GPUs per server {gpus_per_server}: expected a whole number >= 1")
    nodes = []
    for gpu_type, count in sorted(counts.items()):
        for i, start in enumerate(range(0, count, gpus_per_server), start=1):
            size = min(gpus_per_server, count - start)
            nodes.append(Node(f"{gpu_type}-{i}", {gpu_type: size}))
    return tuple(nodes)


def nodes_from_layout(path: Path) -> tuple[Node, ...]:
    """The nodes of a layout file in the dev cluster's format (only [[nodes]] is used)."""
    config = load_devcluster_config(path)
    return tuple(Node(spec.name, dict(spec.gpus)) for spec in config.nodes)


def cluster_nodes(spec: str, gpus_per_server: int = DEFAULT_GPUS_PER_SERVER) -> tuple[Node, ...]:
    """`--cluster`: a layout file if `spec` names one (ends in .toml), else counts per type."""
    if spec.endswith(".toml"):
        path = Path(spec)
        if not path.is_file():
            raise ConfigError(f"cluster layout {spec!r}: no such file")
        return nodes_from_layout(path)
    return nodes_from_counts(parse_counts(spec), gpus_per_server)


def gpu_counts(nodes: tuple[Node, ...]) -> dict[str, int]:
    """GPUs per type over `nodes`."""
    counts: dict[str, int] = {}
    for node in nodes:
        for gpu_type, n in node.gpus.items():
            counts[gpu_type] = counts.get(gpu_type, 0) + n
    return dict(sorted(counts.items()))
