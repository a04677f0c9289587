"""The job tracker of forked jobs (HadarE; docs/policies.md "Forked jobs"), live on Slurm.

Each round, around the enactment of the plan (controller/live.py):
1. `before_enact`: a job whose spec asks for copies (`fork=`, else the site's default) is
   forked: copies 1..n-1 are submitted held, as the job's user (controller/fork_copies.py).
   For every forked job, the round that ends is collected: each copy that had work acked it
   (its budget done) or is asked to stop now (checkpoint request and signal, as for a move) and
   waited for; the copies' steps are added up and their parameters averaged as the job's user
   (controller/fork_merge.py) into the next consolidated checkpoint. Then the next round's work
   is planned for the copies the policy placed (core/fork_plan.py), or, with every step done,
   the job is finished: copy 0 loads the final checkpoint and ends, the others are cancelled.
2. The enactor places, moves and holds the copies like any job; the placement.json it writes
   for a copy carries the copy's `fork` work (`section`).
3. `after_enact`: a copy kept on its GPUs is not requeued: it gets its new placement.json and
   a resume request, and loads the consolidated checkpoint in place.

The state of each forked job is in the store, written before the copies are told, so a
restarted controller goes on from it. A copy that failed, was killed or did not ack loses only
its own round: the others are averaged and its steps go back to the job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

from slurm_hetsched.controller.enact import SlurmEnactor
from slurm_hetsched.controller.enact_steps import EnactOutcome
from slurm_hetsched.controller.fork_collect import RoundCollector
from slurm_hetsched.controller.fork_copies import copy_options
from slurm_hetsched.controller.fork_merge import run_merge
from slurm_hetsched.controller.jobview import ManagedJob, SlurmView
from slurm_hetsched.controller.managed import job_identity
from slurm_hetsched.controller.statefiles import (
    JobFolder,
    write_placement,
    write_resume_request,
)
from slurm_hetsched.core.fork_plan import (
    ForkState,
    copies_wanted,
    finish,
    fork_section,
    plan_round,
)
from slurm_hetsched.core.model import Placement, RoundPlan
from slurm_hetsched.core.problem import table_rate
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.slurm.records import JobState

logger = logging.getLogger(__name__)

RESUBMIT_MAX = 3  # a copy lost more often than this is not submitted again


class ForkRegistry(Protocol):
    """Where the forked jobs' state is kept between rounds (store/sqlite.py)."""

    def forks(self) -> dict[str, dict[str, Any]]: ...

    def save_fork(self, key: str, state: Mapping[str, Any]) -> None: ...

    def delete_fork(self, key: str) -> None: ...


@dataclass(frozen=True, slots=True)
class ForkSettings:
    """round_s: the controller's round; merge_timeout_s: the most one averaging may take."""

    round_s: float
    fork_default: int = 1
    fork_max: int = 8
    merge_timeout_s: float = 300.0


