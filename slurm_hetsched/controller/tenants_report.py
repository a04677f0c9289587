"""`hetsched tenants`: per account, its GPU quota per type, the GPUs its jobs hold now, the
GPU-hours it borrowed and lent, what it paid and received (credits = received - paid), and its
revenue fairness ratio alpha (Astraea section 8.2: its share of all revenue over its share of
the quotas, the mean over GPU types of its share of each, as the benchmark counts it; 1 =
fair, above 1 = it gained from sharing).

Revenue, live: the utility of each of the account's jobs that finished (at the first round
that no longer saw it, by its spec's utility) plus what it received minus what it paid. A job
that left Slurm unfinished (cancelled) counts its utility at that time too: the store cannot
tell the two apart, and either way the job is over. Read from the store only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from slurm_hetsched.core.model import POOL_OWNER, Job
from slurm_hetsched.core.policies.astraea_pricing import fairness_ratio, quota_shares
from slurm_hetsched.core.ports import RoundRecord
from slurm_hetsched.store.ledger import AccountTotals, LedgerRow, totals


def finished_utility(records: Sequence[RoundRecord]) -> dict[str, float]:
    """Account -> the utility of its jobs that were seen and then gone (module docstring)."""
    last_seen: dict[str, Job] = {}
    gone_at: dict[str, float] = {}
    for record in records:
        if record.snapshot is None:
            continue
        present = {job.key: job for job in record.snapshot.jobs}
        for key in list(last_seen):
            if key not in present and key not in gone_at:
                gone_at[key] = record.now_s
        for key, job in present.items():
            last_seen[key] = job
            gone_at.pop(key, None)
    out: dict[str, float] = {}
    for key, when in gone_at.items():
        job = last_seen[key]
        value = job.the_utility().value(when, job.arrival_s)
        out[job.account] = out.get(job.account, 0.0) + value
    return out


def held_now(record: RoundRecord | None) -> dict[str, dict[str, int]]:
    """Account -> GPU type -> GPUs its jobs hold after the last round."""
    if record is None or record.snapshot is None:
        return {}
    account_of = {job.key: job.account for job in record.snapshot.jobs}
    out: dict[str, dict[str, int]] = {}
    for key, placement in record.state.placements.items():
        row = out.setdefault(account_of.get(key, ""), {})
        for gpu_type, count in placement.gpus_by_type().items():
            row[gpu_type] = row.get(gpu_type, 0) + count
    return out


def format_tenants(
    quotas: Mapping[str, Mapping[str, int]],
    rows: Sequence[LedgerRow],
    records: Sequence[RoundRecord],
) -> str:
    """The table `hetsched tenants` prints (module docstring)."""
    sums = totals(rows)
    utility = finished_utility(records)
    held = held_now(records[-1] if records else None)
    accounts = sorted((set(quotas) | set(sums) | set(utility) | set(held)) - {POOL_OWNER})
    revenue = {a: utility.get(a, 0.0) + sums.get(a, AccountTotals()).credits for a in accounts}
    total_revenue = sum(revenue.values())
    shares = quota_shares({a: quotas.get(a, {}) for a in accounts})
    header = (
        f"{'account':<16} {'quota':<18} {'in use':<18} {'borrowed':>9} {'lent':>8} "
        f"{'paid':>9} {'received':>9} {'credits':>9} {'alpha':>6}"
    )
    lines = [header, "-" * len(header)]
    for account in accounts:
        t = sums.get(account, AccountTotals())
        alpha = fairness_ratio(revenue[account], total_revenue, shares[account])
        lines.append(
            f"{account or '(none)':<16} {_gpus(quotas.get(account, {})):<18} "
            f"{_gpus(held.get(account, {})):<18} {t.borrowed_gpu_h:>8.2f}h {t.lent_gpu_h:>7.2f}h "
            f"{t.paid:>9.2f} {t.received:>9.2f} {t.credits:>9.2f} "
            f"{'-' if math.isnan(alpha) else f'{alpha:.2f}':>6}"
        )
    pool = sums.get(POOL_OWNER)
    if pool is not None:
        lines.append(
            f"{'(cluster pool)':<16} {'GPUs in no quota':<18} {'':<18} {'':>9} "
            f"{pool.lent_gpu_h:>7.2f}h {'':>9} {pool.received:>9.2f} {'':>9} {'':>6}"
        )
    lines.append(
        "borrowed/lent: GPU-hours; credits = received - paid; alpha = share of revenue "
        "(finished jobs' utility + credits) / share of quotas"
    )
    return "\n".join(lines)


def _gpus(counts: Mapping[str, int]) -> str:
    parts = [f"{t}x{n}" for t, n in sorted(counts.items()) if n]
    return ",".join(parts) or "-"


__all__ = ["finished_utility", "format_tenants", "held_now"]
