"""The world the enactor and reconcile tests run in: the recording Slurm fake behind the real
`CliSlurmBackend`, an injected clock whose `sleep` only moves time on, a journal in memory that
writes one timeline with the fake's calls, state folders in a temporary root, and "the wrapper"
that acks a checkpoint signal with the wrapper's own `write_ack`."""

from __future__ import annotations

import heapq
import itertools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from controller_builders import managed
from recorded_slurm import RecordedSlurm

from slurm_hetsched.controller.enact import EnactSettings, Journal, SlurmEnactor
from slurm_hetsched.controller.jobview import ManagedJob, SlurmView
from slurm_hetsched.core.model import ClusterSnapshot
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.statefolder import state_folder
from slurm_hetsched.wrapper.progress import Ack, write_ack

UID = os.getuid()
SQUEUE = ["squeue", "--json", "--states=all"]


class Clock:
    """Injected time: `sleep` moves it on and runs what falls due (no real sleeping)."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self._run_due()

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._due, (when, next(self._order), action))
        self._run_due()

    def _run_due(self) -> None:
        while self._due and self._due[0][0] <= self.now:
            heapq.heappop(self._due)[2]()


@dataclass(slots=True)
class Entry:
    job: str
    slurm_id: str
    kind: str
    round: int
    detail: dict[str, Any]
    status: str = "pending"
    outcome: str = ""
    finished_at: float | None = None


class MemoryJournal:
    """The action journal in memory; begin and finish go to the shared timeline `log`."""

    def __init__(self, clock: Clock, log: list[str]) -> None:
        self.clock = clock
        self.log = log
        self.actions: list[Entry] = []

    def begin_action(
        self, round_: int, job_key: str, slurm_job_id: str, kind: str, detail: dict[str, Any]
    ) -> int:
        self.actions.append(Entry(job_key, slurm_job_id, kind, round_, dict(detail)))
        self.log.append(f"begin {kind} {job_key}")
        return len(self.actions) - 1

    def finish_action(self, action_id: int, ok: bool, outcome: str = "") -> None:
        entry = self.actions[action_id]
        entry.status, entry.outcome = ("done" if ok else "failed"), outcome
        entry.finished_at = self.clock()
        self.log.append(f"{entry.status} {entry.kind} {entry.job}")

    def first(self, kind: str, job: str | None = None) -> Entry:
        return next(a for a in self.actions if a.kind == kind and job in (None, a.job))

    def kinds(self, job: str) -> list[tuple[str, str]]:
        return [(a.kind, a.status) for a in self.actions if a.job == job]

    def pending(self) -> list[tuple[str, str]]:
        """(kind, job) of the actions begun and never finished, in the order begun."""
        return [(a.kind, a.job) for a in self.actions if a.status == "pending"]


@dataclass
class Wrapper:
    """Plays the training wrapper on the checkpoint signal: acks `delays[job]` seconds later
    (default 0; None: never), for the run that was signalled."""

    slurm: RecordedSlurm
    clock: Clock
    root: Path
    delays: dict[str, float | None] = field(default_factory=dict)
    acked: dict[str, float] = field(default_factory=dict)

    def __call__(self, job_id: str) -> None:
        delay = self.delays.get(job_id, 0.0)
        if delay is not None:
            restart = self.slurm.record(job_id).restart_count
            self.clock.at(self.clock.now + delay, partial(self.ack, job_id, restart))

    def ack(self, job_id: str, restart_count: int) -> None:
        folder = state_folder(self.root, UID, job_id)
        ack = Ack(job_id, restart_count, 120, "ckpt-120", written_at=self.clock.now)
        write_ack(folder, ack)
        self.acked[job_id] = self.clock.now


@dataclass
class Rig:
    clock: Clock
    slurm: RecordedSlurm
    backend: CliSlurmBackend
    journal: MemoryJournal
    wrapper: Wrapper
    root: Path
    log: list[str]

    def enactor(self, journal: Journal | None = None, **settings: Any) -> SlurmEnactor:
        """An enactor on the injected clock: acks wait 10 s, requeues 5 s, looks every 0.5 s."""
        chosen = {"ack_timeout_s": 10.0, "requeue_timeout_s": 5.0, "poll_s": 0.5} | settings
        return SlurmEnactor(
            self.backend,
            journal or self.journal,
            EnactSettings(state_root=self.root, **chosen),
            clock=self.clock,
            sleep=self.clock.sleep,
        )

    def managed_now(self) -> dict[str, ManagedJob]:
        """The active jobs Slurm lists now (one squeue call), each managed under its id."""
        jobs = self.backend.list_jobs()
        leaders = [j for j in jobs if j.het_job_offset in (None, 0) and j.state.is_active]
        return {j.job_id: managed(j) for j in leaders}

    def view(self) -> SlurmView:
        """What a round observes now; the calls and the timeline start afresh after it."""
        jobs = self.managed_now()
        for key in jobs:
            self.folder(key).mkdir(parents=True, exist_ok=True)
        self.slurm.calls.clear()
        self.slurm.times.clear()
        self.log.clear()
        snapshot = ClusterSnapshot(now_s=self.clock.now, nodes=(), jobs=())
        return SlurmView(
            now_s=self.clock.now, managed=jobs, rejected=(), nodes=(), snapshot=snapshot
        )

    def folder(self, key: str) -> Path:
        return state_folder(self.root, UID, key)

    def read(self, key: str, name: str) -> dict[str, Any] | None:
        path = self.folder(key) / name
        return json.loads(path.read_text()) if path.exists() else None

    def timeline(self) -> list[str]:
        """The shared timeline without the squeue looks, an sbatch line cut to `$ sbatch ...`."""
        return [
            "$ sbatch ..." if line.startswith("$ sbatch ") else line
            for line in self.log
            if not line.startswith("$ squeue ")
        ]

    def commands(self) -> list[list[str]]:
        """The calls other than squeue, in order."""
        return [c for c in self.slurm.calls if c != SQUEUE]

    def time_of(self, *prefix: str) -> float:
        """When the first call starting with `prefix` was made."""
        calls = zip(self.slurm.calls, self.slurm.times, strict=True)
        return next(t for c, t in calls if c[: len(prefix)] == list(prefix))


def make_rig(tmp_path: Path) -> Rig:
    clock = Clock()
    log: list[str] = []
    slurm = RecordedSlurm(clock)
    slurm.log = log
    root = tmp_path / "state"
    root.mkdir(mode=0o711)
    wrapper = Wrapper(slurm, clock, root)
    slurm.hooks["signal"] = wrapper
    backend = CliSlurmBackend(cli=slurm)  # type: ignore[arg-type]  # duck-typed SlurmCli
    return Rig(clock, slurm, backend, MemoryJournal(clock, log), wrapper, root, log)
