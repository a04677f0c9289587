"""The `Problem` every policy receives, in matrix form, and its validation.

Rows are `job_ids`, columns `gpu_types`. Construction checks every field (shapes, finiteness,
signs, unique ids, nodes against capacity, running placements against the nodes) and freezes it,
so a policy can trust what it reads. `PackedPairs` are its space-sharing candidates; `rates_at`
extends the measured throughputs to other GPU counts (`SUBLINEAR_EXPONENT`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from slurm_hetsched.core.model.accounts import Account
from slurm_hetsched.core.model.cluster import Node
from slurm_hetsched.core.model.energy import EnergyModel
from slurm_hetsched.core.model.frozen import (
    EMPTY,
    InvalidProblemError,
    frozen_array,
    frozen_mapping,
    set_field,
)
from slurm_hetsched.core.model.placement import Placement
from slurm_hetsched.core.model.problem_fields import check_placement_fields, check_unique
from slurm_hetsched.core.model.reservation import Reservation
from slurm_hetsched.core.utility import Utility, default_utility

# Speed-up with more GPUs is sub-linear (ANDREAS): where a job's steps/s at g GPUs is not
# measured, it is rate(g0) * (g / g0) ** SUBLINEAR_EXPONENT from the nearest measured count g0
# (Problem.rates_at). 0.8 gives 1.74x on 2 GPUs and 3.03x on 4; the shipped Gavel table's
# 1 -> 2/4/8-GPU ratios lie mostly between exponents 0.6 and 1.
SUBLINEAR_EXPONENT = 0.8


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
        utilities: (n_jobs,) what finishing is worth to each job (core/utility.py); None =
            every job's due date and tardiness weight read as one (`utility`).
        restart_s: (n_jobs,) seconds one move costs each job, NaN = unknown (the policy's
            default); None if no job's is known.
        throughput_spread: (n_jobs, n_types) steps/s at the job's num_gpus with its GPUs
            spread over several nodes (Gavel's unconsolidated figures); None = as
            `throughput` (no figures: no communication penalty is known).
        attained_gpu_s: (n_jobs,) GPU-seconds each job has run so far; None if unknown.
        runnable: derived, (n_jobs, n_types) bool: throughput > 0 and the type has at least
            `num_gpus` GPUs (a job's GPUs are all of one type).
        reservations: job -> its admitted schedule (core/model/reservation.py), what a
            reservation policy (oasis) returned last round in `Allocation.reservations`;
            other policies ignore it. Entries of jobs not in the problem are ignored.
        preemptible: (n_jobs,) False for a job that cannot be checkpointed (`preempt=no`):
            tenant policies start it only inside its account's quota and never move it;
            None = every job can be.
        mixed_gangs: the problem is for a policy that places gangs across types (hadar): a job
            no single type can hold is accepted when the types it runs on hold its GPUs
            together (it then has no runnable type). False for every other policy.

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
    accounts: Mapping[str, Account] = field(default_factory=lambda: EMPTY)
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
    running: Mapping[str, Placement] = field(default_factory=lambda: EMPTY)
    allowed_gpus: tuple[tuple[int, ...], ...] | None = None  # (n_jobs,)
    throughput_at: np.ndarray | None = None  # (n_jobs, n_types, max_gpus) steps/s; NaN = unknown
    energy: EnergyModel | None = None
    utilities: tuple[Utility, ...] | None = None
    restart_s: np.ndarray | None = None  # (n_jobs,) s; NaN = unknown
    throughput_spread: np.ndarray | None = None  # (n_jobs, n_types) steps/s spread over nodes
    attained_gpu_s: np.ndarray | None = None  # (n_jobs,) GPU-s
    mixed_gangs: bool = False
    reservations: Mapping[str, Reservation] = field(default_factory=lambda: EMPTY)
    preemptible: tuple[bool, ...] | None = None  # (n_jobs,); None = every job
    runnable: np.ndarray = field(init=False, repr=False, compare=False)  # (n_jobs, n_types) bool

    def __post_init__(self) -> None:
        n, k = len(self.job_ids), len(self.gpu_types)

        def set_(name: str, value: object) -> None:
            set_field(self, name, value)

        set_("job_ids", tuple(self.job_ids))
        set_("gpu_types", tuple(self.gpu_types))
        check_unique(self.job_ids, "job id")
        check_unique(self.gpu_types, "GPU type")
        set_("throughput", frozen_array(self.throughput, float, "throughput", (n, k)))
        set_("capacity", frozen_array(self.capacity, float, "capacity", (k,)))
        num_gpus = np.ones(n) if self.num_gpus is None else self.num_gpus
        set_("num_gpus", frozen_array(num_gpus, float, "num_gpus", (n,)))
        weight = np.ones(n) if self.weight is None else self.weight
        set_("weight", frozen_array(weight, float, "weight", (n,)))
        arrival = np.zeros(n) if self.arrival_s is None else self.arrival_s
        set_("arrival_s", frozen_array(arrival, float, "arrival_s", (n,)))
        accounts = self.job_accounts or ("",) * n
        if len(accounts) != n:
            raise InvalidProblemError(f"job_accounts: {len(accounts)} entries for {n} jobs")
        set_("job_accounts", tuple(accounts))
        set_("accounts", frozen_mapping(self.accounts))
        set_("reservations", frozen_mapping(self.reservations))
        if self.preemptible is not None:
            if len(self.preemptible) != n:
                raise InvalidProblemError(
                    f"preemptible: {len(self.preemptible)} entries for {n} jobs"
                )
            set_("preemptible", tuple(bool(v) for v in self.preemptible))
        for name, account in self.accounts.items():
            if account.name != name:
                raise InvalidProblemError(f"accounts: key {name!r} holds {account.name!r}")
        optional = {
            "steps": (n,),
            "tardiness_weight": (n,),
            "received_s": (n, k),
            "throughput_spread": (n, k),
            "attained_gpu_s": (n,),
        }
        for name, shape in optional.items():
            if getattr(self, name) is not None:
                set_(name, frozen_array(getattr(self, name), float, name, shape))
        if self.due_s is not None:
            set_("due_s", frozen_array(self.due_s, float, "due_s", (n,), allow_nan=True))
        if self.slo_s is not None:
            set_("slo_s", frozen_array(self.slo_s, float, "slo_s", (n,), allow_inf=True))
        if self.restart_s is not None:
            set_(
                "restart_s", frozen_array(self.restart_s, float, "restart_s", (n,), allow_nan=True)
            )
        if self.utilities is not None:
            if len(self.utilities) != n or not all(isinstance(u, Utility) for u in self.utilities):
                raise InvalidProblemError(f"utilities: expected {n} Utility values, one per job")
            set_("utilities", tuple(self.utilities))
        if self.price_per_hour is not None:
            set_("price_per_hour", frozen_array(self.price_per_hour, float, "price", (k,)))
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
        check_placement_fields(self)

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

    def utility(self, m: int) -> Utility:
        """What finishing is worth to job row `m`: its own utility, else its due date and
        tardiness weight read as one (core/utility.py)."""
        if self.utilities is not None:
            return self.utilities[m]
        due = None if self.due_s is None or np.isnan(self.due_s[m]) else float(self.due_s[m])
        weight = 0.0 if self.tardiness_weight is None else float(self.tardiness_weight[m])
        return default_utility(due, weight)

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
        if self.throughput_spread is not None:
            first_bad(
                self.throughput_spread,
                self.throughput_spread < 0,
                "throughput_spread",
                "has a negative entry",
            )
        if self.attained_gpu_s is not None:
            first_bad(self.attained_gpu_s, self.attained_gpu_s < 0, "attained_gpu_s", "is negative")
        if self.restart_s is not None:
            first_bad(self.restart_s, self.restart_s < 0, "restart_s", "is negative")
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
        blocked = ~self.runnable.any(axis=1)
        if self.mixed_gangs:
            # A job no single type can hold may still run as a gang across types: it is stuck
            # only when all the types it runs on hold fewer GPUs than it needs together.
            across = np.where(self.throughput > 0, self.capacity[None, :], 0.0).sum(axis=1)
            blocked &= across < self.num_gpus
        stuck = np.flatnonzero(blocked)
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


def _checked_packed(packed: PackedPairs, n: int, k: int, num_gpus: np.ndarray) -> PackedPairs:
    pairs = np.array(packed.pairs, dtype=np.int64, copy=True).reshape(-1, 2)
    m = len(pairs)
    tput = frozen_array(packed.throughput, float, "packed throughput", (m, k, 2))
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
