"""The round store's schema, version by version, and the migration of an older file.

The version lives in the `meta` table (`schema` row), as every release has written it. Each
entry of `MIGRATIONS` takes a file from the version before it to its own, so opening a file
runs the entries after its version, all in one transaction: a failure leaves the file exactly
as it was. A file of a newer version is refused before anything is written, since an older
hetsched cannot know what the newer tables mean.

Version 1 was released twice: first without `job_keys` and `set_aside` (they were added later
with CREATE IF NOT EXISTS and no version bump), so migration 2 creates them if missing.
Version 3 adds the jobs' restart costs (`restart_samples`, `restart_moves`); version 4 the
job tracker's forked jobs (`forks`); version 5 the tenants' credit ledger (`ledger`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from slurm_hetsched.errors import HetschedError


class StoreError(HetschedError, RuntimeError):
    """The store file cannot be opened, or was written by an incompatible version."""


_V1 = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS rounds (
    round       INTEGER PRIMARY KEY,
    written_at  REAL NOT NULL,     -- Unix seconds of the last write
    now_s       REAL NOT NULL,     -- the round's time on the controller's clock
    policy      TEXT NOT NULL,
    recomputed  INTEGER NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('planned', 'enacted')),
    record      TEXT NOT NULL      -- store/codec.py JSON of the RoundRecord
)""",
    """CREATE TABLE IF NOT EXISTS actions (
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
)""",
    "CREATE INDEX IF NOT EXISTS actions_by_status ON actions (status)",
    "CREATE INDEX IF NOT EXISTS actions_by_job ON actions (job_key)",
)

_V2 = (
    # Which user each job key belongs to (controller/keys.py).
    """CREATE TABLE IF NOT EXISTS job_keys (
    key       TEXT PRIMARY KEY,
    uid       INTEGER NOT NULL,
    user      TEXT NOT NULL,
    job_id    TEXT NOT NULL,   -- the job that first used the key
    submit_s  REAL NOT NULL,   -- that job's submit time
    bound_s   REAL NOT NULL,
    ended_s   REAL             -- when its last job left Slurm; NULL while one lives
)""",
    # Jobs a round set aside because the policy failed with them (refused until their
    # comment changes or they leave).
    """CREATE TABLE IF NOT EXISTS set_aside (
    job       TEXT PRIMARY KEY,  -- the job's identity (key, or key#copy)
    comment   TEXT NOT NULL,
    reason    TEXT NOT NULL,
    round     INTEGER NOT NULL
)""",
    # The controller's last sign of life, one row (controller/watchdog.py reads it).
    """CREATE TABLE IF NOT EXISTS heartbeat (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    beat_s   REAL NOT NULL,    -- Unix seconds
    pid      INTEGER NOT NULL,
    host     TEXT NOT NULL,
    round    INTEGER           -- the round just run; NULL when it was skipped
)""",
)

_V3 = (
    # Each job's measured restarts (controller/restart_cost.py): the last few samples and how
    # many were measured in all.
    """CREATE TABLE IF NOT EXISTS restart_samples (
    job       TEXT PRIMARY KEY,  -- the job's identity (key, or key#copy)
    samples   TEXT NOT NULL,     -- JSON list of seconds, oldest first
    measured  INTEGER NOT NULL
)""",
    # The last move of each job whose restart is not measured yet
    # (controller/restart_watch.py): the run it released and the controller's times.
    """CREATE TABLE IF NOT EXISTS restart_moves (
    job            TEXT PRIMARY KEY,
    round          INTEGER NOT NULL,
    job_id         TEXT NOT NULL,   -- the Slurm job id of the run released
    restart_count  INTEGER NOT NULL,
    signal_s       REAL NOT NULL,   -- Unix seconds, the controller's clock
    release_s      REAL NOT NULL,
    ack_step       INTEGER          -- NULL: no ack
)""",
)

_V4 = (
    # The job tracker's state of each forked job (HadarE; core/fork_plan.py ForkState).
    """CREATE TABLE IF NOT EXISTS forks (
    key    TEXT PRIMARY KEY,  -- the job key
    state  TEXT NOT NULL      -- JSON of ForkState.to_json()
)""",
)

_V5 = (
    # What each borrowing job paid each enacted round, one row per owner paid (tenant
    # policies, astraea; store/ledger.py).
    """CREATE TABLE IF NOT EXISTS ledger (
    round     INTEGER NOT NULL,
    job       TEXT NOT NULL,   -- the job key
    payer     TEXT NOT NULL,   -- the job's account
    owner     TEXT NOT NULL,   -- the account paid, or '(cluster)' for GPUs in no quota
    amount    REAL NOT NULL,   -- the owner's part of the job's charge for the round
    gpu_s     REAL NOT NULL,   -- GPU-seconds the owner lent the job in the round
    at_s      REAL NOT NULL,   -- the round's time
    PRIMARY KEY (round, job, owner)
)""",
    "CREATE INDEX IF NOT EXISTS ledger_by_payer ON ledger (payer)",
)

# (version, statements that take a file of version - 1 to it), oldest first.
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (1, _V1),
    (2, _V2),
    (3, _V3),
    (4, _V4),
    (5, _V5),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


def schema_version(db: sqlite3.Connection) -> int:
    """The file's schema version; 0 for a new, empty file.

    Raises:
        StoreError: the version row is not a whole number.
    """
    has_meta = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if has_meta is None:
        return 0
    row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    if row is None:
        return 0
    try:
        return int(row[0])
    except (TypeError, ValueError):
        raise StoreError(
            f"store schema version {row[0]!r} is not a number; the file was not written by "
            "hetsched: move it aside to start a fresh history"
        ) from None


def migrate(db: sqlite3.Connection, path: Path) -> int:
    """Bring the file to SCHEMA_VERSION in one transaction; returns the version it had.

    Args:
        db: a connection in autocommit mode (isolation_level=None), no transaction open.
        path: the file, for messages.

    Raises:
        StoreError: the file is of a newer schema (nothing is changed), or a migration failed
            (rolled back: the file keeps its version).
    """
    # IMMEDIATE: a second process opening the file at the same time waits, then finds it
    # migrated, instead of migrating it twice.
    db.execute("BEGIN IMMEDIATE")
    found: int | None = None
    try:
        found = schema_version(db)
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"{path} has store schema {found}, written by a newer hetsched; this version "
                f"reads schema {SCHEMA_VERSION} at most. Upgrade hetsched to the version that "
                "wrote it (or move the file aside to start a fresh history)"
            )
        for version, statements in MIGRATIONS:
            if version > found:
                for statement in statements:
                    db.execute(statement)
        if found < SCHEMA_VERSION:
            db.execute(
                "INSERT INTO meta (key, value) VALUES ('schema', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )
    except BaseException as exc:
        db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise StoreError(
                f"cannot migrate the store {path} (schema {found}) to schema "
                f"{SCHEMA_VERSION}: {exc}; it was left unchanged"
            ) from exc
        raise
    db.execute("COMMIT")
    assert found is not None
    return found
