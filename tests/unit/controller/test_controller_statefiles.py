"""The controller's side of a job's state folder: what it believes of the files a job's user
wrote (progress.json, ack.json) and how it writes its own (placement.json,
checkpoint_request.json) into a folder that user controls. Real files in a temp folder."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from slurm_hetsched.controller.statefiles import (
    CheckedAck,
    job_folder,
    read_ack,
    read_progress,
    write_checkpoint_request,
    write_placement,
)

NOW = 1_800_000_000.0
ME = os.getuid()
OTHER = ME + 1
is_root = os.geteuid() == 0


def progress_payload(**changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "job_key": "k1",
        "job_id": "123",
        "step": 50,
        "total_steps": 200,
        "steps_per_s": 2.5,
        "gpu_type": "v100",
        "num_gpus": 1,
        "node": "n1",
        "updated_at": NOW - 10,
        "status": "running",
        "restart_count": 0,
    }
    payload.update(changes)
    return payload


def put(folder: Path, name: str, payload: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return path


def progress(folder: Path, owner_uid: int | None = ME, **kwargs: Any) -> dict[str, Any] | None:
    options: dict[str, Any] = {"job_ids": {"123", "k1"}, "now_s": NOW, "max_age_s": 600.0}
    options.update(kwargs)
    return read_progress(folder, owner_uid=owner_uid, **options)


# ----------------------------------------------------------------------------------------------
# progress.json


def test_a_good_report_is_read(tmp_path: Path) -> None:
    put(tmp_path, "progress.json", progress_payload())
    assert progress(tmp_path) == progress_payload()
    assert progress(tmp_path, owner_uid=None) == progress_payload()


def test_a_report_naming_the_key_of_a_resubmitted_job_is_read(tmp_path: Path) -> None:
    put(tmp_path, "progress.json", progress_payload(job_id="999"))
    assert progress(tmp_path, job_ids={"456", "k1"}) is not None


def test_no_file_gives_none(tmp_path: Path) -> None:
    assert progress(tmp_path) is None
    assert progress(tmp_path / "missing") is None


def test_a_file_of_another_owner_is_ignored(tmp_path: Path) -> None:
    put(tmp_path, "progress.json", progress_payload())
    assert progress(tmp_path, owner_uid=OTHER) is None


@pytest.mark.skipif(not is_root, reason="only root can give a file to another user")
def test_a_file_chowned_to_another_user_is_ignored(tmp_path: Path) -> None:
    path = put(tmp_path, "progress.json", progress_payload())
    os.chown(path, 4242, 4242)
    assert progress(tmp_path, owner_uid=ME) is None
    assert progress(tmp_path, owner_uid=4242) is not None


def test_a_symlink_is_not_followed(tmp_path: Path) -> None:
    real = put(tmp_path / "elsewhere", "real.json", progress_payload())
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "progress.json").symlink_to(real)
    assert progress(folder) is None


def test_a_fifo_is_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "progress.json")
    assert progress(tmp_path) is None  # and it did not block


def test_a_file_too_big_is_ignored(tmp_path: Path) -> None:
    put(tmp_path, "progress.json", progress_payload(padding="x" * 70_000))
    assert progress(tmp_path) is None


@pytest.mark.parametrize(
    "text",
    ["not json", "[1, 2]", '"text"', "", '{"step": 1'],
    ids=["text", "list", "str", "empty", "cut"],
)
def test_garbage_is_ignored(tmp_path: Path, text: str) -> None:
    put(tmp_path, "progress.json", text)
    assert progress(tmp_path) is None


@pytest.mark.parametrize(
    "changes",
    [
        {"job_id": "777", "job_key": "other"},
        {"step": -1},
        {"step": 1.5},
        {"step": True},
        {"step": "50"},
        {"step": None},
        {"total_steps": 10},
        {"total_steps": "200"},
        {"updated_at": None},
        {"updated_at": "yesterday"},
        {"updated_at": float("nan")},
        {"updated_at": NOW + 3600},
        {"steps_per_s": -1.0},
        {"steps_per_s": "fast"},
    ],
    ids=lambda c: ",".join(f"{k}={v!r}" for k, v in c.items()),
)
def test_implausible_reports_are_ignored_without_an_exception(
    tmp_path: Path, changes: dict[str, Any]
) -> None:
    put(tmp_path, "progress.json", progress_payload(**changes))
    assert progress(tmp_path) is None


def test_a_missing_total_or_rate_is_fine(tmp_path: Path) -> None:
    put(tmp_path, "progress.json", progress_payload(total_steps=None, steps_per_s=None))
    assert progress(tmp_path) is not None


def test_a_clock_a_little_ahead_is_tolerated(tmp_path: Path) -> None:
    put(tmp_path, "progress.json", progress_payload(updated_at=NOW + 30))
    assert progress(tmp_path) is not None


def test_a_stale_report_is_ignored(tmp_path: Path) -> None:
    put(tmp_path, "progress.json", progress_payload(updated_at=NOW - 601))
    assert progress(tmp_path) is None
    assert progress(tmp_path, max_age_s=700.0) is not None


# ----------------------------------------------------------------------------------------------
# ack.json


def ack_payload(**changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "job_id": "123",
        "restart_count": 1,
        "step": 80,
        "checkpoint": "ckpt-80",
        "written_at": NOW,
    }
    payload.update(changes)
    return payload


def ack(folder: Path, owner_uid: int | None = ME, **kwargs: Any) -> CheckedAck | None:
    options: dict[str, Any] = {"job_id": "123", "restart_count": 1, "signalled_at": NOW - 5}
    options.update(kwargs)
    return read_ack(folder, owner_uid=owner_uid, **options)


def test_an_ack_of_this_signal_is_accepted(tmp_path: Path) -> None:
    put(tmp_path, "ack.json", ack_payload())
    assert ack(tmp_path) == CheckedAck("123", 1, 80, "ckpt-80", NOW)


@pytest.mark.parametrize(
    ("changes", "options"),
    [
        ({"job_id": "124"}, {}),
        ({"restart_count": 0}, {}),
        ({"restart_count": "1"}, {}),
        ({}, {"restart_count": 2}),
        ({"written_at": NOW - 6}, {}),
        ({"written_at": "now"}, {}),
        ({"step": -1}, {}),
        ({"step": None}, {}),
    ],
    ids=[
        "other-job",
        "older-run",
        "count-as-text",
        "newer-run",
        "before-signal",
        "bad-time",
        "negative-step",
        "no-step",
    ],
)
def test_an_ack_of_another_signal_is_refused(
    tmp_path: Path, changes: dict[str, Any], options: dict[str, Any]
) -> None:
    put(tmp_path, "ack.json", ack_payload(**changes))
    assert ack(tmp_path, **options) is None


def test_an_ack_of_another_owner_or_through_a_symlink_is_refused(tmp_path: Path) -> None:
    put(tmp_path, "ack.json", ack_payload())
    assert ack(tmp_path, owner_uid=OTHER) is None
    folder = tmp_path / "linked"
    folder.mkdir()
    (folder / "ack.json").symlink_to(tmp_path / "ack.json")
    assert ack(folder) is None


# ----------------------------------------------------------------------------------------------
# Writing placement.json and checkpoint_request.json


def test_job_folder_refuses_keys_that_escape_the_root(tmp_path: Path) -> None:
    assert job_folder(tmp_path, "123") == tmp_path / "123"
    for key in ("", ".", "..", "a/b", "../x", "a\0b"):
        with pytest.raises(ValueError, match="cannot name a folder"):
            job_folder(tmp_path, key)


def test_placement_creates_the_folder_0700(tmp_path: Path) -> None:
    folder = tmp_path / "state" / "k1"
    write_placement(folder, {"round": 3, "gpu_type": "v100"}, uid=None, gid=None)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert json.loads((folder / "placement.json").read_text()) == {"round": 3, "gpu_type": "v100"}
    assert stat.S_IMODE((folder / "placement.json").stat().st_mode) == 0o644
    assert [p.name for p in folder.iterdir()] == ["placement.json"], "no temp file left"


def test_placement_replaces_the_last_one(tmp_path: Path) -> None:
    write_placement(tmp_path, {"round": 1}, uid=None, gid=None)
    write_placement(tmp_path, {"round": 2}, uid=None, gid=None)
    assert json.loads((tmp_path / "placement.json").read_text()) == {"round": 2}


@pytest.mark.skipif(not is_root, reason="only root hands files to another user")
def test_root_hands_the_folder_and_file_to_the_jobs_user(tmp_path: Path) -> None:
    folder = tmp_path / "k1"
    write_placement(folder, {"round": 1}, uid=4242, gid=4343)
    for path in (folder, folder / "placement.json"):
        info = path.stat()
        assert (info.st_uid, info.st_gid) == (4242, 4343)


def test_a_symlinked_folder_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.mkdir()
    folder = tmp_path / "k1"
    folder.symlink_to(target)
    with pytest.raises(OSError, match=r"symbolic link.*placement\.json"):
        write_placement(folder, {"round": 1}, uid=None, gid=None)
    with pytest.raises(OSError, match=r"symbolic link.*checkpoint_request\.json"):
        write_checkpoint_request(folder, job_id="1", restart_count=0, at=NOW, uid=None, gid=None)
    assert list(target.iterdir()) == []


def test_a_symlinked_file_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    folder = tmp_path / "k1"
    folder.mkdir()
    (folder / "placement.json").symlink_to(victim)
    write_placement(folder, {"round": 1}, uid=None, gid=None)
    assert victim.read_text() == "keep me"
    assert not (folder / "placement.json").is_symlink()
    assert json.loads((folder / "placement.json").read_text()) == {"round": 1}


def test_a_planted_temp_file_is_not_written_through(tmp_path: Path) -> None:
    """The temp file's name is predictable; a hard link planted there must not be opened."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    folder = tmp_path / "k1"
    folder.mkdir()
    os.link(victim, folder / f".placement.json.controller-{os.getpid()}")
    write_placement(folder, {"round": 1}, uid=None, gid=None)
    assert victim.read_text() == "keep me"
    assert json.loads((folder / "placement.json").read_text()) == {"round": 1}


def test_a_file_where_the_folder_should_be_is_an_oserror(tmp_path: Path) -> None:
    (tmp_path / "k1").write_text("not a folder")
    with pytest.raises(OSError):
        write_placement(tmp_path / "k1", {"round": 1}, uid=None, gid=None)


def test_checkpoint_request_names_the_run(tmp_path: Path) -> None:
    folder = tmp_path / "k1"
    write_checkpoint_request(folder, job_id="123", restart_count=2, at=NOW, uid=None, gid=None)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert json.loads((folder / "checkpoint_request.json").read_text()) == {
        "job_id": "123",
        "restart_count": 2,
        "requested_at": NOW,
    }
