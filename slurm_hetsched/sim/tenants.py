"""The tenants' ledger of a simulated run (Astraea and its baselines; docs/simulation.md,
"Astraea evaluation"): per account what its jobs were worth, what it paid for GPUs borrowed and
received for GPUs lent (the payments the policy returned each round), and the GPU-hours it
borrowed and lent.

- Payments: `PaymentLedger`, the simulator's round store, adds up `Allocation.payments` of
  every enacted round for the jobs the round placed (a payment is for one round; an allocation
  kept for several rounds charges each of them).
- GPU-hours, from what ran where and when (the cluster's intervals, restarts included): at each
  moment an account's GPUs of a type beyond its quota are borrowed; the GPUs borrowed of a type
  are lent by the owners of its idle GPUs in proportion to what each leaves idle (Astraea's eq.
  (2); GPUs in no quota count as the cluster's own, POOL_OWNER), so lent equals borrowed.
- Revenue g_u = utility + received - paid (the paper's per-user revenue); summed over the
  accounts and the pool, payments cancel and the revenues add up to the total utility.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slurm_hetsched.core.costs import Interval
from slurm_hetsched.core.model import POOL_OWNER, Account
from slurm_hetsched.core.ports import RoundRecord
from slurm_hetsched.sim.traces import TraceJob
from slurm_hetsched.store.memory import MemoryStore


@dataclass(frozen=True, slots=True)
class TenantRecord:
    """One account (or the pool, POOL_OWNER) at the end of a run.

    Attributes:
        account: its name.
        quota: GPU type -> GPUs it owns (the pool: those in no account's quota).
        jobs: its jobs in the trace; completed: those that finished.
        utility: the sum of its finished jobs' utilities at completion.
        paid: what its jobs paid for GPUs outside its quota, over the run.
        received: what it received for its idle GPUs others used.
        borrowed_gpu_h: GPU-hours it held beyond its quota.
        lent_gpu_h: GPU-hours of its idle quota that others held.
    """

    account: str
    quota: Mapping[str, int] = field(default_factory=dict)
    jobs: int = 0
    completed: int = 0
    utility: float = 0.0
    paid: float = 0.0
    received: float = 0.0
    borrowed_gpu_h: float = 0.0
    lent_gpu_h: float = 0.0

    @property
    def revenue(self) -> float:
        """g_u = utility + received - paid."""
        return self.utility + self.received - self.paid

    def to_json(self) -> dict[str, Any]:
        return {
            "quota": dict(sorted(self.quota.items())),
            "jobs": self.jobs,
            "completed": self.completed,
            "utility": _r(self.utility),
            "paid": _r(self.paid),
            "received": _r(self.received),
            "revenue": _r(self.revenue),
            "borrowed_gpu_h": _r(self.borrowed_gpu_h, 4),
            "lent_gpu_h": _r(self.lent_gpu_h, 4),
        }


class PaymentLedger(MemoryStore):
    """The simulator's store (the last round) that also adds up every enacted round's
    payments: `paid` per payer, `received` per owner; `seen` once a policy returned any."""

    def __init__(self) -> None:
        super().__init__()
        self.paid: dict[str, float] = {}
        self.received: dict[str, float] = {}
        self.seen = False

    def save_enacted(self, record: RoundRecord) -> None:
        super().save_enacted(record)
        payments = record.allocation.payments
        if payments is None:
            return
        self.seen = True
        placed = record.plan.placements
        for job_id, payment in payments.items():
            if job_id not in placed:
                continue
            self.paid[payment.payer] = self.paid.get(payment.payer, 0.0) + payment.amount
            for owner, amount in payment.shares.items():
                self.received[owner] = self.received.get(owner, 0.0) + amount


def has_quotas(accounts: Mapping[str, Account]) -> bool:
    """Whether any account owns GPUs."""
    return any(account.quota for account in accounts.values())


def tenant_records(
    trace: Sequence[TraceJob],
    capacity: Mapping[str, int],
    accounts: Mapping[str, Account],
    states: Mapping[str, Any],
    intervals: Sequence[Interval],
    ledger: PaymentLedger,
) -> dict[str, TenantRecord]:
    """Account -> its record (module docstring): the accounts of the site and of the trace,
    and POOL_OWNER when some GPUs are in no quota or it was paid. `states`: job id -> its end
    state (`end_s`)."""
    names = sorted(set(accounts) | {job.account for job in trace} | set(ledger.paid))
    quota = {n: dict(accounts[n].quota) if n in accounts else {} for n in names}
    pool = {t: c - sum(q.get(t, 0) for q in quota.values()) for t, c in sorted(capacity.items())}
    if any(v > 0 for v in pool.values()) or POOL_OWNER in ledger.received:
        names.append(POOL_OWNER)
        quota[POOL_OWNER] = {t: max(v, 0) for t, v in pool.items() if v > 0}
    jobs = dict.fromkeys(names, 0)
    completed = dict.fromkeys(names, 0)
    utility = dict.fromkeys(names, 0.0)
    for job in trace:
        jobs[job.account] += 1
        end = states[job.job_id].end_s
        if end is not None:
            completed[job.account] += 1
            utility[job.account] += job.the_utility().value(end, job.arrival_s)
    owners = [n for n in names if n != POOL_OWNER]
    borrowed, lent = gpu_hours(trace, capacity, {n: quota[n] for n in owners}, intervals)
    return {
        n: TenantRecord(
            account=n,
            quota=quota[n],
            jobs=jobs[n],
            completed=completed[n],
            utility=utility[n],
            paid=ledger.paid.get(n, 0.0),
            received=ledger.received.get(n, 0.0),
            borrowed_gpu_h=borrowed.get(n, 0.0),
            lent_gpu_h=lent.get(n, 0.0),
        )
        for n in names
    }


def gpu_hours(
    trace: Sequence[TraceJob],
    capacity: Mapping[str, int],
    quota: Mapping[str, Mapping[str, int]],
    intervals: Sequence[Interval],
) -> tuple[dict[str, float], dict[str, float]]:
    """(borrowed, lent): account -> GPU-hours it held beyond its quota, and GPU-hours of its
    idle quota others held (POOL_OWNER: of the GPUs in no quota); module docstring."""
    names = sorted(quota)
    row = {n: i for i, n in enumerate(names)}
    types_ = sorted(capacity)
    col = {t: k for k, t in enumerate(types_)}
    account_of = {job.job_id: row[job.account] for job in trace}
    q = np.array([[quota[n].get(t, 0) for t in types_] for n in names], dtype=float)
    q = q.reshape(len(names), len(types_))
    pool = np.maximum(np.array([capacity[t] for t in types_], dtype=float) - q.sum(axis=0), 0)
    events: dict[float, list[tuple[int, int, int]]] = {}
    for iv in intervals:
        if iv.end_s <= iv.start_s:
            continue
        u, t = account_of[iv.job_id], col[iv.gpu_type]
        events.setdefault(iv.start_s, []).append((u, t, iv.count))
        events.setdefault(iv.end_s, []).append((u, t, -iv.count))
    used = np.zeros_like(q)
    borrowed = np.zeros(len(names))
    lent = np.zeros(len(names) + 1)  # the last: the pool
    times = sorted(events)
    for now, after in itertools.pairwise(times):
        for u, t, delta in events[now]:
            used[u, t] += delta
        hours = (after - now) / 3600.0
        over = np.maximum(used - q, 0.0)
        borrowed += over.sum(axis=1) * hours
        idle = np.vstack([np.maximum(q - used, 0.0), pool[None, :]])
        total_idle = idle.sum(axis=0)
        share = np.divide(idle, total_idle, out=np.zeros_like(idle), where=total_idle > 0)
        lent += (share * over.sum(axis=0)).sum(axis=1) * hours
    out_lent = {n: float(lent[i]) for i, n in enumerate(names)}
    if pool.any():
        out_lent[POOL_OWNER] = float(lent[-1])
    return {n: float(borrowed[i]) for i, n in enumerate(names)}, out_lent


def _r(value: float, digits: int = 3) -> float:
    return round(float(value), digits) + 0.0 if math.isfinite(value) else value
