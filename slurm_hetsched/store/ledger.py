"""The tenants' credit ledger: what each borrowing job paid each enacted round and to whom
(a tenant policy's `Allocation.payments`, core/model/payment.py), and the totals per account
that `hetsched tenants` prints.

A round charges a job only for what it enacted: the job must be placed by the round (its
state's placements) and its actions must not have failed (a job that could not move paid for
nothing). One row per owner paid; a job that borrowed at a price of 0 still leaves rows, so
the GPU-hours lent are counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from slurm_hetsched.core.ports import RoundRecord

LEDGER_COLUMNS = ("round", "job", "payer", "owner", "amount", "gpu_s", "at_s")


class LedgerRow(NamedTuple):
    """One owner's part of one job's charge for one round (the `ledger` table)."""

    round: int
    job: str
    payer: str
    owner: str
    amount: float
    gpu_s: float
    at_s: float


def ledger_rows(record: RoundRecord) -> list[LedgerRow]:
    """The rows an enacted round adds (module docstring)."""
    payments = record.allocation.payments or {}
    failed = record.report.failed if record.report is not None else {}
    placed = record.state.placements
    rows = []
    for job, payment in sorted(payments.items()):
        if job not in placed or job in failed:
            continue
        for owner in sorted(set(payment.shares) | set(payment.lent)):
            rows.append(
                LedgerRow(
                    round=record.round,
                    job=job,
                    payer=payment.payer,
                    owner=owner,
                    amount=float(payment.shares.get(owner, 0.0)),
                    gpu_s=float(payment.lent.get(owner, 0.0)) * payment.period_s,
                    at_s=record.now_s,
                )
            )
    return rows


@dataclass
class AccountTotals:
    """One account's sums over the ledger.

    Attributes:
        paid: what its jobs paid (its own idle GPUs included: it pays itself).
        received: what it was paid for its idle GPUs.
        borrowed_gpu_h: GPU-hours its jobs borrowed.
        lent_gpu_h: GPU-hours others' jobs (and its own, in the pool) borrowed from it.
        lenders: owner -> GPU-hours it borrowed from them.
    """

    paid: float = 0.0
    received: float = 0.0
    borrowed_gpu_h: float = 0.0
    lent_gpu_h: float = 0.0
    lenders: dict[str, float] = field(default_factory=dict)

    @property
    def credits(self) -> float:
        """Received minus paid: what sharing earned the account."""
        return self.received - self.paid


def totals(rows: Iterable[LedgerRow]) -> dict[str, AccountTotals]:
    """Account (and '(cluster)') -> its sums over `rows`."""
    out: dict[str, AccountTotals] = {}
    for row in rows:
        payer = out.setdefault(row.payer, AccountTotals())
        owner = out.setdefault(row.owner, AccountTotals())
        payer.paid += row.amount
        payer.borrowed_gpu_h += row.gpu_s / 3600.0
        payer.lenders[row.owner] = payer.lenders.get(row.owner, 0.0) + row.gpu_s / 3600.0
        owner.received += row.amount
        owner.lent_gpu_h += row.gpu_s / 3600.0
    return out


def conserved(rows: Iterable[LedgerRow]) -> bool:
    """No free riding: all that was paid was received (to rounding)."""
    sums = totals(rows)
    paid = sum(t.paid for t in sums.values())
    received = sum(t.received for t in sums.values())
    return abs(paid - received) <= 1e-9 * max(1.0, abs(paid))


__all__ = ["LEDGER_COLUMNS", "AccountTotals", "LedgerRow", "conserved", "ledger_rows", "totals"]
