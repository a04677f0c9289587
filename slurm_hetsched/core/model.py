"""The shared vocabulary of the decision core: immutable value types.

Cluster side: `Node`, `Job`, `ClusterSnapshot`. Decision side: `Problem` (what every policy
receives), `Allocation` (what it returns: time fractions per job and GPU type), `Placement`
(one round's GPUs per job), `RoundState` (what the round mechanism carries between rounds) and
`RoundPlan` (one round's actions: keep, move, start, stop).

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
from typing import TYPE_CHECKING, Any

import numpy as np

from slurm_hetsched.errors import HetschedError

if TYPE_CHECKING:
    from slurm_hetsched.core.costs import EnergyModel

_EMPTY: Mapping[str, Any] = types.MappingProxyType({})
# Speed-up with more GPUs is sub-linear (ANDREAS): where a job's steps/s at g GPUs is not
# measured, it is rate(g0) * (g / g0) ** SUBLINEAR_EXPONENT from the nearest measured count g0
# (Problem.rates_at). 0.8 gives 1.74x on 2 GPUs and 3.03x on 4; the shipped Gavel table's
# 1 -> 2/4/8-GPU ratios lie mostly between exponents 0.6 and 1.
SUBLINEAR_EXPONENT = 0.8


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
        busy_w: watts of one GPU running a job, for energy costs (core/costs.py); None if none.
        idle_w: watts of one idle, powered GPU; None if none.
    """

    name: str
    price_per_hour: float | None = None
    busy_w: float | None = None
    idle_w: float | None = None


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
        allowed_gpus: GPU counts the job may run with, ascending, starting at `num_gpus`
            (simulated and what-if jobs; ANDREAS chooses among them); () = num_gpus only.
        measured_steps_per_s: GPU type -> steps/s the job was measured doing there at
            `num_gpus` (its own progress reports, live only); the problem rescales the job's
            throughput row with them (`core.throughput.rescale_row`).
        restart_s: what one move costs the job, in seconds without progress: from the
            checkpoint signal to training again (checkpoint, requeue, restore); measured live
            (docs/mechanism.md, "Restart cost"), per job class or trace job in simulation.
            None: unknown, the round mechanism takes its default (`RoundOptions.restart_s`).
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
    allowed_gpus: tuple[int, ...] = ()
    measured_steps_per_s: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    restart_s: float | None = None

    def __post_init__(self) -> None:
        _set(self, "received_s", _frozen_mapping(self.received_s))
        _set(self, "measured_steps_per_s", _frozen_mapping(self.measured_steps_per_s))
        _set(self, "allowed_gpus", tuple(self.allowed_gpus))
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
        nodes: the nodes behind `capacity`, for policies that place jobs on nodes (ANDREAS and
            the exclusive baselines); () when the problem gives only GPU counts. If given,
            `capacity` is their free GPUs per type (available nodes, minus `gpus_in_use`).
        running: job -> where it runs now (jobs not running are absent); placement policies
            keep (exclusive baselines) or re-plan (ANDREAS) these. Needs `nodes`.
        allowed_gpus: (n_jobs,) the GPU counts each job may run with, ascending, the smallest
            being its `num_gpus`; None = every job runs on exactly its `num_gpus` (live jobs).
        throughput_at: (n_jobs, n_types, max_gpus) steps/s on 1..max_gpus GPUs, NaN = not
            measured; None = only `throughput` (at num_gpus) is known. See `rates_at`.
        energy: power and price data for energy costs (core/costs.py), or None.
        runnable: derived, (n_jobs, n_types) bool: throughput > 0 and the type has at least
            `num_gpus` GPUs (a job's GPUs are all of one type).

    Raises:
        InvalidProblemError: on bad shapes, non-finite or negative values, duplicate ids, zero
            total capacity with jobs present, or a job that no GPU type can run; nodes that
            disagree with `capacity`, a running placement on GPUs the nodes do not have, or
            allowed GPU counts that do not start at `num_gpus`.
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
    nodes: tuple[Node, ...] = ()
    running: Mapping[str, Placement] = field(default_factory=lambda: _EMPTY)
    allowed_gpus: tuple[tuple[int, ...], ...] | None = None  # (n_jobs,)
    throughput_at: np.ndarray | None = None  # (n_jobs, n_types, max_gpus) steps/s; NaN = unknown
    energy: EnergyModel | None = None
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
        _check_placement_fields(self)

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

    def gpu_options(self, m: int) -> tuple[int, ...]:
        """The GPU counts job row `m` may run with: `allowed_gpus[m]`, else its num_gpus."""
        if self.allowed_gpus is None:
            return (int(self.num_gpus[m]),)
        return self.allowed_gpus[m]

    def rates_at(self, num_gpus: int) -> np.ndarray:
        """(n_jobs, n_types) steps/s of every job on `num_gpus` GPUs of each type.

        Measured where known: `throughput` at the job's own num_gpus, `throughput_at` at other
        counts. Elsewhere scaled sub-linearly from the nearest measured count g0 (the largest
        below `num_gpus`, else the smallest above): rate(g0) * (num_gpus / g0) **
        SUBLINEAR_EXPONENT. A 0 at g0 (cannot run there) stays 0.
        """
        n, k = self.n_jobs, self.n_types
        width = max(num_gpus, int(self.num_gpus.max(initial=1)))
        if self.throughput_at is not None:
            width = max(width, self.throughput_at.shape[2])
        known = np.full((n, k, width), np.nan)
        if self.throughput_at is not None:
            known[:, :, : self.throughput_at.shape[2]] = self.throughput_at
        known[np.arange(n), :, self.num_gpus - 1] = self.throughput
        counts = np.arange(1, width + 1)
        measured = ~np.isnan(known)
        below = np.where(measured & (counts <= num_gpus), counts, 0).max(axis=2)
        above = np.where(measured & (counts > num_gpus), counts, width + 1).min(axis=2)
        base = np.where(below > 0, below, above)  # (n, k): always measured at num_gpus[m]
        rate = np.take_along_axis(known, (base - 1)[:, :, None], axis=2)[:, :, 0]
        return np.asarray(rate * (num_gpus / base) ** SUBLINEAR_EXPONENT)

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


def _check_placement_fields(p: Problem) -> None:
    """Validate and freeze `nodes`, `running`, `allowed_gpus` and `throughput_at`."""
    n, k = p.n_jobs, p.n_types
    _set(p, "nodes", tuple(p.nodes))
    _set(p, "running", _frozen_mapping(p.running))
    if p.nodes:
        _check_unique(tuple(node.name for node in p.nodes), "node")
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
        _set(p, "allowed_gpus", allowed)
    if p.throughput_at is not None:
        at = np.array(p.throughput_at, dtype=float, copy=True)
        if at.ndim != 3 or at.shape[:2] != (n, k) or at.shape[2] < 1:
            raise InvalidProblemError(
                f"throughput_at: shape {at.shape}, expected ({n}, {k}, max_gpus >= 1)"
            )
        if np.isinf(at).any() or (at < 0).any():
            raise InvalidProblemError("throughput_at: entries must be finite and >= 0, or NaN")
        at.flags.writeable = False
        _set(p, "throughput_at", at)
    node_by_name = {node.name: node for node in p.nodes}
    used: dict[tuple[str, str], int] = {}
    for job_id, placement in p.running.items():
        if job_id not in p.job_ids or placement.job_id != job_id:
            raise InvalidProblemError(
                f"running: placement of {placement.job_id!r} filed under {job_id!r}; expected "
                "a job of the problem filed under its own id"
            )
        m = p.job_ids.index(job_id)
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
        pairs: space sharing (`*_packed` policies): the candidate pairs of job ids, in the
            order of the problem's `packed.pairs`; () for other policies.
        pair_x: (n_pairs, n_types) time fractions each pair spends sharing GPUs of each type
            (num_gpus GPUs for the two jobs together), or None for other policies. Then `x`
            is each job's time alone: job m's row sum plus the pair_x rows of its pairs is
            <= 1, and num_gpus @ x + pair num_gpus @ pair_x <= capacity.
        unmet_slos: policies with SLOs: the jobs whose SLO this allocation does not meet (it
            meets all the others); None for policies that do not consider SLOs.
        placements: policies that place jobs on nodes (ANDREAS, the exclusive baselines):
            job -> its GPUs now, with x 1 on that type; a job absent is postponed. None for
            time-fraction policies.
    """

    job_ids: tuple[str, ...]
    gpu_types: tuple[str, ...]
    x: np.ndarray  # (n_jobs, n_types) time fractions
    objective: float
    solve_s: float
    policy: str
    status: str = "optimal"
    solves: int = 1
    pairs: tuple[tuple[str, str], ...] = ()
    pair_x: np.ndarray | None = None  # (n_pairs, n_types) time fractions of each pair
    unmet_slos: tuple[str, ...] | None = None
    placements: Mapping[str, Placement] | None = None

    def __post_init__(self) -> None:
        shape = (len(self.job_ids), len(self.gpu_types))
        _set(self, "x", _frozen_array(self.x, float, "allocation x", shape))
        if self.placements is not None:
            _set(self, "placements", _frozen_mapping(self.placements))
        _set(self, "pairs", tuple((str(a), str(b)) for a, b in self.pairs))
        if self.pair_x is not None or self.pairs:
            pair_shape = (len(self.pairs), len(self.gpu_types))
            pair_x = np.zeros(pair_shape) if self.pair_x is None else self.pair_x
            _set(self, "pair_x", _frozen_array(pair_x, float, "allocation pair_x", pair_shape))
        if self.unmet_slos is not None:
            _set(self, "unmet_slos", tuple(self.unmet_slos))

    def share(self, job_id: str) -> dict[str, float]:
        """Time fraction per GPU type of one job."""
        row = self.x[self.job_ids.index(job_id)]
        return {t: float(v) for t, v in zip(self.gpu_types, row, strict=True)}

    def to_json(self, digits: int = 3) -> dict[str, Any]:
        """The "What-if allocation" output of docs/interfaces.md, values rounded to `digits`.

        Space sharing adds "packed": [{"jobs": [a, b], "allocation": {type: fraction}}] for
        the pairs with a non-zero rounded share; policies with SLOs add "unmet_slos";
        placement policies add "placement": {job: [{"node", "type", "count"}]}.
        """
        out: dict[str, Any] = {
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
        if self.pair_x is not None:
            out["packed"] = [
                {
                    "jobs": list(pair),
                    "allocation": {
                        t: round(float(v), digits) + 0.0
                        for t, v in zip(self.gpu_types, row, strict=True)
                    },
                }
                for pair, row in zip(self.pairs, self.pair_x, strict=True)
                if np.round(row, digits).any()
            ]
        if self.unmet_slos is not None:
            out["unmet_slos"] = list(self.unmet_slos)
        if self.placements is not None:  # placement policies: jobs left out are postponed
            out["placement"] = {
                job: [{"node": s.node, "type": s.gpu_type, "count": s.count} for s in p.slices]
                for job, p in sorted(self.placements.items())
            }
        return out


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
        deficit_s: (n_jobs, n_types) Gavel's deficit: seconds each job should have received on
            each type by its allocation minus what it received, summed over the periods
            between resets (a tie-breaker between equal priorities); default zeros.
        last_reset_s: when `received_s` was last reset, on the snapshot's clock; None before
            the first reset.
        reset_pending: the allocation changed since the last reset, and the reset waits for
            the minimum interval between resets (docs/mechanism.md).
        placed_at_s: job id -> when its current placement began (it started or moved there),
            on the snapshot's clock: how long it has stayed, for amortized moves. A placed
            job missing here is taken as placed at the last round.
    """

    round: int
    job_ids: tuple[str, ...]
    gpu_types: tuple[str, ...]
    received_s: np.ndarray  # (n_jobs, n_types) seconds
    allocation: Allocation | None = None
    placements: Mapping[str, Placement] = field(default_factory=lambda: _EMPTY)
    deficit_s: np.ndarray = None  # type: ignore[assignment]  # (n_jobs, n_types) s; default 0
    last_reset_s: float | None = None
    reset_pending: bool = False
    placed_at_s: Mapping[str, float] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        shape = (len(self.job_ids), len(self.gpu_types))
        _set(self, "received_s", _frozen_array(self.received_s, float, "received_s", shape))
        deficit = np.zeros(shape) if self.deficit_s is None else self.deficit_s
        _set(self, "deficit_s", _frozen_array(deficit, float, "deficit_s", shape))
        _set(self, "placements", _frozen_mapping(self.placements))
        _set(
            self,
            "placed_at_s",
            _frozen_mapping({j: t for j, t in self.placed_at_s.items() if j in self.placements}),
        )
        known = set(self.job_ids)
        for job_id, placement in self.placements.items():
            if job_id not in known or placement.job_id != job_id:
                raise InvalidProblemError(
                    f"round state: placement of {placement.job_id!r} filed under {job_id!r}; "
                    "expected a job of `job_ids` filed under its own id"
                )

    @classmethod
    def initial(cls, gpu_types: Iterable[str]) -> RoundState:
        """The state before the first round: no jobs, nothing received, nothing placed."""
        types_ = tuple(gpu_types)
        return cls(round=0, job_ids=(), gpu_types=types_, received_s=np.zeros((0, len(types_))))


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """One round's actions, as differences from the last round, for the enactor.

    Every job placed this round is in exactly one of `keep`, `move` and `start`.

    Attributes:
        round: the round's index (1 for the first).
        keep: job -> its placement, the same GPUs as last round (lease extension: leave it).
        move: job -> its new placement; it ran last round elsewhere (checkpoint, then place).
        start: job -> its placement; it did not run last round.
        stop: jobs that ran last round, are still in the snapshot, and are not placed now
            (checkpoint and hold), sorted.
        priority: job of the allocation -> the priority it was chosen with, or its highest
            priority over GPU types if not placed (for logs and the admin comment).
        reset: True when this round reset the received time (a new allocation took effect).
        set_aside: job -> why the round left it out: the policy failed with it (the round went
            on without it). Never placed, kept or stopped; the cluster hands it back.
        held: job -> why it stays on its GPUs although the plain mechanism would have moved or
            stopped it (amortized moves, docs/mechanism.md); such a job is also in `keep`.
    """

    round: int
    keep: Mapping[str, Placement] = field(default_factory=lambda: _EMPTY)
    move: Mapping[str, Placement] = field(default_factory=lambda: _EMPTY)
    start: Mapping[str, Placement] = field(default_factory=lambda: _EMPTY)
    stop: tuple[str, ...] = ()
    priority: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    reset: bool = False
    set_aside: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    held: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        for name in ("keep", "move", "start", "priority", "set_aside", "held"):
            _set(self, name, _frozen_mapping(getattr(self, name)))
        _set(self, "stop", tuple(self.stop))

    @property
    def placements(self) -> dict[str, Placement]:
        """Every job placed this round (keep, move and start), by job id, sorted."""
        merged = {**self.keep, **self.move, **self.start}
        return {job_id: merged[job_id] for job_id in sorted(merged)}
