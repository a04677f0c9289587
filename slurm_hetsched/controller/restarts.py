"""Each job's restart cost across rounds: its moves watched, their restarts measured, the
estimates kept in the store and given to the snapshot (docs/admin.md, "Restart cost").

After each enactment the jobs the round moved are looked up in the journal and watched
(controller/restart_watch.py); every observation settles the moves whose new run reports, and
fills `Job.restart_s` of the snapshot with each job's estimate (controller/restart_cost.py).
Samples and watched moves live in the store, so a restarted controller goes on where it was;
a job's samples are forgotten when its key is free again (controller/keys.py), since the next
job with that key is another user's.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from slurm_hetsched.controller.jobview import SlurmView
from slurm_hetsched.controller.restart_cost import (
    RestartEstimate,
    RestartSettings,
    Samples,
    estimate,
    job_key_of,
)
from slurm_hetsched.controller.restart_watch import WatchedMove, move_from_journal, watch
from slurm_hetsched.controller.snapshot import with_restart_costs
from slurm_hetsched.store.sqlite import Action

logger = logging.getLogger(__name__)


class RestartStore(Protocol):
    """Where samples and watched moves are kept, and the journal they come from
    (store/sqlite.py)."""

    def restart_samples(self) -> dict[str, tuple[list[float], int]]: ...

    def save_restart_samples(self, samples: Mapping[str, tuple[list[float], int]]) -> None: ...

    def restart_moves(self) -> list[dict[str, Any]]: ...

    def save_restart_moves(self, rows: Iterable[Mapping[str, Any]]) -> None: ...

    def actions(self, *, round_: int | None = None, job_key: str | None = None) -> list[Action]: ...


class RestartTracker:
    """Measures the jobs' restarts and estimates what their next move costs.

    Args:
        store: where samples and watched moves are kept; None: nothing measured yet and
            nothing kept (a dry run without a store).
        settings: the config's restart-cost keys.
        save: keep what is measured; False for `hetsched status` and dry runs, which measure
            in memory only and change nothing.
    """

    def __init__(
        self, store: RestartStore | None, settings: RestartSettings, *, save: bool = True
    ) -> None:
        self.store = store
        self.settings = settings
        self.save = save and store is not None
        # Job identity -> its estimate at the last observation (for `hetsched status`).
        self.estimates: dict[str, RestartEstimate] = {}

    def observe(self, view: SlurmView) -> SlurmView:
        """Settle the watched moves this observation shows, and return the view whose
        snapshot carries every job's restart cost."""
        samples = self._samples()
        moves = self._moves()
        settled: list[str] = []
        for key, move in sorted(moves.items()):
            seen = watch(
                move,
                view.managed.get(key),
                view.progress.get(key),
                now_s=view.now_s,
                max_s=self.settings.max_s,
            )
            if not seen.settled:
                continue
            settled.append(key)
            if seen.seconds is None:
                self._log(
                    "job %s: no restart measured for its move in round %d: %s",
                    key,
                    move.round,
                    seen.why,
                )
                continue
            samples[key] = samples.get(key, Samples()).add(seen.seconds)
            self._log(
                "job %s: restart of its move in round %d measured: %.1f s from the signal to "
                "training again",
                key,
                move.round,
                seen.seconds,
            )
        # A key free again goes to its next claimant, maybe another user: their job starts
        # from the defaults, not from this one's restarts.
        bound = set(view.key_bindings) | {job.job_key for job in view.managed.values()}
        forgotten = [key for key in samples if job_key_of(key) not in bound]
        for key in forgotten:
            del samples[key]
        if self.save and self.store is not None:
            if settled:
                self.store.save_restart_moves(
                    _move_row(key, m) for key, m in moves.items() if key not in settled
                )
            if settled or forgotten:
                self.store.save_restart_samples(
                    {key: (list(s.recent), s.measured) for key, s in samples.items()}
                )
        self.estimates = {
            key: estimate(job.spec.job_class, samples.get(key), self.settings)
            for key, job in view.managed.items()
        }
        seconds = {k: e.seconds for k, e in self.estimates.items() if e.seconds is not None}
        return dataclasses.replace(view, snapshot=with_restart_costs(view.snapshot, seconds))

    def moved(self, round_: int, keys: Iterable[str]) -> None:
        """Watch the restarts of the jobs round `round_` moved, as its journal records them
        (a job's newer move replaces an older one not measured yet)."""
        if not self.save or self.store is None:
            return
        moves = self._moves()
        for key in keys:
            move = move_from_journal(round_, self.store.actions(round_=round_, job_key=key))
            if move is None:
                moves.pop(key, None)
            else:
                moves[key] = move
        self.store.save_restart_moves(_move_row(key, m) for key, m in moves.items())

    def _samples(self) -> dict[str, Samples]:
        if self.store is None:
            return {}
        return {
            key: Samples(tuple(recent), measured)
            for key, (recent, measured) in self.store.restart_samples().items()
        }

    def _moves(self) -> dict[str, WatchedMove]:
        if self.store is None:
            return {}
        return {
            row["job"]: WatchedMove(
                round=row["round"],
                job_id=row["job_id"],
                restart_count=row["restart_count"],
                signal_s=row["signal_s"],
                release_s=row["release_s"],
                ack_step=row["ack_step"],
            )
            for row in self.store.restart_moves()
        }

    def _log(self, message: str, *args: object) -> None:
        # `hetsched status` measures in memory too; only the service reports what it keeps.
        (logger.info if self.save else logger.debug)(message, *args)


def _move_row(key: str, move: WatchedMove) -> dict[str, Any]:
    return {"job": key} | {f.name: getattr(move, f.name) for f in dataclasses.fields(move)}
