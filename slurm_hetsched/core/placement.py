"""Placing the chosen jobs on nodes: which GPUs of which nodes each job of the round gets.

`place_jobs` keeps the GPUs a job already holds when it stays on its type (lease extension),
then places the others largest first, on one node when one can hold them (best fit), else
spread over the type's nodes with the most free GPUs; `policy_placements` checks the
placements a placement policy (ANDREAS, the exclusive baselines) chose itself. The free-GPU
bookkeeping they share (`free_gpus`, `take`, `without`) and `same_gpus` live here too.
docs/mechanism.md, "Placing the chosen jobs".

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from slurm_hetsched.core.model import Allocation, GpuSlice, InvalidProblemError, Node, Placement


def place_jobs(
    chosen: Sequence[tuple[int, int]],
    allocation: Allocation,
    num_gpus: np.ndarray,
    free: Mapping[str, Mapping[str, int]],
    previous: Mapping[str, Placement],
) -> dict[str, Placement]:
    """GPUs on nodes for the chosen jobs; never more than a node's free GPUs of a type.

    1. Lease extension: a job chosen on the type it ran on, with the same GPU count, keeps its
       GPUs if they are all still free (largest jobs first).
    2. The others, largest first (then in selection order): on one node if one has enough free
       GPUs of the type (the fullest such node: best fit, keeping big holes for big jobs), else
       spread over the type's nodes with the most free GPUs first (fewest nodes).
    Selection never takes more than a type's free GPUs, and step 2 may spread, so every chosen
    job gets its GPUs.
    """
    left = {t: dict(per_node) for t, per_node in free.items()}
    gpus = num_gpus.tolist()
    job_ids, gpu_types = allocation.job_ids, allocation.gpu_types
    # Largest first, then in selection order (sorted is stable).
    by_size = sorted(chosen, key=lambda e: -gpus[e[0]])
    placed: dict[str, Placement] = {}
    for m, t in by_size:
        job_id, gpu_type, count = job_ids[m], gpu_types[t], gpus[m]
        held = previous.get(job_id)
        if held is None or held.gpu_types != (gpu_type,) or held.num_gpus != count:
            continue
        if fits(held, left):
            for piece in held.slices:
                _take(left[gpu_type], piece.node, piece.count)
            placed[job_id] = held
    for m, t in by_size:
        job_id, gpu_type, count = job_ids[m], gpu_types[t], gpus[m]
        if job_id in placed:
            continue
        nodes = left[gpu_type]
        roomy = [(free_n, node) for node, free_n in nodes.items() if free_n >= count]
        if roomy:
            node = min(roomy)[1]
            slices: tuple[GpuSlice, ...] = (GpuSlice(node, gpu_type, count),)
        else:
            pieces: list[GpuSlice] = []
            still = count
            for node in sorted(nodes, key=lambda n: (-nodes[n], n)):
                if still == 0 or nodes[node] == 0:
                    break
                take = min(still, nodes[node])
                pieces.append(GpuSlice(node, gpu_type, take))
                still -= take
            assert still == 0, f"selection over-committed {gpu_type}"  # Walk.select guarantees it
            slices = tuple(pieces)
        for piece in slices:
            _take(nodes, piece.node, piece.count)
        placed[job_id] = Placement(job_id, slices)
    return placed


def policy_placements(
    allocation: Allocation, free: Mapping[str, Mapping[str, int]]
) -> dict[str, Placement]:
    """The placements a placement policy chose, checked against the free GPUs of the nodes; a
    placement may hold slices of several types and nodes (a gang across types)."""
    assert allocation.placements is not None
    left = {t: dict(per_node) for t, per_node in free.items()}
    placed: dict[str, Placement] = {}
    for job_id in sorted(allocation.placements):
        placement = allocation.placements[job_id]
        if job_id not in allocation.job_ids:
            raise InvalidProblemError(
                f"policy {allocation.policy!r} placed job {job_id!r}, which is not a job of "
                "its allocation"
            )
        for piece in placement.slices:
            if left.get(piece.gpu_type, {}).get(piece.node, 0) < piece.count:
                raise InvalidProblemError(
                    f"policy {allocation.policy!r} placed job {job_id!r} on {piece.count} "
                    f"{piece.gpu_type} GPUs of node {piece.node!r}, more than are free there"
                )
            _take(left[piece.gpu_type], piece.node, piece.count)
        placed[job_id] = placement
    return placed


def fits(placement: Placement, free: Mapping[str, Mapping[str, int]]) -> bool:
    """Whether every GPU `placement` holds is among `free` (its slices summed per node)."""
    if len(placement.slices) == 1:  # the usual case: one node
        (piece,) = placement.slices
        return free.get(piece.gpu_type, {}).get(piece.node, 0) >= piece.count
    need: dict[tuple[str, str], int] = {}
    for piece in placement.slices:
        key = (piece.gpu_type, piece.node)
        need[key] = need.get(key, 0) + piece.count
    return all(free.get(t, {}).get(node, 0) >= n for (t, node), n in need.items())


def without(
    free: Mapping[str, Mapping[str, int]], placements: Iterable[Placement]
) -> dict[str, dict[str, int]]:
    """The free GPUs once `placements` (which fit in them) have taken theirs."""
    left = {t: dict(per_node) for t, per_node in free.items()}
    for placement in placements:
        for piece in placement.slices:
            _take(left[piece.gpu_type], piece.node, piece.count)
    return left


def _take(free: dict[str, int], node: str, count: int) -> None:
    """Use `count` GPUs of `node`; a node with none left is dropped (shorter scans)."""
    free[node] -= count
    if free[node] == 0:
        del free[node]


def free_gpus(nodes: Sequence[Node], gpu_types: Sequence[str]) -> dict[str, dict[str, int]]:
    """GPU type -> node -> GPUs we may use (0 on unavailable nodes, minus outside use)."""
    return {
        t: {node.name: node.free_gpus(t) for node in nodes if node.free_gpus(t) > 0}
        for t in gpu_types
    }


def same_gpus(a: Placement, b: Placement) -> bool:
    """The same GPUs of the same nodes, in whatever order of slices."""
    if a.slices == b.slices:
        return True
    if len(a.slices) == 1 == len(b.slices):
        return False  # one slice each, and they differ

    def key(p: Placement) -> list[tuple[str, str, int]]:
        return sorted((s.node, s.gpu_type, s.count) for s in p.slices)

    return key(a) == key(b)
