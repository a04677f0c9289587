"""The controller's side of a job's state folder: what it believes of the files a job's user
wrote (progress.json, ack.json), how it reaches the folder (`<root>/<uid>/<key>`, one level at a
time, never through a link or another user's folder) and how it writes its own files
(placement.json, checkpoint_request.json, resume_request.json) into a folder that user controls.
Real files in a temp folder."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from slurm_hetsched.controller.statefiles import (
    CheckedAck,
    JobFolder,
    StateFolderError,
    StateRootError,
    check_state_root,
    read_ack,
    read_progress,
    write_checkpoint_request,
    write_placement,
    write_resume_request,
)

NOW = 1_800_000_000.0
ME = os.geteuid()
is_root = ME == 0
needs_root = pytest.mark.skipif(not is_root, reason="only root can give a file to another user")


@pytest.fixture
def folder(tmp_path: Path) -> JobFolder:
    root = tmp_path / "root"
    root.mkdir(mode=0o711)
    return JobFolder(root, ME, "k1")


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


def put(folder: JobFolder, name: str, payload: Any) -> Path:
    folder.path.mkdir(parents=True, exist_ok=True)
    path = folder.path / name
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return path


def progress(folder: JobFolder, **kwargs: Any) -> dict[str, Any] | None:
    options: dict[str, Any] = {"job_ids": {"123", "k1"}, "now_s": NOW, "max_age_s": 600.0}
    options.update(kwargs)
    return read_progress(folder, **options)


# ----------------------------------------------------------------------------------------------
# progress.json


def test_a_good_report_is_read(folder: JobFolder) -> None:
    put(folder, "progress.json", progress_payload())
    assert progress(folder) == progress_payload()
    assert folder.path == folder.state_root / str(ME) / "k1"


def test_a_report_naming_the_key_of_a_resubmitted_job_is_read(folder: JobFolder) -> None:
    put(folder, "progress.json", progress_payload(job_id="999"))
    assert progress(folder, job_ids={"456", "k1"}) is not None


def test_no_file_or_folder_gives_none(folder: JobFolder, tmp_path: Path) -> None:
    assert progress(folder) is None
    assert progress(JobFolder(tmp_path / "no-root", ME, "k1")) is None
    folder.path.mkdir(parents=True)
    assert progress(folder) is None


@needs_root
def test_a_file_chowned_to_another_user_is_ignored(folder: JobFolder) -> None:
    path = put(folder, "progress.json", progress_payload())
    os.chown(path, 4242, 4242)
    assert progress(folder) is None


@needs_root
def test_a_folder_of_another_user_is_not_entered(folder: JobFolder) -> None:
    """A user folder (or key folder) someone else made ahead of the job is never used."""
    put(folder, "progress.json", progress_payload())
    os.chown(folder.path.parent, 4242, 4242)
    assert progress(folder) is None
    with pytest.raises(StateFolderError, match="belongs to uid 4242"):
        write_placement(folder, {"round": 1})
    os.chown(folder.path.parent, ME, -1)
    os.chown(folder.path, 4242, 4242)
    assert progress(folder) is None
    with pytest.raises(StateFolderError, match="belongs to uid 4242"):
        write_placement(folder, {"round": 1})


def test_a_symlink_is_not_followed(folder: JobFolder, tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.json"
    real.write_text(json.dumps(progress_payload()))
    folder.path.mkdir(parents=True)
    (folder.path / "progress.json").symlink_to(real)
    assert progress(folder) is None


def test_a_symlinked_key_or_user_folder_is_not_followed(folder: JobFolder, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "progress.json").write_text(json.dumps(progress_payload()))
    folder.path.parent.mkdir()
    folder.path.symlink_to(elsewhere)
    assert progress(folder) is None
    folder.path.unlink()
    folder.path.parent.rmdir()
    (elsewhere / "k1").mkdir()
    (elsewhere / "k1" / "progress.json").write_text(json.dumps(progress_payload()))
    folder.path.parent.symlink_to(elsewhere)
    assert progress(folder) is None


def test_a_fifo_is_not_read(folder: JobFolder) -> None:
    folder.path.mkdir(parents=True)
    os.mkfifo(folder.path / "progress.json")
    assert progress(folder) is None  # and it did not block


def test_a_file_too_big_is_ignored(folder: JobFolder) -> None:
    put(folder, "progress.json", progress_payload(padding="x" * 70_000))
    assert progress(folder) is None


@pytest.mark.parametrize(
    "text",
    ["not json", "[1, 2]", '"text"', "", '{"step": 1', "[" * 30_000 + "]" * 30_000, "9" * 5000],
    ids=["text", "list", "str", "empty", "cut", "deeply-nested", "huge-number"],
)
def test_garbage_is_ignored(folder: JobFolder, text: str) -> None:
    put(folder, "progress.json", text)
    assert progress(folder) is None


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
        {"steps_per_s": 1e300},
        {"step": 10**13, "total_steps": 10**13},
        {"total_steps": 10**400},
    ],
    ids=lambda c: ",".join(f"{k}={v!r}" for k, v in c.items()),
)
def test_implausible_reports_are_ignored_without_an_exception(
    folder: JobFolder, changes: dict[str, Any]
) -> None:
    put(folder, "progress.json", progress_payload(**changes))
    assert progress(folder) is None


def test_a_missing_total_or_rate_is_fine(folder: JobFolder) -> None:
    put(folder, "progress.json", progress_payload(total_steps=None, steps_per_s=None))
    assert progress(folder) is not None


def test_a_clock_a_little_ahead_is_tolerated(folder: JobFolder) -> None:
    put(folder, "progress.json", progress_payload(updated_at=NOW + 30))
    assert progress(folder) is not None


def test_a_stale_report_is_ignored(folder: JobFolder) -> None:
    put(folder, "progress.json", progress_payload(updated_at=NOW - 601))
    assert progress(folder) is None
    assert progress(folder, max_age_s=700.0) is not None


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


def ack(folder: JobFolder, **kwargs: Any) -> CheckedAck | None:
    options: dict[str, Any] = {"job_id": "123", "restart_count": 1, "signalled_at": NOW - 5}
    options.update(kwargs)
    return read_ack(folder, **options)


def test_an_ack_of_this_signal_is_accepted(folder: JobFolder) -> None:
    put(folder, "ack.json", ack_payload())
    assert ack(folder) == CheckedAck("123", 1, 80, "ckpt-80", NOW)


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
        ({"step": 10**13}, {}),
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
        "huge-step",
    ],
)
def test_an_ack_of_another_signal_is_refused(
    folder: JobFolder, changes: dict[str, Any], options: dict[str, Any]
) -> None:
    put(folder, "ack.json", ack_payload(**changes))
    assert ack(folder, **options) is None


def test_an_ack_through_a_symlink_is_refused(folder: JobFolder, tmp_path: Path) -> None:
    real = tmp_path / "real-ack.json"
    real.write_text(json.dumps(ack_payload()))
    folder.path.mkdir(parents=True)
    (folder.path / "ack.json").symlink_to(real)
    assert ack(folder) is None


@needs_root
def test_an_ack_of_another_owner_is_refused(folder: JobFolder) -> None:
    os.chown(put(folder, "ack.json", ack_payload()), 4242, 4242)
    assert ack(folder) is None


# ----------------------------------------------------------------------------------------------
# The folder and the state root


@pytest.mark.parametrize("key", ["", ".", "..", "a/b", "../x", "a\0b", "x" * 65, "a b", "-;rm"])
def test_a_key_that_is_not_a_safe_file_name_is_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(StateFolderError):
        JobFolder(tmp_path, ME, key)


def test_the_state_root_is_created_0711(tmp_path: Path) -> None:
    root = tmp_path / "state"
    check_state_root(root)
    assert stat.S_IMODE(root.stat().st_mode) == 0o711


@pytest.mark.parametrize("mode", [0o1733, 0o777, 0o775])
def test_a_state_root_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    root = tmp_path / "state"
    root.mkdir()
    os.chmod(root, mode)
    with pytest.raises(StateRootError, match="chmod 0711"):
        check_state_root(root)


def test_a_symlinked_or_missing_state_root_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o711)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(StateRootError, match="not a folder"):
        check_state_root(tmp_path / "link")
    with pytest.raises(StateRootError):
        check_state_root(tmp_path / "missing", create=False)


@needs_root
def test_a_state_root_of_another_user_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "state"
    root.mkdir(mode=0o711)
    os.chown(root, 4242, 4242)
    with pytest.raises(StateRootError, match="belongs to uid 4242"):
        check_state_root(root)


# ----------------------------------------------------------------------------------------------
# Writing placement.json, checkpoint_request.json and resume_request.json


def test_placement_creates_the_user_and_key_folders_0700(folder: JobFolder) -> None:
    write_placement(folder, {"round": 3, "gpu_type": "v100"})
    for path in (folder.path.parent, folder.path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
        assert path.stat().st_uid == ME
    assert json.loads((folder.path / "placement.json").read_text()) == {
        "round": 3,
        "gpu_type": "v100",
    }
    assert stat.S_IMODE((folder.path / "placement.json").stat().st_mode) == 0o644
    assert [p.name for p in folder.path.iterdir()] == ["placement.json"], "no temp file left"


def test_placement_replaces_the_last_one(folder: JobFolder) -> None:
    write_placement(folder, {"round": 1})
    write_placement(folder, {"round": 2})
    assert json.loads((folder.path / "placement.json").read_text()) == {"round": 2}


@needs_root
def test_root_hands_the_folders_and_file_to_the_jobs_user(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o711)
    folder = JobFolder(root, 4242, "k1", gid=4343)
    write_placement(folder, {"round": 1})
    for path in (root / "4242", folder.path, folder.path / "placement.json"):
        info = path.stat()
        assert (info.st_uid, info.st_gid) == (4242, 4343)
    assert stat.S_IMODE(root.stat().st_mode) == 0o711, "the root itself is left as it was"


def test_a_symlinked_folder_is_refused(folder: JobFolder, tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.mkdir()
    folder.path.parent.mkdir()
    folder.path.symlink_to(target)
    with pytest.raises(StateFolderError, match="link"):
        write_placement(folder, {"round": 1})
    with pytest.raises(StateFolderError, match="link"):
        write_checkpoint_request(folder, job_id="1", restart_count=0, at=NOW)
    assert list(target.iterdir()) == []


def test_a_symlinked_file_is_replaced_not_written_through(
    folder: JobFolder, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    folder.path.mkdir(parents=True)
    (folder.path / "placement.json").symlink_to(victim)
    write_placement(folder, {"round": 1})
    assert victim.read_text() == "keep me"
    assert not (folder.path / "placement.json").is_symlink()
    assert json.loads((folder.path / "placement.json").read_text()) == {"round": 1}


def test_a_planted_temp_file_is_not_written_through(folder: JobFolder, tmp_path: Path) -> None:
    """The temp file's name is predictable; a hard link planted there must not be opened."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    folder.path.mkdir(parents=True)
    os.link(victim, folder.path / f".placement.json.controller-{os.getpid()}")
    write_placement(folder, {"round": 1})
    assert victim.read_text() == "keep me"
    assert json.loads((folder.path / "placement.json").read_text()) == {"round": 1}


