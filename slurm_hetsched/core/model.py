"""The shared vocabulary of the decision core: immutable value types.

Cluster side: `Node`, `Job`, `ClusterSnapshot`. Decision side: `Problem` (what every policy
receives), `Allocation` (what it returns: time fractions per job and GPU type), `Placement`
(one round's GPUs per job) and `RoundState` (what the round mechanism carries between rounds).

Conventions, fixed here once:
- GPU types are data (Slurm GRES type strings such as "v100"), never a list in code.
- Row order of every per-job array is `job_ids`; column order is `gpu_types`.
- Times are seconds on one clock chosen by the caller (`Problem.now_s`); the core never reads it.
- Arrays are copied and made read-only on construction, so a frozen value stays frozen.

This module does no I/O.
"""

from __future__ import annotations

import enum
import math
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slurm_hetsched.errors import HetschedError

_EMPTY: Mapping[str, Any] = types.MappingProxyType({})


class InvalidProblemError(HetschedError, ValueError):
    """A problem (or a piece of one) is malformed; the message names the job, type or key."""


def _frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(value or {}))


def _frozen_array(
    value: Any,
    dtype: type,
    what: str,
    shape: tuple[int, ...],
    *,
    allow_nan: bool = False,
    allow_inf: bool = False,
) -> np.ndarray:
    """A read-only copy of `value` with the given dtype and shape; raises on a mismatch.

    NaN and +inf are rejected unless allowed (they mean "none" for due dates and SLOs).
    """
    try:
        array: np.ndarray = np.array(value, dtype=dtype, copy=True)
    except (TypeError, ValueError) as exc:
        raise InvalidProblemError(f"{what}: not numeric ({exc})") from None
    if array.shape != shape:
        raise InvalidProblemError(f"{what}: shape {array.shape}, expected {shape}")
    if array.dtype.kind == "f":
        bad = np.isneginf(array)
        if not allow_nan:
            bad |= np.isnan(array)
        if not allow_inf:
            bad |= np.isposinf(array)
        if bad.any():
            raise InvalidProblemError(f"{what}: non-finite value {array[bad].flat[0]!r}")
    array.flags.writeable = False
    return array


def _set(obj: object, name: str, value: object) -> None:
    """Assign a field of a frozen dataclass during its own __post_init__ (normalisation)."""
    object.__setattr__(obj, name, value)


# ----------------------------------------------------------------------------------------------
# Cluster side


