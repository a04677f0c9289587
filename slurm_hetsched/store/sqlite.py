"""The live controller's store: every round and every action in one SQLite file (WAL mode).

A round is written when planned, before any action is taken, and again when enacted. Each
action on a job is written as `pending` before it is taken and marked `done` or `failed`
after, so a controller restarted after a crash finds exactly what was under way
(`pending_actions`) and can finish or undo it. The file is also the round history that
`hetsched rounds` prints.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hetsched.core.ports import RoundRecord
from slurm_hetsched.errors import HetschedError
from slurm_hetsched.store.codec import record_from_json, record_to_json

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rounds (
    round       INTEGER PRIMARY KEY,
    written_at  REAL NOT NULL,     -- Unix seconds of the last write
    now_s       REAL NOT NULL,     -- the round's time on the controller's clock
    policy      TEXT NOT NULL,
    recomputed  INTEGER NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('planned', 'enacted')),
    record      TEXT NOT NULL      -- store/codec.py JSON of the RoundRecord
);
CREATE TABLE IF NOT EXISTS actions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    round        INTEGER NOT NULL,
    job_key      TEXT NOT NULL,
    slurm_job_id TEXT NOT NULL,
    kind         TEXT NOT NULL,    -- signal, requeue_hold, update, placement, release, ...
    detail       TEXT NOT NULL,    -- JSON: what exactly is done
    status       TEXT NOT NULL CHECK (status IN ('pending', 'done', 'failed')),
    outcome      TEXT NOT NULL DEFAULT '',
    created_at   REAL NOT NULL,
    finished_at  REAL
);
CREATE INDEX IF NOT EXISTS actions_by_status ON actions (status);
CREATE INDEX IF NOT EXISTS actions_by_job ON actions (job_key);
-- Which user each job key belongs to (controller/keys.py).
CREATE TABLE IF NOT EXISTS job_keys (
    key       TEXT PRIMARY KEY,
    uid       INTEGER NOT NULL,
    user      TEXT NOT NULL,
    job_id    TEXT NOT NULL,   -- the job that first used the key
    submit_s  REAL NOT NULL,   -- that job's submit time
    bound_s   REAL NOT NULL,
    ended_s   REAL             -- when its last job left Slurm; NULL while one lives
);
-- Jobs a round set aside because the policy failed with them (refused until their comment
-- changes or they leave).
CREATE TABLE IF NOT EXISTS set_aside (
    job       TEXT PRIMARY KEY,  -- the job's identity (key, or key#copy)
    comment   TEXT NOT NULL,
    reason    TEXT NOT NULL,
    round     INTEGER NOT NULL
);
"""
_KEY_COLUMNS = ("key", "uid", "user", "job_id", "submit_s", "bound_s", "ended_s")
_ASIDE_COLUMNS = ("job", "comment", "reason", "round")


class StoreError(HetschedError, RuntimeError):
    """The store file cannot be opened, or was written by an incompatible version."""


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
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # a recorded action survives a crash
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the store {self.path}: {exc}") from exc
        self._check_version()

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

    def _save(self, record: RoundRecord, status: str) -> None:
        with self._transaction():
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

    def _check_version(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is None:
            self._db.execute(
                "INSERT INTO meta (key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
            )
        elif row[0] != str(SCHEMA_VERSION):
            raise StoreError(
                f"{self.path} has store schema {row[0]}; this version reads schema "
                f"{SCHEMA_VERSION}. Move the file aside to start a fresh history."
            )
