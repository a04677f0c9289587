"""`placement.json` (written by the controller before it releases a job) and the job's GPU type.

On Slurm 22.05 with an untyped `--gres=gpu:N` nothing in the job's environment names the GPU
type, so the wrapper takes it, in this order, from:
1. `placement.json`, if it names this node (a stale file from an earlier placement on other
   nodes is ignored);
2. Slurm: the node's GPU types (`sinfo --json`), if the node has exactly one;
3. "unknown".
Looking the type up never fails the job: a missing `scontrol`/`sinfo` on compute nodes
(submitit #1601) only gives "unknown".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hetsched.statefolder import PLACEMENT_FILE, expand_hostlist
from slurm_hetsched.wrapper.files import read_json, write_json_atomic

# The file name and the host list parser are the state folder format's (statefolder.py).
__all__ = [
    "PLACEMENT_FILE",
    "UNKNOWN_GPU_TYPE",
    "NodeGpuLookup",
    "Placement",
    "expand_hostlist",
    "read_placement",
    "resolve_gpu_type",
    "slurm_node_gpus",
    "write_placement",
]

logger = logging.getLogger(__name__)

UNKNOWN_GPU_TYPE = "unknown"

NodeGpuLookup = Callable[[str], Mapping[str, int] | None]


@dataclass(frozen=True, slots=True)
class Placement:
    """What the controller decided for this round: the GPU type, count and nodes."""

    gpu_type: str
    num_gpus: int | None = None
    nodes: tuple[str, ...] = ()
    round: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "gpu_type": self.gpu_type,
            "num_gpus": self.num_gpus,
            "nodes": list(self.nodes),
        }


def read_placement(state_dir: Path) -> Placement | None:
    """The job's placement.json, or None if it is missing or malformed (logged)."""
    path = state_dir / PLACEMENT_FILE
    payload = read_json(path)
    if payload is None:
        if path.exists():
            logger.warning("ignoring %s: not a JSON object", path)
        return None
    gpu_type = payload.get("gpu_type")
    if not isinstance(gpu_type, str) or not gpu_type:
        logger.warning("ignoring %s: no gpu_type", path)
        return None
    num_gpus = payload.get("num_gpus")
    round_ = payload.get("round")
    return Placement(
        gpu_type=gpu_type.lower(),
        num_gpus=num_gpus if isinstance(num_gpus, int) else None,
        nodes=_node_names(payload.get("nodes")),
        round=round_ if isinstance(round_, int) else None,
    )


def write_placement(state_dir: Path, placement: Placement) -> None:
    """Write placement.json atomically (what the controller does before a release)."""
    write_json_atomic(state_dir / PLACEMENT_FILE, placement.to_dict())


def _node_names(value: Any) -> tuple[str, ...]:
    """placement.json's `nodes`: a list of names, or a Slurm host list such as 'n[1-2],gpu7'."""
    if isinstance(value, str):
        return tuple(expand_hostlist(value))
    if not isinstance(value, Sequence):
        return ()
    return tuple(name for item in value if isinstance(item, str) for name in expand_hostlist(item))


def slurm_node_gpus(node: str) -> Mapping[str, int] | None:
    """GPUs per type of `node` as Slurm reports them (read-only; None if Slurm cannot say)."""
    from slurm_hetsched.errors import HetschedError
    from slurm_hetsched.slurm import CliSlurmBackend, SlurmCli

    try:
        nodes = CliSlurmBackend(SlurmCli(timeout_s=10)).list_nodes()
    except (HetschedError, OSError) as exc:
        logger.info("cannot ask Slurm for node %s's GPU type: %s", node, exc)
        return None
    return next((dict(n.gpus) for n in nodes if n.name == node), None)


def resolve_gpu_type(
    state_dir: Path,
    node: str,
    *,
    in_slurm: bool,
    lookup: NodeGpuLookup = slurm_node_gpus,
) -> tuple[str, Placement | None]:
    """The GPU type this process runs on, and the placement it came from (if any).

    Args:
        state_dir: the job's state folder (placement.json is read from it).
        node: this node's Slurm name.
        in_slurm: only then is Slurm asked.
        lookup: node -> GPUs per type; injected by tests.
    """
    placement = read_placement(state_dir)
    if placement is not None:
        if not placement.nodes or node in placement.nodes:
            return placement.gpu_type, placement
        logger.info(
            "placement.json names nodes %s, not this node %s: stale, asking Slurm",
            ",".join(placement.nodes),
            node,
        )
    if in_slurm:
        gpus = lookup(node)
        types = [gpu_type for gpu_type, count in (gpus or {}).items() if count > 0]
        if len(types) == 1:
            return types[0].lower(), None
        if len(types) > 1:
            logger.info("node %s has several GPU types (%s): unknown", node, ",".join(types))
    return UNKNOWN_GPU_TYPE, None
