"""Replay journaled live rounds through the simulator's tick: the same inputs must give the same
plan, which proves the controller and the simulator decide alike (docs/architecture.md).

A live round journals what its tick read from the cluster (the snapshot and the seconds each
job ran, `RoundRecord.snapshot` / `.ran_s`). Replaying round k starts from round k-1's record
in a memory store, hands the tick exactly round k's observation, and returns the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slurm_hetsched.core.model import RoundPlan
from slurm_hetsched.core.policies.base import Policy
from slurm_hetsched.core.ports import EnactReport, Observation, RoundRecord
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.errors import HetschedError
from slurm_hetsched.rounds.tick import Tick, TickSettings
from slurm_hetsched.store.memory import MemoryStore


class ReplayError(HetschedError, ValueError):
    """A record cannot be replayed (it journaled no snapshot)."""


@dataclass
class _Recorded:
    """A cluster that reports one journaled observation and changes nothing."""

    observation: Observation

    def observe(self) -> Observation:
        return self.observation

    def enact(self, plan: RoundPlan, observed: Observation) -> EnactReport:
        return EnactReport()


def replay_round(
    previous: RoundRecord | None,
    record: RoundRecord,
    policy: Policy,
    site: SiteData,
    settings: TickSettings,
) -> RoundPlan:
    """The plan the tick makes from `record`'s observation, starting after `previous`."""
    if record.snapshot is None:
        raise ReplayError(f"round {record.round} journaled no snapshot; it cannot be replayed")
    store = MemoryStore()
    if previous is not None:
        store.save_enacted(previous)
    finished: tuple[str, ...] = ()
    if previous is not None:
        known = {job.key for job in record.snapshot.jobs}
        finished = tuple(sorted(set(previous.allocation.job_ids) - known))
    observation = Observation(record.snapshot, dict(record.ran_s), finished, record.not_running)
    return Tick(policy, site, _Recorded(observation), store, settings).run_round().plan


def replay(
    records: Sequence[RoundRecord], policy: Policy, site: SiteData, settings: TickSettings
) -> list[tuple[RoundPlan, RoundPlan]]:
    """(recorded plan, replayed plan) for each of `records`: consecutive rounds from the
    first one the store holds."""
    pairs = []
    for previous, record in zip([None, *records[:-1]], records, strict=True):
        pairs.append((record.plan, replay_round(previous, record, policy, site, settings)))
    return pairs
