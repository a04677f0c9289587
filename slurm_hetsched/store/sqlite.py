"""The live controller's store: every round and every action in one SQLite file (WAL mode).

A round is written when planned, before any action is taken, and again when enacted. Each
action on a job is written as `pending` before it is taken and marked `done` or `failed`
after, so a controller restarted after a crash finds exactly what was under way
(`pending_actions`) and can finish or undo it. The file is also the round history that
`hetsched rounds` prints. Each round the service also records a heartbeat, which
`hetsched watchdog` reads. The schema and its migrations are in store/schema.py.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hetsched.core.ports import RoundRecord
from slurm_hetsched.store.codec import record_from_json, record_to_json
from slurm_hetsched.store.ledger import LEDGER_COLUMNS, LedgerRow, ledger_rows
from slurm_hetsched.store.schema import SCHEMA_VERSION, StoreError, migrate

__all__ = ["SCHEMA_VERSION", "Action", "Heartbeat", "SqliteStore", "StoreError"]
logger = logging.getLogger(__name__)

_KEY_COLUMNS = ("key", "uid", "user", "job_id", "submit_s", "bound_s", "ended_s")
_ASIDE_COLUMNS = ("job", "comment", "reason", "round")
_MOVE_COLUMNS = ("job", "round", "job_id", "restart_count", "signal_s", "release_s", "ack_step")


@dataclass(frozen=True, slots=True)
class Action:
    """One recorded action on a job."""

    id: int
    round: int
    job_key: str
    slurm_job_id: str
    kind: str
    detail: dict[str, Any]
    status: str
    outcome: str
    created_at: float
    finished_at: float | None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The controller's last sign of life: when (Unix seconds), which process, which round."""

    at_s: float
    pid: int
    host: str
    round: int | None