@dataclass(frozen=True, slots=True)
class GpuType:
    """One GPU type's site data (from `data/gpu_types.toml` or a config override).

    Attributes:
        name: the Slurm GRES type string, e.g. "v100".
        price_per_hour: rental or amortised price per GPU-hour, for the cost policies; None if
            the site gave none.
    """

    name: str
    price_per_hour: float | None = None


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
    gpus_in_use: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    features: tuple[str, ...] = ()
    available: bool = True

    def __post_init__(self) -> None:
        _set(self, "gpus", _frozen_mapping(self.gpus))
        _set(self, "gpus_in_use", _frozen_mapping(self.gpus_in_use))
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

    def free_gpus(self, gpu_type: str) -> int:
        """GPUs of `gpu_type` the scheduler may use on this node (0 if unavailable)."""
        if not self.available:
            return 0
        return self.gpus.get(gpu_type, 0) - self.gpus_in_use.get(gpu_type, 0)


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
    received_s: Mapping[str, float] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        _set(self, "received_s", _frozen_mapping(self.received_s))
        if self.num_gpus < 1:
            raise InvalidProblemError(f"job {self.key!r}: num_gpus {self.num_gpus} < 1")
        if not self.weight > 0:
            raise InvalidProblemError(f"job {self.key!r}: weight {self.weight} must be > 0")
        if self.steps_remaining is not None and self.steps_remaining < 0:
            raise InvalidProblemError(
                f"job {self.key!r}: steps_remaining {self.steps_remaining} is negative"
            )


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything one decision looks at: the time, the nodes and the managed jobs."""

    now_s: float
    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """Every GPU type present on some node, sorted (the column order of a problem)."""
        return tuple(sorted({t for node in self.nodes for t in node.gpus}))

    def capacity(self, gpu_types: Iterable[str]) -> np.ndarray:
        """Free GPUs per type over available nodes, shape (n_types,), in `gpu_types` order."""
        return np.array(
            [sum(node.free_gpus(t) for node in self.nodes) for t in gpu_types], dtype=float
        )


# ----------------------------------------------------------------------------------------------
# Decision side


class AccountPolicy(enum.Enum):
    """How an account shares its weight among its own jobs in hierarchical policies."""

    FAIR = "fair"  # in proportion to the jobs' weights
    FIFO = "fifo"  # all of it to the earliest unsatisfied job (arrival_s, then job id)


@dataclass(frozen=True, slots=True)
class Account:
    """A tenant in hierarchical policies: its weight and how it shares it inside."""

    name: str
    weight: float = 1.0
    policy: AccountPolicy = AccountPolicy.FAIR

    def __post_init__(self) -> None:
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise InvalidProblemError(f"account {self.name!r}: weight {self.weight} must be > 0")


@dataclass(frozen=True, slots=True)
class PackedPairs:
    """Space-sharing candidates: pairs of jobs that may share one set of GPUs.

    Attributes:
        pairs: (n_pairs, 2) int job indices (rows of the problem), a != b.
        throughput: (n_pairs, n_types, 2) steps/s of each job of the pair while they share
            GPUs of that type; 0 = the pair cannot share that type.
    """

    pairs: np.ndarray  # (n_pairs, 2) int
    throughput: np.ndarray  # (n_pairs, n_types, 2) steps/s


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """What every policy receives: one allocation problem in matrix form.

    Rows are `job_ids`, columns `gpu_types`. Each policy reads the fields it needs and ignores
    the others; an optional field a policy needs but the problem lacks is reported by name.

    Attributes:
        job_ids: job keys, unique.
        gpu_types: GPU type names, unique.
        throughput: (n_jobs, n_types) steps/s of each job at its own `num_gpus` on that type;
            0 = cannot run there.
        capacity: (n_types,) GPUs of each type the policy may hand out.
        num_gpus: (n_jobs,) int64 GPUs each job uses at once (Gavel's scale factor), >= 1.
        weight: (n_jobs,) priority weights, > 0 (default 1).
        job_accounts: (n_jobs,) account of each job (default "" for all: one account).
        accounts: account name -> Account; an account not listed has weight 1 and is fair.
        arrival_s: (n_jobs,) arrival times on the problem's clock (default 0).
        now_s: the problem's current time (default 0; the what-if format counts from it).
        steps: (n_jobs,) steps remaining, >= 0; None if the caller has none.
        due_s: (n_jobs,) due dates, NaN = none; None if no job has one.
        tardiness_weight: (n_jobs,) cost per second late; None if not given.
        slo_s: (n_jobs,) completion-time objectives from arrival, inf = none; None if not given.
        received_s: (n_jobs, n_types) seconds received per type since the allocation reset.
        packed: pair throughputs for space sharing, or None.
        price_per_hour: (n_types,) price per GPU-hour, or None.
        runnable: derived, (n_jobs, n_types) bool: throughput > 0 and the type has at least
            `num_gpus` GPUs (a job's GPUs are all of one type).

    Raises:
        InvalidProblemError: on bad shapes, non-finite or negative values, duplicate ids, zero
            total capacity with jobs present, or a job that no GPU type can run.
    """

    job_ids: tuple[str, ...]
    gpu_types: tuple[str, ...]
    throughput: np.ndarray  # (n_jobs, n_types) steps/s at the job's num_gpus; 0 = cannot run
    capacity: np.ndarray  # (n_types,) GPUs
    num_gpus: np.ndarray = None  # type: ignore[assignment]  # (n_jobs,) int; default 1
    weight: np.ndarray = None  # type: ignore[assignment]  # (n_jobs,); default 1
    job_accounts: tuple[str, ...] = ()  # (n_jobs,); default all ""
    accounts: Mapping[str, Account] = field(default_factory=lambda: _EMPTY)
    arrival_s: np.ndarray = None  # type: ignore[assignment]  # (n_jobs,) s; default 0
    now_s: float = 0.0
    steps: np.ndarray | None = None  # (n_jobs,) steps remaining
    due_s: np.ndarray | None = None  # (n_jobs,) s; NaN = none
    tardiness_weight: np.ndarray | None = None  # (n_jobs,) cost per s late
    slo_s: np.ndarray | None = None  # (n_jobs,) s; inf = none
    received_s: np.ndarray | None = None  # (n_jobs, n_types) s
    packed: PackedPairs | None = None
    price_per_hour: np.ndarray | None = None  # (n_types,)
    runnable: np.ndarray = field(init=False, repr=False, compare=False)  # (n_jobs, n_types) bool

    def __post_init__(self) -> None:
        n, k = len(self.job_ids), len(self.gpu_types)

        def set_(name: str, value: object) -> None:
            _set(self, name, value)

        set_("job_ids", tuple(self.job_ids))
        set_("gpu_types", tuple(self.gpu_types))
        _check_unique(self.job_ids, "job id")
        _check_unique(self.gpu_types, "GPU type")
        set_("throughput", _frozen_array(self.throughput, float, "throughput", (n, k)))
        set_("capacity", _frozen_array(self.capacity, float, "capacity", (k,)))
        num_gpus = np.ones(n) if self.num_gpus is None else self.num_gpus
        set_("num_gpus", _frozen_array(num_gpus, float, "num_gpus", (n,)))
        weight = np.ones(n) if self.weight is None else self.weight
        set_("weight", _frozen_array(weight, float, "weight", (n,)))
        arrival = np.zeros(n) if self.arrival_s is None else self.arrival_s
        set_("arrival_s", _frozen_array(arrival, float, "arrival_s", (n,)))
        accounts = self.job_accounts or ("",) * n
        if len(accounts) != n:
            raise InvalidProblemError(f"job_accounts: {len(accounts)} entries for {n} jobs")
        set_("job_accounts", tuple(accounts))
        set_("accounts", _frozen_mapping(self.accounts))
        for name, account in self.accounts.items():
            if account.name != name:
                raise InvalidProblemError(f"accounts: key {name!r} holds {account.name!r}")
        optional = {"steps": (n,), "tardiness_weight": (n,), "received_s": (n, k)}
        for name, shape in optional.items():
            if getattr(self, name) is not None:
                set_(name, _frozen_array(getattr(self, name), float, name, shape))
        if self.due_s is not None:
            set_("due_s", _frozen_array(self.due_s, float, "due_s", (n,), allow_nan=True))
        if self.slo_s is not None:
            set_("slo_s", _frozen_array(self.slo_s, float, "slo_s", (n,), allow_inf=True))
        if self.price_per_hour is not None:
            set_("price_per_hour", _frozen_array(self.price_per_hour, float, "price", (k,)))
        if self.packed is not None:
            set_("packed", _checked_packed(self.packed, n, k, self.num_gpus))
        self._check_values()
        num_gpus = self.num_gpus.astype(np.int64)
        num_gpus.flags.writeable = False
        set_("num_gpus", num_gpus)
        runnable = (self.throughput > 0) & (self.num_gpus[:, None] <= self.capacity[None, :])
        runnable.flags.writeable = False
        set_("runnable", runnable)
        self._check_runnable()

    @property
    def n_jobs(self) -> int:
        return len(self.job_ids)

    @property
    def n_types(self) -> int:
        return len(self.gpu_types)

    def account(self, name: str) -> Account:
        """The account `name`, or the default (weight 1, fair) if the problem lists none."""
        return self.accounts.get(name) or Account(name)

    def require(self, name: str, policy: str) -> np.ndarray:
        """The optional array field `name`, or an error saying `policy` needs it."""
        value = getattr(self, name)
        if value is None:
            raise InvalidProblemError(f"policy {policy!r} needs `{name}` for every job")
        return value  # type: ignore[no-any-return]

    def _check_values(self) -> None:
        def first_bad(values: np.ndarray, bad: np.ndarray, what: str, rule: str) -> None:
            if bad.any():
                i = int(np.flatnonzero(bad.reshape(len(values), -1).any(axis=1))[0])
                raise InvalidProblemError(f"job {self.job_ids[i]!r}: {what} {values[i]} {rule}")

        first_bad(self.throughput, self.throughput < 0, "throughput", "has a negative entry")
        first_bad(
            self.num_gpus,
            (self.num_gpus < 1) | (self.num_gpus % 1 != 0),
            "num_gpus",
            "must be a whole number >= 1",
        )
        first_bad(self.weight, self.weight <= 0, "weight", "must be > 0")
        if self.steps is not None:
            first_bad(self.steps, self.steps < 0, "steps", "is negative")
        if self.slo_s is not None:
            first_bad(self.slo_s, self.slo_s <= 0, "slo_s", "must be > 0")
        if self.tardiness_weight is not None:
            first_bad(
                self.tardiness_weight, self.tardiness_weight < 0, "tardiness_weight", "is negative"
            )
        if self.received_s is not None:
            first_bad(self.received_s, self.received_s < 0, "received_s", "has a negative entry")
        negative = np.flatnonzero(self.capacity < 0)
        if negative.size:
            t = self.gpu_types[negative[0]]
            raise InvalidProblemError(f"GPU type {t!r}: capacity {self.capacity[negative[0]]} < 0")

    def _check_runnable(self) -> None:
        if self.n_jobs == 0:
            return
        if self.capacity.sum() <= 0:
            raise InvalidProblemError(
                f"zero total capacity over GPU types {list(self.gpu_types)}: no job can run; "
                "check the node list or the `gpus` counts"
            )
        stuck = np.flatnonzero(~self.runnable.any(axis=1))
        if stuck.size:
            i = int(stuck[0])
            options = {
                t: (float(self.throughput[i, j]), float(self.capacity[j]))
                for j, t in enumerate(self.gpu_types)
            }
            raise InvalidProblemError(
                f"job {self.job_ids[i]!r} (num_gpus={int(self.num_gpus[i])}) cannot run on any "
                f"GPU type: (steps/s, GPUs) per type = {options}; it needs a type with "
                f"throughput > 0 and at least num_gpus GPUs ({stuck.size} such job(s) in all)"
            )


def _check_unique(names: tuple[str, ...], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidProblemError(f"{what} {name!r}: must be a non-empty string")
        if name in seen:
            raise InvalidProblemError(f"{what} {name!r} appears twice")
        seen.add(name)


def _checked_packed(packed: PackedPairs, n: int, k: int, num_gpus: np.ndarray) -> PackedPairs:
    pairs = np.array(packed.pairs, dtype=np.int64, copy=True).reshape(-1, 2)
    m = len(pairs)
    tput = _frozen_array(packed.throughput, float, "packed throughput", (m, k, 2))
    if m and (pairs.min() < 0 or pairs.max() >= n or (pairs[:, 0] == pairs[:, 1]).any()):
        raise InvalidProblemError("packed pairs: job indices out of range or paired with itself")
    if (tput < 0).any():
        raise InvalidProblemError("packed pairs: negative throughput")
    unequal = np.flatnonzero(num_gpus[pairs[:, 0]] != num_gpus[pairs[:, 1]])
    if len(unequal):
        a, b = pairs[unequal[0]]
        raise InvalidProblemError(
            f"packed pair ({a}, {b}): jobs with different num_gpus cannot share GPUs"
        )
    pairs.flags.writeable = False
    return PackedPairs(pairs=pairs, throughput=tput)


@dataclass(frozen=True, slots=True)
class Allocation:
    """A policy's answer: the fraction of wall-clock time each job spends on each GPU type.

    Attributes:
        job_ids: row order, as in the problem.
        gpu_types: column order, as in the problem.
        x: (n_jobs, n_types) time fractions in [0, 1]; rows sum to <= 1; num_gpus-weighted
            columns sum to <= capacity.
        objective: the policy's objective value (for max-min fairness: the smallest
            weighted normalized throughput).
        solve_s: seconds the solver stack reported for building and solving (not wall time
            measured by the core, which reads no clock); 0.0 if not reported.
        policy: the registered name of the policy that produced it.
        status: the solver status; always "optimal" for an allocation a policy returns.
        solves: how many solver calls it took (LPs, for the max-min policies).
    """

    job_ids: tuple[str, ...]
    gpu_types: tuple[str, ...]
    x: np.ndarray  # (n_jobs, n_types) time fractions
    objective: float
    solve_s: float
    policy: str
    status: str = "optimal"
    solves: int = 1

    def __post_init__(self) -> None:
        shape = (len(self.job_ids), len(self.gpu_types))
        _set(self, "x", _frozen_array(self.x, float, "allocation x", shape))

    def share(self, job_id: str) -> dict[str, float]:
        """Time fraction per GPU type of one job."""
        row = self.x[self.job_ids.index(job_id)]
        return {t: float(v) for t, v in zip(self.gpu_types, row, strict=True)}

    def to_json(self, digits: int = 3) -> dict[str, Any]:
        """The "What-if allocation" output of docs/interfaces.md, values rounded to `digits`."""
        return {
            "policy": self.policy,
            "allocation": {
                job: {
                    t: round(float(v), digits) + 0.0
                    for t, v in zip(self.gpu_types, row, strict=True)
                }
                for job, row in zip(self.job_ids, self.x, strict=True)
            },
            "objective": round(float(self.objective), digits),
            "solve_s": round(float(self.solve_s), digits),
        }


# ----------------------------------------------------------------------------------------------
# Round mechanism (types only; the mechanism itself lives in core/mechanism.py)


@dataclass(frozen=True, slots=True)
class GpuSlice:
    """`count` GPUs of `gpu_type` on `node`."""

    node: str
    gpu_type: str
    count: int


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one job runs for one round: its GPUs, possibly spread over nodes of one type."""

    job_id: str
    slices: tuple[GpuSlice, ...]

    @property
    def num_gpus(self) -> int:
        return sum(s.count for s in self.slices)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({s.gpu_type for s in self.slices}))

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.node for s in self.slices))


