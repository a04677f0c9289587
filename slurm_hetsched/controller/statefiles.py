"""The controller's side of the state dir: read what a job wrote, write its placement.

A job's folder (`<state_root>/<job key>`) belongs to the job's user, who can write anything in
it. So a file is believed only when it is a regular file (no symlink followed), owned by the
job's user, and its figures are plausible; anything else is ignored with a log line, never an
exception: a job cannot make a round fail by writing garbage. `placement.json` is written by
the controller (root) atomically and handed to the job's user so the wrapper can read it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hetsched.wrapper.placement import PLACEMENT_FILE
from slurm_hetsched.wrapper.progress import ACK_FILE, PROGRESS_FILE, REQUEST_FILE

logger = logging.getLogger(__name__)

_MAX_BYTES = 64 * 1024  # progress and ack files are a few hundred bytes


@dataclass(frozen=True, slots=True)
class CheckedAck:
    """An ack.json the controller accepts (see `read_ack`)."""

    job_id: str
    restart_count: int
    step: int
    checkpoint: str
    written_at: float


def job_folder(state_root: Path, key: str) -> Path:
    """The job's state folder; a key that could escape the root is refused."""
    if not key or key in (".", "..") or "/" in key or "\0" in key:
        raise ValueError(f"job key {key!r} cannot name a folder")
    return state_root / key


def read_owned_json(path: Path, owner_uid: int | None) -> dict[str, Any] | None:
    """The JSON object in `path` if it is a regular file owned by `owner_uid`, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            logger.warning("ignoring %s: not a regular file", path)
            return None
        if owner_uid is not None and info.st_uid != owner_uid:
            logger.warning(
                "ignoring %s: owned by uid %d, not by the job's user (uid %d)",
                path,
                info.st_uid,
                owner_uid,
            )
            return None
        data = os.read(fd, _MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_BYTES:
        logger.warning("ignoring %s: larger than %d bytes", path, _MAX_BYTES)
        return None
    try:
        payload = json.loads(data)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def read_progress(
    folder: Path, *, owner_uid: int | None, job_ids: set[str], now_s: float, max_age_s: float
) -> dict[str, Any] | None:
    """progress.json if trusted: owned by the user, recent, plausible, and of this job (its
    `job_id` or `job_key` in `job_ids`: a re-submitted job keeps its key, not its id)."""
    payload = read_owned_json(folder / PROGRESS_FILE, owner_uid)
    if payload is None:
        return None
    step: Any = payload.get("step")
    total: Any = payload.get("total_steps")
    updated: Any = payload.get("updated_at")
    rate: Any = payload.get("steps_per_s")
    checks = [
        (
            bool({str(payload.get("job_id")), str(payload.get("job_key"))} & job_ids),
            "it names another job",
        ),
        (_whole(step), "step is not a whole number >= 0"),
        # Each check stands alone (the list is built before it is read): compare only numbers.
        (
            total is None or (_whole(total) and _whole(step) and total >= step),
            "total_steps is not a whole number >= step",
        ),
        (_finite(updated) and updated <= now_s + 60, "updated_at is missing or in the future"),
        (rate is None or (_finite(rate) and rate >= 0), "steps_per_s is not a number >= 0"),
    ]
    for ok, why in checks:
        if not ok:
            logger.warning("ignoring %s: %s", folder / PROGRESS_FILE, why)
            return None
    if now_s - float(updated) > max_age_s:
        return None  # a stale report from an earlier run says nothing about this one
    return payload


def read_ack(
    folder: Path, *, owner_uid: int | None, job_id: str, restart_count: int, signalled_at: float
) -> CheckedAck | None:
    """ack.json if it answers this signal: same job id and run, written after the signal."""
    payload = read_owned_json(folder / ACK_FILE, owner_uid)
    if payload is None:
        return None
    written: Any = payload.get("written_at")
    if (
        str(payload.get("job_id")) != job_id
        or payload.get("restart_count") != restart_count
        or not _finite(written)
        or written < signalled_at
        or not _whole(payload.get("step"))
    ):
        return None
    return CheckedAck(
        job_id=job_id,
        restart_count=restart_count,
        step=int(payload["step"]),
        checkpoint=str(payload.get("checkpoint", "")),
        written_at=float(written),
    )


def write_placement(
    folder: Path, payload: dict[str, Any], *, uid: int | None, gid: int | None
) -> None:
    """Write placement.json (see `write_job_file`)."""
    write_job_file(folder, PLACEMENT_FILE, payload, uid=uid, gid=gid)


def write_checkpoint_request(
    folder: Path, *, job_id: str, restart_count: int, at: float, uid: int | None, gid: int | None
) -> None:
    """Write checkpoint_request.json for one run of a job, just before its checkpoint signal."""
    payload = {"job_id": job_id, "restart_count": restart_count, "requested_at": at}
    write_job_file(folder, REQUEST_FILE, payload, uid=uid, gid=gid)


def write_job_file(
    folder: Path, name: str, payload: dict[str, Any], *, uid: int | None, gid: int | None
) -> None:
    """Write a controller file into a job's folder atomically, readable by the job's user.

    The folder is created (mode 0700, owned by the user) when the job never ran yet. A folder
    that is a symlink is refused, and the file is written through a descriptor of the folder
    opened without following links, as a new file: root must not write through a link (or
    into a hard link) a user planted.
    """
    if folder.is_symlink():
        raise OSError(f"{folder} is a symbolic link; not writing {name} through it")
    if not folder.exists():
        folder.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        folder.mkdir(mode=0o700)
        if uid is not None and os.geteuid() == 0:
            os.chown(folder, uid, gid if gid is not None else -1)
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise OSError(f"{folder} is not a plain folder; not writing {name} into it: {exc}") from exc
    tmp = f".{name}.controller-{os.getpid()}"
    data = (json.dumps(payload, indent=1, sort_keys=True) + "\n").encode()
    try:
        # A leftover temp file (or one the user put there) is removed, never opened.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(tmp, flags, 0o644, dir_fd=dir_fd)
        try:
            os.write(fd, data)
            if uid is not None and os.geteuid() == 0:
                os.fchown(fd, uid, gid if gid is not None else -1)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