class ForkTracker:
    """The job tracker: forks jobs, merges their copies every round and plans their work."""

    def __init__(
        self,
        enactor: SlurmEnactor,
        registry: ForkRegistry,
        table: ThroughputTable,
        settings: ForkSettings,
        *,
        merge: Callable[..., Any] = run_merge,
    ) -> None:
        self.enactor = enactor
        self.registry = registry
        self.table = table
        self.settings = settings
        self.collector = RoundCollector(enactor, merge, settings.merge_timeout_s)
        self._states: dict[str, ForkState] = {}

    # -- the enactor's placement.json ----------------------------------------------------------

    def section(self, job: ManagedJob) -> dict[str, Any] | None:
        """The `fork` object of this copy's placement.json this round, or None."""
        state = self._states.get(job.job_key)
        return None if state is None else fork_section(state, job.copy)

    # -- before the enactment ------------------------------------------------------------------

    def before_enact(self, view: SlurmView, plan: RoundPlan) -> set[str]:
        """Fork new jobs, collect and merge the round that ends, plan the next one. Returns
        the identities the enactor must leave alone (copies of finished jobs, copies placed
        without work)."""
        self._states = self._load()
        copies = _copies_by_key(view.managed.values())
        leave: set[str] = set()
        for job in view.managed.values():
            if job.copy == 0 and job.job_key not in self._states:
                self._fork(view, plan.round, job)
        placements = plan.placements
        # The rounds that end, of every forked job at once (one ack wait for them all).
        ending = [
            (state, copies[key])
            for key, state in self._states.items()
            if state.round > 0 and not state.done and copies.get(key)
        ]
        for key, collected in self.collector.collect_all(plan.round, ending).items():
            if collected is not self._states[key]:
                self._save(collected)
        for key, state in list(self._states.items()):
            mine = copies.get(key, {})
            try:
                leave |= self._round(plan.round, state, mine, placements)
            except Exception:
                # One job's trouble never stops the round for the others: its copies are
                # left alone this round and the next one tries again.
                logger.exception("round %d: forked job %s: tracking failed", plan.round, key)
                leave |= {job.key for job in mine.values()}
        return leave

    def _fork(self, view: SlurmView, round_: int, job: ManagedJob) -> None:
        spec = job.spec
        uid = job.leader.user_id
        asked = spec.fork if spec.fork is not None else self.settings.fork_default
        if asked < 2 or spec.steps is None or uid is None or len(job.components) > 1:
            return
        wanted = copies_wanted(
            spec.fork, self.settings.fork_default, self.settings.fork_max, self._fits(view, job)
        )
        if wanted < 2:
            logger.info("job %s: only one node can run it: not forked", job.key)
            return
        state = ForkState(job.job_key, uid, job.leader.group_id, wanted, spec.steps)
        self._save(state)  # its copies are submitted by its first round (_round)
        logger.info("round %d: job %s forked into %d copies", round_, job.key, wanted)

    def _round(
        self,
        round_: int,
        state: ForkState,
        copies: Mapping[int, ManagedJob],
        placements: Mapping[str, Placement],
    ) -> set[str]:
        identities = {job.key for job in copies.values()}
        if not copies:  # every copy left Slurm: the job ended (or was cancelled)
            self.registry.delete_fork(state.key)
            self._states.pop(state.key, None)
            return set()
        if state.done:
            self._wind_up(round_, state, copies)
            return identities
        if state.remaining == 0:
            finisher = 0 if 0 in copies else min(copies)
            state = finish(state, finisher, copies[finisher].slurm_id)
            self._save(state)
            logger.info(
                "round %d: forked job %s done: %d steps, final model %s; copy %d finishes",
                round_,
                state.key,
                state.merged_step,
                state.merged,
                finisher,
            )
            self._wind_up(round_, state, copies)
            return identities
        state = self._submit_missing(round_, state, copies)
        rates = {
            copy: self._rate(job, placements[job.key])
            for copy, job in copies.items()
            if job.key in placements
        }
        job_ids = {copy: job.slurm_id for copy, job in copies.items()}
        state = plan_round(state, rates, job_ids, self.settings.round_s)
        self._save(state)
        logger.info(
            "round %d: forked job %s, its round %d: %d of %d steps done, budgets %s",
            round_,
            state.key,
            state.round,
            state.merged_step,
            state.total_steps,
            {c: w.budget for c, w in state.work.items()},
        )
        # A copy placed but given no work (the last round runs the fastest copies only) is
        # not started; one that runs stays paused until the job ends.
        return {job.key for copy, job in copies.items() if copy not in state.work}

    # -- copies --------------------------------------------------------------------------------

    def _submit_missing(
        self, round_: int, state: ForkState, copies: Mapping[int, ManagedJob]
    ) -> ForkState:
        """Submit the copies the job should have and does not (new, or lost); returns the
        state with the lost copies' submissions counted."""
        original = copies.get(0)
        missing = [c for c in range(1, state.copies) if c not in copies]
        if original is None or not missing:
            return state
        enactor = self.enactor
        try:
            script = enactor.slurm.write_batch_script(original.slurm_id)
        except Exception as exc:
            logger.warning(
                "round %d: job %s: cannot read its batch script: %s", round_, state.key, exc
            )
            return state
        environment = enactor._resubmit_environment(original)
        for copy in missing:
            tries = state.resubmitted.get(copy, 0)
            if state.round > 0 and tries >= RESUBMIT_MAX:
                continue
            options = copy_options(original, copy, environment, enactor.clock())
            action = enactor._begin(round_, original, "submit", {"copy": copy})
            try:
                new_id = enactor.slurm.submit(
                    script, [options], uid=original.leader.user_id, gid=original.leader.group_id
                )
            except Exception as exc:
                enactor._finish(action, False, str(exc), "submit")
                logger.warning(
                    "round %d: copy %d of %s: submission failed: %s", round_, copy, state.key, exc
                )
                continue
            enactor._finish(action, True, f"copy {copy}: job {new_id}", "submit")
            logger.info("round %d: copy %d of job %s is job %s", round_, copy, state.key, new_id)
            if state.round > 0:
                counts = dict(state.resubmitted) | {copy: tries + 1}
                state = replace(state, resubmitted=counts)
                self._save(state)
        return state

    def _wind_up(self, round_: int, state: ForkState, copies: Mapping[int, ManagedJob]) -> None:
        """A finished job: the finishing copy loads the final checkpoint and ends; the other
        copies are cancelled."""
        enactor = self.enactor
        for copy, job in sorted(copies.items()):
            work = state.work.get(copy)
            if work is None:
                if job.leader.state in (JobState.PENDING, JobState.RUNNING):
                    enactor._step(
                        round_, job, "cancel", {"copy": copy, "done": True},
                        partial(enactor.slurm.cancel, job.slurm_id), EnactOutcome(),
                    )  # fmt: skip
                continue
            if job.slurm_id != work.job_id:
                continue
            folder = self._folder(job)
            payload = {"round": round_, "fork": fork_section(state, copy)}
            write_placement(folder, payload)
            if job.leader.state is JobState.RUNNING:
                write_resume_request(
                    folder, job_id=job.slurm_id, restart_count=job.leader.restart_count,
                    at=enactor.clock(),
                )  # fmt: skip
            elif job.leader.held:
                enactor._step(
                    round_, job, "release", {"copy": copy, "done": True},
                    partial(enactor.slurm.release, job.slurm_id), EnactOutcome(),
                )  # fmt: skip

    # -- after the enactment -------------------------------------------------------------------

    def after_enact(self, view: SlurmView, plan: RoundPlan, outcome: EnactOutcome) -> None:
        """Copies kept on their GPUs start the new round in place: a new placement.json and a
        resume request (the paused copy reads them and loads the consolidated checkpoint); a
        copy released earlier that Slurm did not start yet gets the new placement.json only."""
        kept = set(outcome.kept)
        for state in self._states.values():
            if state.done:
                continue
            for copy in state.work:
                job = view.managed.get(job_identity(state.key, copy))
                if job is None or job.key not in kept:
                    continue
                placement = plan.placements.get(job.key)
                if placement is None:
                    continue
                try:
                    # The enactor's placement.json, with this copy's `fork` work (`section`).
                    self.enactor._write_placement(plan.round, job, placement)
                    if job.leader.state is JobState.RUNNING:  # else not started yet
                        write_resume_request(
                            self._folder(job), job_id=job.slurm_id,
                            restart_count=job.leader.restart_count, at=self.enactor.clock(),
                        )  # fmt: skip
                except Exception:
                    logger.exception(
                        "round %d: copy %s: cannot give it its work", plan.round, job.key
                    )

    # -- helpers -------------------------------------------------------------------------------

    def _load(self) -> dict[str, ForkState]:
        states = {}
        for key, row in self.registry.forks().items():
            try:
                states[key] = ForkState.from_json(row)
            except (KeyError, TypeError, ValueError) as exc:
                logger.error(
                    "forked job %s: its stored state is unreadable (%s): dropped", key, exc
                )
                self.registry.delete_fork(key)
        return states

    def _save(self, state: ForkState) -> None:
        self.registry.save_fork(state.key, state.to_json())
        self._states[state.key] = state

    def _folder(self, job: ManagedJob) -> JobFolder:
        return self.enactor._folder(job)

    def _rate(self, job: ManagedJob, placement: Placement) -> float:
        gpu_type = placement.gpu_types[0]
        return table_rate(self.table, job.spec.job_class, gpu_type, placement.num_gpus)

    def _fits(self, view: SlurmView, job: ManagedJob) -> int:
        """Nodes with enough GPUs of one type the job can run on."""
        count = 0
        for node in view.snapshot.nodes:
            if not node.available:
                continue
            if any(
                n >= job.num_gpus
                and table_rate(self.table, job.spec.job_class, t, job.num_gpus) > 0
                for t, n in node.gpus.items()
            ):
                count += 1
        return count


def _copies_by_key(jobs: Iterable[ManagedJob]) -> dict[str, dict[int, ManagedJob]]:
    out: dict[str, dict[int, ManagedJob]] = {}
    for job in jobs:
        out.setdefault(job.job_key, {})[job.copy] = job
    return out