class SqliteStore:
    """A `StateStore` over one SQLite file, plus the action journal.

    Args:
        path: the database file; its folder is created if missing.
        clock: wall-clock seconds for `written_at` / `created_at` (injectable for tests).
    """

    def __init__(self, path: str | Path, clock: Any = time.time) -> None:
        self.path = Path(path)
        self._clock = clock
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the store {self.path}: {exc}") from exc
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # a recorded action survives a crash
            migrated_from = migrate(self._db, self.path)
        except BaseException as exc:
            self._db.close()
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot open the store {self.path}: {exc}") from exc
            raise
        if 0 < migrated_from < SCHEMA_VERSION:
            logger.info(
                "store %s migrated from schema %d to %d", self.path, migrated_from, SCHEMA_VERSION
            )

    def close(self) -> None:
        self._db.close()

    # -- StateStore ----------------------------------------------------------------------------

    def load(self) -> RoundRecord | None:
        row = self._db.execute("SELECT record FROM rounds ORDER BY round DESC LIMIT 1").fetchone()
        return None if row is None else record_from_json(json.loads(row[0]))

    def save_planned(self, record: RoundRecord) -> None:
        self._save(record, "planned")

    def save_enacted(self, record: RoundRecord) -> None:
        self._save(record, "enacted")

    # -- the action journal --------------------------------------------------------------------

    def begin_action(
        self, round_: int, job_key: str, slurm_job_id: str, kind: str, detail: dict[str, Any]
    ) -> int:
        """Record an action as pending, before it is taken; returns its id."""
        with self._transaction():
            cursor = self._db.execute(
                "INSERT INTO actions (round, job_key, slurm_job_id, kind, detail, status, "
                "created_at) VALUES (?, ?, ?, ?, ?, 'pending', ?)",
                (round_, job_key, slurm_job_id, kind, json.dumps(detail), self._clock()),
            )
        return int(cursor.lastrowid or 0)

    def finish_action(self, action_id: int, ok: bool, outcome: str = "") -> None:
        """Mark an action done or failed, with what happened."""
        with self._transaction():
            self._db.execute(
                "UPDATE actions SET status = ?, outcome = ?, finished_at = ? WHERE id = ?",
                ("done" if ok else "failed", outcome, self._clock(), action_id),
            )

    def pending_actions(self) -> list[Action]:
        """Actions begun and never finished (a crash between the two), oldest first."""
        return self._actions("WHERE status = 'pending' ORDER BY id")

    def actions(self, *, round_: int | None = None, job_key: str | None = None) -> list[Action]:
        """Recorded actions, oldest first, optionally of one round or one job."""
        where: list[str] = []
        args: list[Any] = []
        if round_ is not None:
            where.append("round = ?")
            args.append(round_)
        if job_key is not None:
            where.append("job_key = ?")
            args.append(job_key)
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        return self._actions(f"{clause} ORDER BY id", tuple(args))

    # -- job keys and jobs set aside ---------------------------------------------------------

    def key_bindings(self) -> list[dict[str, Any]]:
        """Every job key binding, as rows with the columns of the `job_keys` table."""
        rows = self._db.execute(f"SELECT {', '.join(_KEY_COLUMNS)} FROM job_keys").fetchall()
        return [dict(zip(_KEY_COLUMNS, row, strict=True)) for row in rows]

    def save_key_bindings(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Replace every job key binding (one transaction)."""
        self._replace_table("job_keys", _KEY_COLUMNS, rows)

    def set_aside(self) -> list[dict[str, Any]]:
        """The jobs set aside, as rows with the columns of the `set_aside` table."""
        rows = self._db.execute(f"SELECT {', '.join(_ASIDE_COLUMNS)} FROM set_aside").fetchall()
        return [dict(zip(_ASIDE_COLUMNS, row, strict=True)) for row in rows]

    def save_set_aside(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Replace the jobs set aside (one transaction)."""
        self._replace_table("set_aside", _ASIDE_COLUMNS, rows)

    # -- restart costs -------------------------------------------------------------------------

    def restart_samples(self) -> dict[str, tuple[list[float], int]]:
        """Job identity -> (its last measured restarts in seconds, oldest first; how many were
        measured in all)."""
        rows = self._db.execute("SELECT job, samples, measured FROM restart_samples").fetchall()
        return {job: ([float(v) for v in json.loads(samples)], int(n)) for job, samples, n in rows}

    def save_restart_samples(self, samples: Mapping[str, tuple[list[float], int]]) -> None:
        """Replace every job's measured restarts (one transaction)."""
        rows = (
            {"job": job, "samples": json.dumps(list(recent)), "measured": measured}
            for job, (recent, measured) in samples.items()
        )
        self._replace_table("restart_samples", ("job", "samples", "measured"), rows)

    def restart_moves(self) -> list[dict[str, Any]]:
        """The moves whose restart is not measured yet, as rows of the `restart_moves` table."""
        rows = self._db.execute(f"SELECT {', '.join(_MOVE_COLUMNS)} FROM restart_moves").fetchall()
        return [dict(zip(_MOVE_COLUMNS, row, strict=True)) for row in rows]

    def save_restart_moves(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Replace the moves whose restart is not measured yet (one transaction)."""
        self._replace_table("restart_moves", _MOVE_COLUMNS, rows)

    # -- forked jobs ---------------------------------------------------------------------------

    def forks(self) -> dict[str, dict[str, Any]]:
        """Job key -> the job tracker's state of that forked job (core/fork_plan.py)."""
        rows = self._db.execute("SELECT key, state FROM forks").fetchall()
        return {key: json.loads(state) for key, state in rows}

    def save_fork(self, key: str, state: Mapping[str, Any]) -> None:
        with self._transaction():
            self._db.execute(
                "INSERT OR REPLACE INTO forks (key, state) VALUES (?, ?)",
                (key, json.dumps(dict(state), sort_keys=True)),
            )

    def delete_fork(self, key: str) -> None:
        with self._transaction():
            self._db.execute("DELETE FROM forks WHERE key = ?", (key,))

    def _replace_table(
        self, table: str, columns: tuple[str, ...], rows: Iterable[Mapping[str, Any]]
    ) -> None:
        values = [tuple(row[c] for c in columns) for row in rows]
        marks = ", ".join("?" for _ in columns)
        with self._transaction():
            self._db.execute(f"DELETE FROM {table}")
            self._db.executemany(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", values
            )

    # -- heartbeat -----------------------------------------------------------------------------

    def beat(self, now_s: float, round_: int | None) -> None:
        """Record that the controller is alive after a round (`round_` None: skipped).

        Best effort: a failed write is logged, never raised, so a busy or full disk cannot
        stop the service; the watchdog also checks the controller's lock before acting.
        """
        try:
            with self._transaction():
                self._db.execute(
                    "INSERT INTO heartbeat (id, beat_s, pid, host, round) VALUES (1, ?, ?, ?, ?) "
                    "ON CONFLICT (id) DO UPDATE SET beat_s = excluded.beat_s, "
                    "pid = excluded.pid, host = excluded.host, round = excluded.round",
                    (now_s, os.getpid(), socket.gethostname(), round_),
                )
        except sqlite3.Error as exc:
            logger.warning("cannot record the heartbeat in %s: %s", self.path, exc)

    def last_beat(self) -> Heartbeat | None:
        """The last heartbeat, or None if no controller recorded one in this file."""
        row = self._db.execute("SELECT beat_s, pid, host, round FROM heartbeat").fetchone()
        return None if row is None else Heartbeat(float(row[0]), int(row[1]), row[2], row[3])

    def last_written_s(self) -> float | None:
        """When a round or an action was last written (Unix seconds), or None: the sign of
        life of a controller that never recorded a heartbeat (older versions)."""
        row = self._db.execute(
            "SELECT max(t) FROM (SELECT max(written_at) AS t FROM rounds "
            "UNION ALL SELECT max(coalesce(finished_at, created_at)) FROM actions)"
        ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def last_round_number(self) -> int | None:
        """The number of the last recorded round, or None."""
        row = self._db.execute("SELECT max(round) FROM rounds").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    # -- history -------------------------------------------------------------------------------

    def rounds(self, last: int | None = None) -> list[RoundRecord]:
        """The recorded rounds, oldest first (the last `last` of them if given)."""
        query = "SELECT record FROM rounds ORDER BY round DESC"
        args: tuple[Any, ...] = ()
        if last is not None:
            query += " LIMIT ?"
            args = (last,)
        rows = self._db.execute(query, args).fetchall()
        return [record_from_json(json.loads(r[0])) for r in reversed(rows)]

    # -- internals -----------------------------------------------------------------------------

    def ledger(self, since_round: int = 0) -> list[LedgerRow]:
        """Every payment recorded from round `since_round` on, oldest round first
        (store/ledger.py sums them)."""
        rows = self._db.execute(
            f"SELECT {', '.join(LEDGER_COLUMNS)} FROM ledger WHERE round >= ? "
            "ORDER BY round, job, owner",
            (since_round,),
        ).fetchall()
        return [LedgerRow(*row) for row in rows]

    def _save(self, record: RoundRecord, status: str) -> None:
        with self._transaction():
            if status == "enacted":  # what the round charged, with the round, atomically
                self._db.execute("DELETE FROM ledger WHERE round = ?", (record.round,))
                self._db.executemany(
                    f"INSERT INTO ledger ({', '.join(LEDGER_COLUMNS)}) "
                    f"VALUES ({', '.join('?' for _ in LEDGER_COLUMNS)})",
                    [tuple(row) for row in ledger_rows(record)],
                )
            self._db.execute(
                "INSERT INTO rounds (round, written_at, now_s, policy, recomputed, status, record)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (round) DO UPDATE SET "
                "written_at = excluded.written_at, status = excluded.status, "
                "record = excluded.record",
                (
                    record.round,
                    self._clock(),
                    record.now_s,
                    record.allocation.policy,
                    int(record.recomputed),
                    status,
                    json.dumps(record_to_json(record)),
                ),
            )

    def _actions(self, clause: str, args: tuple[Any, ...] = ()) -> list[Action]:
        rows = self._db.execute(
            "SELECT id, round, job_key, slurm_job_id, kind, detail, status, outcome, "
            f"created_at, finished_at FROM actions {clause}",
            args,
        ).fetchall()
        return [
            Action(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6], r[7], r[8], r[9])
            for r in rows
        ]

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
