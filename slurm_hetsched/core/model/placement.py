"""Where a job runs: `GpuSlice` (some GPUs of one type on one node) and `Placement` (all of one
job's GPUs for a round, possibly over several nodes, and for a gang across types (Hadar) over
several types).

Placements appear in a problem (what runs now), in an allocation (placement policies) and in
the round mechanism's state and plans.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class GpuSlice:
    """`count` GPUs of `gpu_type` on `node`."""

    node: str
    gpu_type: str
    count: int


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one job runs for one round: its GPUs, possibly spread over nodes and, for a gang
    across types, over several types (it then runs at the pace of its slowest type)."""

    job_id: str
    slices: tuple[GpuSlice, ...]
    # Derived once (the round mechanism reads them for every job in every round).
    num_gpus: int = field(init=False, repr=False, compare=False)
    gpu_types: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_gpus", sum(s.count for s in self.slices))
        object.__setattr__(self, "gpu_types", tuple(sorted({s.gpu_type for s in self.slices})))

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.node for s in self.slices))

    def gpus_by_type(self) -> dict[str, int]:
        """GPU type -> how many of the job's GPUs are of it."""
        counts: dict[str, int] = {}
        for piece in self.slices:
            counts[piece.gpu_type] = counts.get(piece.gpu_type, 0) + piece.count
        return counts

    def main_gpu_type(self) -> str:
        """The type of most of its GPUs (ties: the first by name); the only one on one type."""
        if len(self.gpu_types) == 1:
            return self.gpu_types[0]
        counts = self.gpus_by_type()
        return min(counts, key=lambda t: (-counts[t], t))
