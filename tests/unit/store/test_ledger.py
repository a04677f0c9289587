"""The tenants' credit ledger on a real SQLite file: astraea's payments, recorded with each
enacted round, read back and summed per account (`hetsched tenants`); no free riding."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hetsched.controller.tenants_report import format_tenants
from slurm_hetsched.core.model import POOL_OWNER, Account, Node
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.ports import RoundRecord
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy, shipped_throughputs
from slurm_hetsched.rounds.clocks import SimClock
from slurm_hetsched.rounds.tick import Tick, TickSettings
from slurm_hetsched.sim.cluster import SimulatedCluster
from slurm_hetsched.sim.generate import generate_trace
from slurm_hetsched.store.ledger import LedgerRow, conserved, totals
from slurm_hetsched.store.sqlite import SqliteStore

NODES = (Node("a", {"v100": 4}), Node("b", {"p100": 4}), Node("c", {"k80": 4}))
QUOTAS = {"acct-a": {"v100": 4}, "acct-b": {"k80": 4}}  # p100: the pool; acct-c: none


def _run_rounds(db: Path, rounds: int) -> None:
    table = shipped_throughputs()
    accounts = {name: Account(name, quota=q) for name, q in QUOTAS.items()}
    site = SiteData(table, shipped_gpu_types(), shipped_site_energy(), accounts)
    trace = generate_trace(
        10, seed=3, table=table, lam_s=0.0, mix="single", accounts=("acct-c", "acct-b")
    )
    clock = SimClock()
    cluster = SimulatedCluster(trace, NODES, table, clock)
    for round_ in range(rounds):
        store = SqliteStore(db)  # reopened each round: a restarted controller
        tick = Tick(get_policy("astraea"), site, cluster, store, TickSettings())
        tick.run_round()
        store.close()
        clock.sleep_until((round_ + 1) * 360.0)


def _stored(db: Path) -> tuple[list[LedgerRow], list[RoundRecord]]:
    """The ledger and the rounds in the store at `db`."""
    store = SqliteStore(db)
    try:
        return store.ledger(), store.rounds()
    finally:
        store.close()


def test_payments_are_recorded_per_round_and_owner_and_conserved(tmp_path: Path) -> None:
    db = tmp_path / "hetsched.sqlite"
    _run_rounds(db, 3)
    rows, records = _stored(db)
    assert rows, "acct-c has no quota: its jobs can only borrow, and pay"
    assert {r.round for r in rows} <= {1, 2, 3}
    assert {r.payer for r in rows} <= {"acct-b", "acct-c"}
    assert conserved(rows)
    # Every row is a job the round placed, at the round's own payments.
    for record in records:
        payments = record.allocation.payments or {}
        for row in (r for r in rows if r.round == record.round):
            assert row.job in record.state.placements
            assert row.amount == pytest.approx(payments[row.job].shares.get(row.owner, 0.0))
    sums = totals(rows)
    assert sums["acct-c"].paid > 0 and sums["acct-c"].borrowed_gpu_h > 0
    lenders = set(sums) - {"acct-c"}
    assert lenders & {"acct-a", "acct-b", POOL_OWNER}
    assert sum(t.received for t in sums.values()) == pytest.approx(
        sum(t.paid for t in sums.values())
    )
    text = format_tenants(QUOTAS, rows, records)
    line = next(x for x in text.splitlines() if x.startswith("acct-c"))
    assert f"{sums['acct-c'].paid:.2f}" in line and f"{-sums['acct-c'].paid:.2f}" in line
    assert "v100x4" in text and "k80x4" in text


def test_a_reopened_store_keeps_the_ledger_and_a_round_written_twice_counts_once(
    tmp_path: Path,
) -> None:
    db = tmp_path / "hetsched.sqlite"
    _run_rounds(db, 2)
    store = SqliteStore(db)
    try:
        before = store.ledger()
        last = store.load()
        assert last is not None
        store.save_enacted(last)  # the same round saved again (a retried write)
        assert store.ledger() == before
    finally:
        store.close()


def test_tenants_over_the_last_rounds_counts_only_their_payments(tmp_path: Path) -> None:
    """`hetsched tenants --last N`: what the accounts paid in the last N rounds, not before."""
    import io

    from slurm_hetsched.controller.commands import show_tenants
    from slurm_hetsched.controller.config import ControllerConfig

    db = tmp_path / "hetsched.sqlite"
    _run_rounds(db, 3)
    rows, _records = _stored(db)
    config = ControllerConfig(store=db, tenant_quotas=QUOTAS)
    paid = {
        last: sum(r.amount for r in rows if r.payer == "acct-c" and r.round > 3 - last)
        for last in (1, 3)
    }
    assert paid[3] > paid[1] > 0, "acct-c borrowed in every round, and in the first ones too"
    for last, expected in paid.items():
        out = io.StringIO()
        assert show_tenants(config, out=out, last=last) == 0
        line = next(x for x in out.getvalue().splitlines() if x.startswith("acct-c"))
        assert f"{expected:.2f}" in line.split()
    whole = io.StringIO()
    show_tenants(config, out=whole)
    assert (
        f"{paid[3]:.2f}"
        in next(x for x in whole.getvalue().splitlines() if x.startswith("acct-c")).split()
    )
