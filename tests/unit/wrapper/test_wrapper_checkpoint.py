"""CheckpointStore: atomic commit, keep-last-K, torn and corrupt checkpoints."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from slurm_hetsched.wrapper.checkpoint import (
    MARKER,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointReader,
    CheckpointStore,
    CheckpointWriter,
)


def writer_of(value: Any) -> Any:
    def write(writer: CheckpointWriter) -> None:
        writer.save_object("state.bin", {"value": value, "step": writer.step})

    return write


def load_value(reader: CheckpointReader) -> Any:
    return reader.load_object("state.bin")["value"]


def test_commit_layout(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3, wall=lambda: 123.0)
    path = store.save(10, writer_of("ten"), meta={"job_id": "42"})
    assert path == tmp_path / "ckpt-10"
    assert sorted(p.name for p in path.iterdir()) == [MARKER, "state.bin"]
    manifest = json.loads((path / MARKER).read_text())
    assert manifest["format"] == "hetsched-checkpoint/1" and manifest["step"] == 10
    assert manifest["written_at"] == 123.0 and manifest["meta"] == {"job_id": "42"}
    size = (path / "state.bin").stat().st_size
    assert manifest["files"]["state.bin"]["size"] == size
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-10"], "no temporary folder left"
    reader, value = store.load_latest(load_value) or (None, None)
    assert value == "ten" and reader is not None and reader.step == 10


def test_keeps_the_newest_k(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    for step in (10, 20, 30, 40):
        store.save(step, writer_of(step))
    assert [info.step for info in store.checkpoints()] == [40, 30]


def test_torn_checkpoint_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    store.save(10, writer_of("good"))
    store.save(20, writer_of("torn"))
    (tmp_path / "ckpt-20" / MARKER).unlink()  # as if killed before the marker
    assert store.latest() is not None and store.latest().step == 10  # type: ignore[union-attr]
    found = store.load_latest(load_value)
    assert found is not None and found[1] == "good"


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "marker"])
def test_corrupt_checkpoint_falls_back_to_the_previous(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    store.save(10, writer_of("good"))
    store.save(20, writer_of(list(range(1000))))
    state = tmp_path / "ckpt-20" / "state.bin"
    if damage == "flip":
        data = bytearray(state.read_bytes())
        data[len(data) // 2] ^= 0x01
        state.write_bytes(bytes(data))
    elif damage == "truncate":
        state.write_bytes(state.read_bytes()[:-5])
    elif damage == "delete":
        state.unlink()
    else:
        (tmp_path / "ckpt-20" / MARKER).write_text("{not json")
    with caplog.at_level(logging.WARNING):
        found = store.load_latest(load_value)
    assert found is not None and found[0].step == 10 and found[1] == "good"
    assert "skipping checkpoint ckpt-20" in caplog.text


def test_no_usable_checkpoint(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    assert store.load_latest(load_value) is None
    store.save(5, writer_of(1))
    (tmp_path / "ckpt-5" / "state.bin").write_bytes(b"garbage")
    assert store.load_latest(load_value) is None


def test_errors_of_the_load_function_are_not_hidden(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(5, writer_of(1))
    store.save(6, writer_of(2))

    def broken(reader: CheckpointReader) -> None:
        raise KeyError("model.weight")  # e.g. the model changed since the checkpoint

    with pytest.raises(KeyError):
        store.load_latest(broken)


def test_failed_write_leaves_older_checkpoints_and_no_temp(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(10, writer_of("good"))

    def failing(writer: CheckpointWriter) -> None:
        writer.save_object("state.bin", {"x": 1})
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        store.save(20, failing)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-10"]
    found = store.load_latest(load_value)
    assert found is not None and found[1] == "good"


def test_a_committed_checkpoint_is_never_overwritten(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(10, writer_of("first"))
    before = (tmp_path / "ckpt-10" / MARKER).read_bytes()
    store.save(10, writer_of("second"))
    assert (tmp_path / "ckpt-10" / MARKER).read_bytes() == before
    assert store.load_latest(load_value)[1] == "first"  # type: ignore[index]


def test_a_torn_folder_of_the_same_step_is_replaced(tmp_path: Path) -> None:
    torn = tmp_path / "ckpt-10"
    torn.mkdir()
    (torn / "state.bin").write_bytes(b"half")
    store = CheckpointStore(tmp_path)
    store.save(10, writer_of("whole"))
    assert store.load_latest(load_value)[1] == "whole"  # type: ignore[index]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-10"]


def test_prune_removes_leftovers_of_killed_writers(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(10, writer_of(1))
    (tmp_path / ".tmp-ckpt-20-999-1").mkdir()
    (tmp_path / ".tmp-ckpt-20-999-1" / "state.bin").write_bytes(b"partial")
    (tmp_path / "ckpt-5").mkdir()  # torn and older than the newest committed one
    store.prune()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-10"]


def test_free_form_files_are_checksummed(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)

    def write(writer: CheckpointWriter) -> None:
        writer.path("notes.txt").write_text("hello")

    store.save(3, write)
    reader = store.open(store.latest())  # type: ignore[arg-type]
    assert reader.path("notes.txt").read_text() == "hello"
    (tmp_path / "ckpt-3" / "notes.txt").write_text("HELLO")
    reader = store.open(store.latest())  # type: ignore[arg-type]
    with pytest.raises(CheckpointCorruptError, match="checksum"):
        reader.path("notes.txt")


def test_announced_but_missing_file_fails_the_write(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    with pytest.raises(Exception, match="did not write"):
        store.save(1, lambda writer: writer.path("never.bin") and None)
    assert list(tmp_path.iterdir()) == []


def test_checkpoint_files_are_private(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    path = store.save(1, writer_of(1))
    assert (path.stat().st_mode & 0o777) == 0o700
    assert os.stat(path / MARKER).st_mode & 0o077 == 0


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a folder to another uid (os.chown)")


def planted_elsewhere(tmp_path: Path, step: int) -> Path:
    """A valid committed checkpoint in another folder (as another user's would be)."""
    other = CheckpointStore(tmp_path / "other")
    (tmp_path / "other").mkdir()
    return other.save(step, writer_of("planted"))


def test_a_symlinked_or_non_folder_checkpoint_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "state"
    folder.mkdir()
    store = CheckpointStore(folder)
    store.save(10, writer_of("mine"))
    target = planted_elsewhere(tmp_path, 30)
    (folder / "ckpt-30").symlink_to(target)
    (folder / "ckpt-40").write_text("not a folder")
    with caplog.at_level(logging.WARNING):
        assert [info.step for info in store.checkpoints()] == [10]
        found = store.load_latest(load_value)
    assert found is not None and found[1] == "mine"
    assert "ckpt-30: it is a symbolic link (owner uid" in caplog.text
    assert "ckpt-40: it is not a folder (owner uid" in caplog.text
    store.save(20, writer_of("next"))  # prune leaves what is not ours alone
    assert (folder / "ckpt-30").is_symlink() and (target / MARKER).is_file()


def test_saving_over_a_planted_symlink_replaces_the_link_not_its_target(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    folder.mkdir()
    target = planted_elsewhere(tmp_path, 30)
    (folder / "ckpt-30").symlink_to(target)
    store = CheckpointStore(folder)
    store.save(30, writer_of("mine"))
    assert not (folder / "ckpt-30").is_symlink()
    assert store.load_latest(load_value)[1] == "mine"  # type: ignore[index]
    assert (target / MARKER).is_file() and (target / "state.bin").is_file()


def test_a_marker_that_is_a_symlink_does_not_commit(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(10, writer_of("good"))
    store.save(20, writer_of("other"))
    marker = tmp_path / "ckpt-20" / MARKER
    marker.rename(tmp_path / "manifest.json")
    marker.symlink_to(tmp_path / "manifest.json")
    assert [info.committed for info in store.checkpoints()] == [False, True]
    assert store.load_latest(load_value)[1] == "good"  # type: ignore[index]


def test_a_checkpoint_folder_of_another_uid_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    needs_root()
    store = CheckpointStore(tmp_path)
    store.save(10, writer_of("mine"))
    store.save(20, writer_of("planted"))
    os.chown(tmp_path / "ckpt-20", 12345, 12345)
    with caplog.at_level(logging.WARNING):
        found = store.load_latest(load_value)
    assert found is not None and found[1] == "mine"
    assert "ckpt-20: it belongs to uid 12345, not to this job's uid 0" in caplog.text


@pytest.mark.parametrize("name", [MARKER, "state.bin"])
def test_a_file_of_another_uid_in_a_checkpoint_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    needs_root()
    store = CheckpointStore(tmp_path)
    store.save(10, writer_of("mine"))
    store.save(20, writer_of("planted"))
    os.chown(tmp_path / "ckpt-20" / name, 12345, 12345)
    with caplog.at_level(logging.WARNING):
        found = store.load_latest(load_value)
    assert found is not None and found[1] == "mine"
    assert f"ckpt-20/{name} belongs to uid 12345" in caplog.text


def test_a_symlink_written_into_a_checkpoint_fails_the_save(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.txt").write_text("x")
    store = CheckpointStore(tmp_path / "state")
    (tmp_path / "state").mkdir()

    def write(writer: CheckpointWriter) -> None:
        writer.path("notes.txt").symlink_to(tmp_path / "elsewhere.txt")

    with pytest.raises(CheckpointError, match="symlink"):
        store.save(1, write)
    assert list((tmp_path / "state").iterdir()) == []
