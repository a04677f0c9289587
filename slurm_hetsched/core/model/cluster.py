"""The cluster as one decision sees it: GPU types, nodes, managed jobs and the snapshot of them.

These are observations, built by the controller (from Slurm) or the simulator; `core.problem`
turns a `ClusterSnapshot` into the `Problem` a policy solves.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from slurm_hetsched.core.model.frozen import (
    EMPTY,
    InvalidProblemError,
    copy_with,
    frozen_mapping,
    set_field,
)
from slurm_hetsched.core.utility import Utility, default_utility


@dataclass(frozen=True, slots=True)
class GpuType:
    """One GPU type's site data (from `data/gpu_types.toml` or a config override).

    Attributes:
        name: the Slurm GRES type string, e.g. "v100".
        price_per_hour: rental or amortised price per GPU-hour, for the cost policies; None if
            the site gave none.
        busy_w: watts of one GPU running a job, for energy costs (core/costs.py); None if none.
        idle_w: watts of one idle, powered GPU; None if none.
        fp16_tflops: datasheet dense FP16/BF16 tensor throughput (TFLOPS, no sparsity); None
            if none (a type without fast half precision). Speed estimates
            (core/throughput/estimate.py) read it and the next three.
        fp32_tflops: datasheet FP32 throughput (TFLOPS); None if none.
        mem_bw_gbs: datasheet memory bandwidth (GB/s); None if none.
        mem_gib: memory size (GiB, as the datasheet's GB); None if none.
    """

    name: str
    price_per_hour: float | None = None
    busy_w: float | None = None
    idle_w: float | None = None
    fp16_tflops: float | None = None
    fp32_tflops: float | None = None
    mem_bw_gbs: float | None = None
    mem_gib: float | None = None


@dataclass(frozen=True, slots=True)
class Node:
    """One node as observed in a snapshot.

    Attributes:
        name: Slurm node name.
        gpus: GPUs per type on the node, e.g. {"v100": 2}.
        gpus_in_use: GPUs per type busy with jobs outside our control (not counted as capacity).
        features: the node's Slurm features.
        available: False when the node is down, drained or otherwise not schedulable.
    """

    name: str
    gpus: Mapping[str, int]
    gpus_in_use: Mapping[str, int] = field(default_factory=lambda: EMPTY)
    features: tuple[str, ...] = ()
    available: bool = True
    # GPU type -> free_gpus(type), derived once (read for every node in every round).
    _free: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_field(self, "gpus", frozen_mapping(self.gpus))
        set_field(self, "gpus_in_use", frozen_mapping(self.gpus_in_use))
        for gpu_type, count in self.gpus.items():
            used = self.gpus_in_use.get(gpu_type, 0)
            if count < 0 or not 0 <= used <= count:
                raise InvalidProblemError(
                    f"node {self.name!r}: {gpu_type} has {count} GPUs and {used} in use; "
                    "expected 0 <= in use <= count"
                )
        unknown = set(self.gpus_in_use) - set(self.gpus)
        if unknown:
            raise InvalidProblemError(
                f"node {self.name!r}: GPUs in use of types it does not have: {sorted(unknown)}"
            )
        free = {t: n - self.gpus_in_use.get(t, 0) for t, n in self.gpus.items()}
        set_field(self, "_free", free if self.available else {})

    def free_gpus(self, gpu_type: str) -> int:
        """GPUs of `gpu_type` the scheduler may use on this node (0 if unavailable)."""
        return self._free.get(gpu_type, 0)


@dataclass(frozen=True, slots=True)
class Job:
    """One managed training job as the controller or the simulator sees it.

    Attributes:
        key: the stable job key (docs/interfaces.md): survives re-submission.
        job_class: key into the throughput table, e.g. "ResNet-50 (batch size 64)".
        num_gpus: GPUs the job uses at once (Gavel's scale factor), all of one type.
        steps_remaining: training steps still to run; None if unknown.
        total_steps: steps of the whole job; None if unknown.
        weight: priority weight (> 0); twice the weight asks for twice the normalized rate.
        account: Slurm account (tenant) for hierarchical policies.
        user: Slurm user name.
        arrival_s: submission time on the snapshot's clock.
        due_s: due date on the snapshot's clock, or None.
        tardiness_weight: cost per second late (ANDREAS); 0 when there is no due date.
        slo_s: completion-time objective in seconds from arrival, or None.
        slurm_job_ids: the current Slurm job id(s), e.g. ("123",) or ("123_4",).
        received_s: seconds run per GPU type since the last allocation reset.
        allowed_gpus: GPU counts the job may run with, ascending, starting at `num_gpus`
            (simulated and what-if jobs; ANDREAS chooses among them); () = num_gpus only.
        measured_steps_per_s: GPU type -> steps/s the job was measured doing there at
            `num_gpus` (its own progress reports, live only); the problem rescales the job's
            throughput row with them (`core.throughput.rescale_row`).
        restart_s: what one move costs the job, in seconds without progress: from the
            checkpoint signal to training again (checkpoint, requeue, restore); measured live
            (docs/mechanism.md, "Restart cost"), per job class or trace job in simulation.
            None: unknown, the round mechanism takes its default (`RoundOptions.restart_s`).
        mem_gib: GPU memory one GPU of the job needs, in GiB (> 0): the larger of its spec's
            `mem=` and the peak its progress reports measured (live), or the trace's
            `mem_gib`; GPU types with less memory are ruled out (core/memory_fit.py). None:
            unknown, no type is ruled out.
        utility: what finishing at a given time is worth (the spec's `utility=`,
            core/utility.py); None: its due date and tardiness weight read as one
            (`default_utility`).
        attained_gpu_s: GPU-seconds the job has run so far, all moves included (the
            least-attained-service baseline orders by it); 0 when unknown.
        preemptible: False for a job that cannot be checkpointed (the spec's `preempt=no`):
            tenant policies start it only inside its account's quota and never move it.
    """

    key: str
    job_class: str
    num_gpus: int = 1
    steps_remaining: float | None = None
    total_steps: float | None = None
    weight: float = 1.0
    account: str = ""
    user: str = ""
    arrival_s: float = 0.0
    due_s: float | None = None
    tardiness_weight: float = 0.0
    slo_s: float | None = None
    slurm_job_ids: tuple[str, ...] = ()
    received_s: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    allowed_gpus: tuple[int, ...] = ()
    measured_steps_per_s: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    restart_s: float | None = None
    mem_gib: float | None = None
    utility: Utility | None = None
    attained_gpu_s: float = 0.0
    preemptible: bool = True

    def __post_init__(self) -> None:
        set_field(self, "received_s", frozen_mapping(self.received_s))
        set_field(self, "measured_steps_per_s", frozen_mapping(self.measured_steps_per_s))
        set_field(self, "allowed_gpus", tuple(self.allowed_gpus))
        if self.num_gpus < 1:
            raise InvalidProblemError(f"job {self.key!r}: num_gpus {self.num_gpus} < 1")
        counts = self.allowed_gpus
        if counts and (counts[0] != self.num_gpus or list(counts) != sorted(set(counts))):
            raise InvalidProblemError(
                f"job {self.key!r}: allowed GPU counts {list(counts)} must be distinct, "
                f"ascending and start at num_gpus {self.num_gpus}"
            )
        if not self.weight > 0:
            raise InvalidProblemError(f"job {self.key!r}: weight {self.weight} must be > 0")
        if self.steps_remaining is not None and self.steps_remaining < 0:
            raise InvalidProblemError(
                f"job {self.key!r}: steps_remaining {self.steps_remaining} is negative"
            )
        if self.restart_s is not None and not (
            math.isfinite(self.restart_s) and self.restart_s >= 0
        ):
            raise InvalidProblemError(
                f"job {self.key!r}: restart cost {self.restart_s} s; expected a finite number "
                "of seconds >= 0"
            )
        if self.mem_gib is not None and not (math.isfinite(self.mem_gib) and self.mem_gib > 0):
            raise InvalidProblemError(
                f"job {self.key!r}: memory need {self.mem_gib} GiB; expected a finite number "
                "of GiB > 0"
            )

        if not (math.isfinite(self.attained_gpu_s) and self.attained_gpu_s >= 0):
            raise InvalidProblemError(
                f"job {self.key!r}: attained service {self.attained_gpu_s} GPU-s; expected a "
                "finite number >= 0"
            )

    def the_utility(self) -> Utility:
        """Its utility: the spec's, or its due date and tardiness weight read as one."""
        if self.utility is not None:
            return self.utility
        return default_utility(self.due_s, self.tardiness_weight)

    def with_steps_remaining(self, steps_remaining: float) -> Job:
        """This job with only `steps_remaining` changed: a simulation's progress, every round
        for every running job. The other fields were checked when this job was made, so the
        copy skips __init__ and checks the new value alone."""
        if not steps_remaining >= 0:
            raise InvalidProblemError(
                f"job {self.key!r}: steps_remaining {steps_remaining} is not a number >= 0"
            )
        return copy_with(self, _JOB_FIELDS, "steps_remaining", steps_remaining)

    def with_attained(self, attained_gpu_s: float) -> Job:
        """This job with only `attained_gpu_s` changed (a simulation's accounting, checked
        alone as `with_steps_remaining` is)."""
        if not (math.isfinite(attained_gpu_s) and attained_gpu_s >= 0):
            raise InvalidProblemError(
                f"job {self.key!r}: attained service {attained_gpu_s} GPU-s is not a finite "
                "number >= 0"
            )
        return copy_with(self, _JOB_FIELDS, "attained_gpu_s", attained_gpu_s)


_JOB_FIELDS = tuple(f.name for f in fields(Job))


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything one decision looks at: the time, the nodes and the managed jobs."""

    now_s: float
    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]
    # Every GPU type present on some node, sorted (the column order of a problem); derived
    # once, as every step of a round reads it.
    gpu_types: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_field(self, "gpu_types", tuple(sorted({t for node in self.nodes for t in node.gpus})))

    def capacity(self, gpu_types: Iterable[str]) -> np.ndarray:
        """Free GPUs per type over available nodes, shape (n_types,), in `gpu_types` order
        (read-only)."""
        types_ = tuple(gpu_types)
        nodes, by_types = _LAST_CAPACITY
        if nodes is not self.nodes:  # another cluster (nodes never change once made)
            by_types = {}
            _LAST_CAPACITY[:] = [self.nodes, by_types]
        found: np.ndarray | None = by_types.get(types_)
        if found is None:
            found = np.array(
                [sum(node.free_gpus(t) for node in self.nodes) for t in types_], dtype=float
            )
            found.flags.writeable = False
            by_types[types_] = found
        return found


# The last snapshot's nodes (by identity) and their capacity per tuple of types: a simulation
# and a controller at rest pass the same nodes round after round.
_LAST_CAPACITY: list[Any] = [None, {}]
