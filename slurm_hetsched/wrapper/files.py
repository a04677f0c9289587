"""Durable, atomic file operations and the private state folder.

A file is written to a temporary name in the same folder, flushed and fsynced, then renamed over
the target with `os.replace`, and the folder is fsynced so the rename survives a crash. Readers
therefore see either the old file or the new one, never a mix. No other module of the wrapper
writes state files by hand.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

from slurm_hetsched.errors import HetschedError

# The layout is the state folder format's (statefolder.py); imported from here by benchmarks/
# and tests/e2e/.
from slurm_hetsched.statefolder import state_folder as state_folder

logger = logging.getLogger(__name__)


class StateDirError(HetschedError):
    """The job's state folder cannot be created or is not safe to use."""


def fsync_dir(folder: Path) -> None:
    """Make renames and creations inside `folder` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` atomically and durably (temp file, fsync, rename, fsync dir)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Replace `path` with `payload` as JSON, atomically and durably."""
    write_bytes_atomic(path, (json.dumps(payload, indent=1, sort_keys=True) + "\n").encode())


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`; None if the file is missing, unreadable or not an object."""
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


def ensure_state_dir(path: Path) -> Path:
    """Create the job's state folder (mode 0700) if missing and check that it is safe to use.

    Missing parents are created with mode 0700 when this user may (a state root in the home
    folder); on a shared root, root has made `<root>/<uid>` for us (the controller before it
    released the job, or the SPANK job prolog), see docs/security.md.

    The folder, and the `<uid>` folder above it when the layout has one, must be real folders
    (not links) owned by this process's user, whatever that user is, root included: a folder
    someone else made could hold a planted checkpoint.

    Returns:
        `path`, resolved.

    Raises:
        StateDirError: it cannot be created, is not a folder, or belongs to another user; the
            message says what to do.
    """
    euid = os.geteuid()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
    except FileExistsError:
        raise StateDirError(
            f"the job's state path {path} exists but is not a folder; remove it"
        ) from None
    except OSError as exc:
        hint = (
            "the controller (or the SPANK plugin) creates it before the job starts; was the "
            "job released by the controller?"
            if path.parent.name == str(euid)
            else "set HETSCHED_STATE_ROOT (or HETSCHED_STATE_DIR) to a folder your jobs can "
            "write on every node"
        )
        raise StateDirError(f"cannot create the job's state folder {path}: {exc}; {hint}") from exc
    checked = [path.parent, path] if path.parent.name == str(euid) else [path]
    for folder in checked:
        info = os.lstat(folder)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise StateDirError(f"{folder} is a link or not a folder; refusing to use it")
        if info.st_uid != euid:
            raise StateDirError(
                f"the state folder {folder} belongs to uid {info.st_uid}, not to you (uid "
                f"{euid}); refusing it: someone else may have made it ahead of your job. Tell "
                "your admin (docs/security.md)"
            )
    for folder in checked:
        mode = os.lstat(folder).st_mode
        if mode & 0o077:
            # Checkpoints may hold private data, and a folder others may write is one they
            # can plant folders and files in: nobody else may read or write them.
            logger.warning("state folder %s had mode %o; setting 0700", folder, mode & 0o777)
            os.chmod(folder, 0o700)
    return path.resolve()
