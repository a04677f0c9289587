"""The store's schema version and migrations: a file written by an earlier release opens with
its rounds, journal and key bindings intact and is brought to the current schema in one
transaction; a file of a newer schema is refused unchanged; the heartbeat (schema 2) and the
jobs' restart costs (schema 3)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from slurm_hetsched.store import schema
from slurm_hetsched.store.sqlite import SCHEMA_VERSION, SqliteStore, StoreError

HERE = Path(__file__).resolve().parent


def _from_fixture(tmp_path: Path, name: str) -> Path:
    """A store file holding exactly what the committed SQL dump holds."""
    db = tmp_path / "rounds.sqlite"
    con = sqlite3.connect(db)
    con.executescript((HERE / name).read_text())
    con.close()
    return db


def _version(db: Path) -> str:
    con = sqlite3.connect(db)
    try:
        return str(con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0])
    finally:
        con.close()


def _tables(db: Path) -> set[str]:
    con = sqlite3.connect(db)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        con.close()


def test_the_current_schema_is_5_with_the_tenants_ledger() -> None:
    assert SCHEMA_VERSION == 5
    assert [version for version, _ in schema.MIGRATIONS] == [1, 2, 3, 4, 5], (
        "ordered, one per version"
    )


def test_a_store_of_schema_4_gets_an_empty_ledger(tmp_path: Path) -> None:
    db = tmp_path / "rounds.sqlite"
    con = sqlite3.connect(db)
    for statement in (*schema._V1, *schema._V2, *schema._V3, *schema._V4):
        con.execute(statement)
    con.execute("INSERT INTO meta (key, value) VALUES ('schema', '4')")
    con.commit()
    con.close()
    store = SqliteStore(db)
    try:
        assert store.ledger() == []
    finally:
        store.close()
    assert _version(db) == "5" and "ledger" in _tables(db)


def test_a_store_of_schema_3_gets_the_forks_table_and_keeps_its_forks_apart(
    tmp_path: Path,
) -> None:
    db = tmp_path / "rounds.sqlite"
    con = sqlite3.connect(db)
    for statement in (*schema._V1, *schema._V2, *schema._V3):
        con.execute(statement)
    con.execute("INSERT INTO meta (key, value) VALUES ('schema', '3')")
    con.commit()
    con.close()
    store = SqliteStore(db)
    try:
        assert store.forks() == {}
        store.save_fork("k1", {"key": "k1", "round": 2})
        store.save_fork("k2", {"key": "k2", "round": 1})
        store.save_fork("k1", {"key": "k1", "round": 3})
        store.delete_fork("k2")
        assert store.forks() == {"k1": {"key": "k1", "round": 3}}
    finally:
        store.close()
    assert _version(db) == str(SCHEMA_VERSION) and "forks" in _tables(db)


def test_a_store_of_schema_2_gets_the_restart_cost_tables_and_keeps_its_journal(
    tmp_path: Path,
) -> None:
    db = tmp_path / "rounds.sqlite"
    con = sqlite3.connect(db)
    for statement in (*schema._V1, *schema._V2):
        con.execute(statement)
    con.execute("INSERT INTO meta (key, value) VALUES ('schema', '2')")
    con.execute(
        "INSERT INTO actions (round, job_key, slurm_job_id, kind, detail, status, created_at) "
        "VALUES (4, 'k', '101', 'signal', '{\"restart_count\": 0}', 'done', 10.0)"
    )
    con.commit()
    con.close()
    assert not {"restart_samples", "restart_moves"} & _tables(db)
    store = SqliteStore(db)
    try:
        assert [(a.round, a.kind, a.detail) for a in store.actions()] == [
            (4, "signal", {"restart_count": 0})
        ]
        assert store.restart_samples() == {} and store.restart_moves() == []
    finally:
        store.close()
    assert _version(db) == str(SCHEMA_VERSION)


def test_a_store_of_the_last_release_migrates_with_its_rounds_journal_and_keys(
    tmp_path: Path,
) -> None:
    db = _from_fixture(tmp_path, "schema_v1.sql")
    assert _version(db) == "1" and "heartbeat" not in _tables(db)
    store = SqliteStore(db)
    try:
        last = store.load()
        assert last is not None and last.round == 2 and last.now_s == 360.0
        assert [r.round for r in store.rounds()] == [1, 2]
        assert sorted(last.plan.placements) == ["0", "1", "2"]
        journal = [(a.id, a.job_key, a.kind, a.status) for a in store.actions()]
        assert journal == [(1, "0", "release", "done"), (2, "0", "signal", "pending")]
        assert [a.id for a in store.pending_actions()] == [2], "a crash's work is still found"
        assert store.key_bindings() == [
            {
                "key": "0",
                "uid": 1000,
                "user": "alice",
                "job_id": "101",
                "submit_s": 5.0,
                "bound_s": 6.0,
                "ended_s": None,
            }
        ]
        assert store.set_aside() == [
            {"job": "k#1", "comment": "hetsched:class=x", "reason": "why", "round": 1}
        ]
        assert store.last_beat() is None, "that release recorded no heartbeat"
        assert store.last_written_s() == 1_700_000_006.0, "the pending action's write"
        assert store.last_round_number() == 2
        # New actions continue the old journal's numbering.
        assert store.begin_action(3, "0", "101", "release", {}) == 3
    finally:
        store.close()
    assert _version(db) == str(SCHEMA_VERSION)
    assert {"heartbeat", "job_keys", "set_aside", "restart_samples", "restart_moves"} <= _tables(db)


def test_a_store_of_the_first_release_gets_the_tables_added_later(tmp_path: Path) -> None:
    db = _from_fixture(tmp_path, "schema_v1_early.sql")
    assert _version(db) == "1"
    assert not {"job_keys", "set_aside", "heartbeat"} & _tables(db)
    store = SqliteStore(db)
    try:
        last = store.load()
        assert last is not None and last.round == 2
        assert last.plan.set_aside == {}, "rounds stored before the field read back"
        assert [a.kind for a in store.actions()] == ["release", "signal"]
        assert store.key_bindings() == [] and store.set_aside() == []
        store.save_key_bindings(
            [
                {
                    "key": "k",
                    "uid": 1,
                    "user": "u",
                    "job_id": "7",
                    "submit_s": 1.0,
                    "bound_s": 2.0,
                    "ended_s": None,
                }
            ]
        )
        assert [b["key"] for b in store.key_bindings()] == ["k"]
    finally:
        store.close()
    assert _version(db) == str(SCHEMA_VERSION)


def test_a_new_file_starts_at_the_current_schema(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "s.sqlite").close()
    assert _version(tmp_path / "s.sqlite") == str(SCHEMA_VERSION)
    # Opening it again changes nothing.
    SqliteStore(tmp_path / "s.sqlite").close()
    assert _version(tmp_path / "s.sqlite") == str(SCHEMA_VERSION)


def test_a_file_of_a_newer_schema_is_refused_unchanged_with_advice(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "s.sqlite").close()
    con = sqlite3.connect(tmp_path / "s.sqlite")
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    con.execute("DROP TABLE heartbeat")  # what the newer version did: nothing may re-create it
    con.commit()
    con.close()
    with pytest.raises(StoreError, match=r"schema 99.*newer hetsched.*Upgrade hetsched"):
        SqliteStore(tmp_path / "s.sqlite")
    assert _version(tmp_path / "s.sqlite") == "99"
    assert "heartbeat" not in _tables(tmp_path / "s.sqlite")


def test_a_version_that_is_not_a_number_is_refused(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "s.sqlite").close()
    con = sqlite3.connect(tmp_path / "s.sqlite")
    con.execute("UPDATE meta SET value = 'two' WHERE key = 'schema'")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match=r"'two' is not a number.*move it aside"):
        SqliteStore(tmp_path / "s.sqlite")


def test_a_failing_migration_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _from_fixture(tmp_path, "schema_v1_early.sql")
    last_version, last_statements = schema.MIGRATIONS[-1]
    broken = (
        *schema.MIGRATIONS[:-1],
        (last_version, (*last_statements, "CREATE TABLE rounds (x INTEGER)")),
    )
    monkeypatch.setattr(schema, "MIGRATIONS", broken)
    with pytest.raises(StoreError, match=r"cannot migrate the store .*schema 1.*left unchanged"):
        SqliteStore(db)
    assert _version(db) == "1"
    added = {"job_keys", "set_aside", "heartbeat", "restart_samples", "restart_moves"}
    assert not added & _tables(db), "rolled back as a whole"
    monkeypatch.undo()
    store = SqliteStore(db)
    try:
        assert store.load() is not None and store.last_round_number() == 2
    finally:
        store.close()


def test_the_heartbeat_keeps_the_last_beat_only(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    try:
        assert store.last_beat() is None and store.last_written_s() is None
        store.beat(100.0, 1)
        store.beat(460.5, None)
        beat = store.last_beat()
        assert beat is not None
        assert (beat.at_s, beat.round) == (460.5, None), "a skipped round beats too"
        assert beat.pid > 0 and beat.host
    finally:
        store.close()
    again = SqliteStore(tmp_path / "s.sqlite")
    try:
        assert again.last_beat() == beat
    finally:
        again.close()


def test_a_heartbeat_that_cannot_be_written_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "s.sqlite"
    store = SqliteStore(db)
    other = sqlite3.connect(db, timeout=0.0, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the file
    store._db.execute("PRAGMA busy_timeout = 0")
    try:
        store.beat(5.0, 3)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert "cannot record the heartbeat" in caplog.text
    assert store.last_beat() is None
    store.close()