@dataclass(frozen=True, slots=True)
class RoundState:
    """What the round mechanism remembers between rounds; it takes one and returns the next.

    Attributes:
        round: index of the last round planned (0 before the first).
        job_ids: row order of `received_s`.
        gpu_types: column order of `received_s`.
        received_s: (n_jobs, n_types) seconds each job ran on each type since the last
            allocation reset (Gavel's time-so-far; the priority is allocation / share received).
        allocation: the allocation the rounds currently realise, or None before the first.
        placements: job id -> its current placement (jobs not running are absent).
    """

    round: int
    job_ids: tuple[str, ...]
    gpu_types: tuple[str, ...]
    received_s: np.ndarray  # (n_jobs, n_types) seconds
    allocation: Allocation | None = None
    placements: Mapping[str, Placement] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        shape = (len(self.job_ids), len(self.gpu_types))
        _set(self, "received_s", _frozen_array(self.received_s, float, "received_s", shape))
        _set(self, "placements", _frozen_mapping(self.placements))

    @classmethod
    def initial(cls, gpu_types: Iterable[str]) -> RoundState:
        """The state before the first round: no jobs, nothing received, nothing placed."""
        types_ = tuple(gpu_types)
        return cls(round=0, job_ids=(), gpu_types=types_, received_s=np.zeros((0, len(types_))))