def test_a_file_where_the_folder_should_be_is_refused(folder: JobFolder) -> None:
    folder.path.parent.mkdir()
    folder.path.write_text("not a folder")
    with pytest.raises(StateFolderError):
        write_placement(folder, {"round": 1})


def test_checkpoint_request_names_the_run_and_clears_an_old_resume(folder: JobFolder) -> None:
    write_resume_request(folder, job_id="123", restart_count=2, at=NOW - 100)
    assert (folder.path / "resume_request.json").exists()
    write_checkpoint_request(folder, job_id="123", restart_count=2, at=NOW)
    assert json.loads((folder.path / "checkpoint_request.json").read_text()) == {
        "job_id": "123",
        "restart_count": 2,
        "requested_at": NOW,
    }
    assert not (folder.path / "resume_request.json").exists(), "an old call-off would cut the pause"
    write_resume_request(folder, job_id="123", restart_count=2, at=NOW + 5)
    assert json.loads((folder.path / "resume_request.json").read_text())["requested_at"] == NOW + 5


@needs_root
def test_a_user_folder_root_made_is_handed_over_not_refused(tmp_path: Path) -> None:
    """Only root can make entries in the root: a root-owned <uid> there (the SPANK prolog of
    another job of the user) is the user's to have. A root-owned key folder is not adopted."""
    root = tmp_path / "root"
    root.mkdir(mode=0o711)
    (root / "4242").mkdir(mode=0o755)
    folder = JobFolder(root, 4242, "k1", gid=4343)
    assert progress(folder) is None, "reading adopts nothing"
    write_placement(folder, {"round": 1})
    info = (root / "4242").stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (4242, 0o700)
    (root / "4242" / "k2").mkdir()
    with pytest.raises(StateFolderError, match="belongs to uid 0"):
        write_placement(JobFolder(root, 4242, "k2"), {"round": 1})
