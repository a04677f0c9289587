"""The checks of a `Problem`'s placement fields (`nodes`, `running`, `allowed_gpus`,
`throughput_at`) and of unique names, kept apart from problem.py so each module stays small."""

from __future__ import annotations

from typing import Any

import numpy as np

from slurm_hetsched.core.model.frozen import InvalidProblemError, frozen_mapping, set_field


def check_unique(names: tuple[str, ...], what: str) -> None:
    """Raise InvalidProblemError on an empty, non-string or repeated name."""
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidProblemError(f"{what} {name!r}: must be a non-empty string")
        if name in seen:
            raise InvalidProblemError(f"{what} {name!r} appears twice")
        seen.add(name)


def check_placement_fields(p: Any) -> None:  # a Problem (typed Any: no import circle)
    """Validate and freeze `nodes`, `running`, `allowed_gpus` and `throughput_at`."""
    n, k = p.n_jobs, p.n_types
    set_field(p, "nodes", tuple(p.nodes))
    set_field(p, "running", frozen_mapping(p.running))
    if p.nodes:
        check_unique(tuple(node.name for node in p.nodes), "node")
        free = dict.fromkeys(p.gpu_types, 0)
        for node in p.nodes:
            for t in node.gpus:
                if t not in free:
                    raise InvalidProblemError(
                        f"node {node.name!r}: GPU type {t!r} is not one of {list(p.gpu_types)}"
                    )
                free[t] += node.free_gpus(t)
        if not np.array_equal(np.array([free[t] for t in p.gpu_types], float), p.capacity):
            raise InvalidProblemError(
                f"capacity {p.capacity.tolist()} disagrees with the nodes' free GPUs {free}"
            )
    if p.allowed_gpus is not None:
        if len(p.allowed_gpus) != n:
            raise InvalidProblemError(f"allowed_gpus: {len(p.allowed_gpus)} entries for {n} jobs")
        allowed = tuple(tuple(int(g) for g in counts) for counts in p.allowed_gpus)
        for m, counts in enumerate(allowed):
            if not counts or list(counts) != sorted(set(counts)) or counts[0] != p.num_gpus[m]:
                raise InvalidProblemError(
                    f"job {p.job_ids[m]!r}: allowed GPU counts {list(counts)} must be distinct, "
                    f"ascending, and start at its num_gpus {int(p.num_gpus[m])}"
                )
        set_field(p, "allowed_gpus", allowed)
    if p.throughput_at is not None:
        at = np.array(p.throughput_at, dtype=float, copy=True)
        if at.ndim != 3 or at.shape[:2] != (n, k) or at.shape[2] < 1:
            raise InvalidProblemError(
                f"throughput_at: shape {at.shape}, expected ({n}, {k}, max_gpus >= 1)"
            )
        if np.isinf(at).any() or (at < 0).any():
            raise InvalidProblemError("throughput_at: entries must be finite and >= 0, or NaN")
        at.flags.writeable = False
        set_field(p, "throughput_at", at)
    node_by_name = {node.name: node for node in p.nodes}
    row_of = {job_id: m for m, job_id in enumerate(p.job_ids)}
    used: dict[tuple[str, str], int] = {}
    for job_id, placement in p.running.items():
        if job_id not in row_of or placement.job_id != job_id:
            raise InvalidProblemError(
                f"running: placement of {placement.job_id!r} filed under {job_id!r}; expected "
                "a job of the problem filed under its own id"
            )
        m = row_of[job_id]
        if placement.num_gpus not in p.gpu_options(m):
            raise InvalidProblemError(
                f"job {job_id!r} runs on {placement.num_gpus} GPUs; its allowed counts are "
                f"{list(p.gpu_options(m))}"
            )
        for piece in placement.slices:
            host = node_by_name.get(piece.node)
            key = (piece.node, piece.gpu_type)
            used[key] = used.get(key, 0) + piece.count
            if host is None or used[key] > host.free_gpus(piece.gpu_type):
                raise InvalidProblemError(
                    f"job {job_id!r} runs on {used[key]} {piece.gpu_type} GPU(s) of node "
                    f"{piece.node!r}, which has "
                    f"{0 if host is None else host.free_gpus(piece.gpu_type)} free"
                )
