"""The controller's side of the state folders: read what a job wrote, write its placement.

Layout (docs/security.md): `<state_root>/<uid>/<key>`. The state root belongs to root and
nobody else may write it (`check_state_root`); `<uid>` is created by root (here, or by the SPANK
job prolog) and handed to that user, so no user can create a folder in another user's
namespace ahead of their job. Everything below `<uid>` belongs to the job's user, who can
write anything there, so the controller:

- walks the path one level at a time with directory descriptors and `O_NOFOLLOW`, checking
  that each level is a real folder owned by the job's user: a symlink or a folder of someone
  else is never entered;
- believes a file only when it is a regular file owned by the job's user, small, and its
  figures plausible; anything else is ignored with a log line, never an exception, so a job
  cannot make a round fail by writing garbage;
- writes its own files (`placement.json`, `checkpoint_request.json`, `resume_request.json`)
  as new files through the folder's descriptor, then renames them into place, so it never
  writes through a link a user planted.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hetsched.core.jobspec import MEM_GIB_MAX, STEPS_MAX, JobSpecError, check_job_key
from slurm_hetsched.errors import ConfigError, HetschedError
from slurm_hetsched.statefolder import (
    ACK_FILE,
    PLACEMENT_FILE,
    PROGRESS_FILE,
    REQUEST_FILE,
    RESUME_FILE,
    copy_folder_name,
    state_folder,
)

logger = logging.getLogger(__name__)

_MAX_BYTES = 64 * 1024  # progress and ack files are a few hundred bytes
_MAX_RATE = 1e9  # steps/s; anything above is not a measurement
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


class StateFolderError(HetschedError, OSError):
    """A job's state folder cannot be used safely (a link, not a folder, another owner)."""


class StateRootError(ConfigError):
    """The configured state root is missing, a link, or writable by other users."""


def check_state_root(root: Path, *, create: bool = True) -> None:
    """Make sure no user but the controller's can create entries in the state root.

    Created (mode 0711: traversable, not listable) when missing and `create`.

    Raises:
        StateRootError: it is a symlink, not a folder, owned by another user, or writable by
            group or others (e.g. the mode 1733 of shared scratch folders): then any user
            could create the folder of another user's future job. The message says the fix.
    """
    if create:
        try:
            root.mkdir(mode=0o711, parents=True, exist_ok=True)
        except OSError as exc:
            raise StateRootError(f"controller.state_root {root}: cannot create it: {exc}") from exc
    try:
        info = os.lstat(root)
    except OSError as exc:
        raise StateRootError(f"controller.state_root {root}: {exc.strerror}") from exc
    fix = f"run `chown root: {root}; chmod 0711 {root}` (docs/security.md)"
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise StateRootError(
            f"controller.state_root {root} is not a folder (a link?); name the real folder"
        )
    if info.st_uid != os.geteuid():
        raise StateRootError(
            f"controller.state_root {root} belongs to uid {info.st_uid}, not to the "
            f"controller's user (uid {os.geteuid()}); {fix}"
        )
    if info.st_mode & 0o022:
        raise StateRootError(
            f"controller.state_root {root} has mode {stat.S_IMODE(info.st_mode):04o}: other "
            f"users could create folders in it ahead of someone else's job; {fix}"
        )


@dataclass(frozen=True, slots=True)
class JobFolder:
    """One job's state folder, `<state_root>/<uid>/<key>`, owned by the job's user.

    Attributes:
        state_root: the controller's state root.
        uid: the job's user; every level below the root must belong to them.
        key: the job key (validated: a safe file name).
        gid: the job's group, given to folders and files the controller creates.
        copy: a forked copy's index; copy k > 0 keeps its files in `<key>/copy-<k>`.

    Raises:
        StateFolderError: the key is not a safe file name.
    """

    state_root: Path
    uid: int
    key: str
    gid: int | None = None
    copy: int = 0

    def __post_init__(self) -> None:
        try:
            check_job_key(self.key)
        except JobSpecError as exc:
            raise StateFolderError(str(exc)) from None

    @property
    def path(self) -> Path:
        """For messages only: every access goes through `_opened`."""
        folder = state_folder(self.state_root, self.uid, self.key)
        return folder / copy_folder_name(self.copy) if self.copy else folder

    def read_json(self, name: str) -> dict[str, Any] | None:
        """The JSON object in file `name` if the folder and the file are safe and the user's,
        else None (logged when something is wrong rather than missing)."""
        try:
            with self._opened(create=False) as fd:
                return None if fd is None else _read_owned_json(fd, name, self.uid, self.path)
        except OSError as exc:  # StateFolderError included
            logger.warning("ignoring %s: %s", self.path / name, exc)
            return None

    def write_json(self, name: str, payload: dict[str, Any]) -> None:
        """Write file `name` atomically, readable by the job's user; the folder (and the
        user's folder above it) are created when the job never ran yet.

        Raises:
            StateFolderError: a level of the path is a link, not a folder, or another
                user's; OSError: the write failed.
        """
        with self._opened(create=True) as fd:
            assert fd is not None
            _write_file(fd, name, payload, self.uid, self.gid)

    def remove(self, name: str) -> None:
        """Remove file `name` if it is there (a link is removed, never followed)."""
        with self._opened(create=False) as fd:
            if fd is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=fd)

    @contextlib.contextmanager
    def _opened(self, *, create: bool) -> Iterator[int | None]:
        """A descriptor of the folder (None if missing and not `create`)."""
        try:
            root = os.open(self.state_root, _DIR_FLAGS)
        except OSError as exc:
            if not create and exc.errno == errno.ENOENT:
                yield None
                return
            raise StateFolderError(f"state root {self.state_root}: {exc.strerror}") from exc
        opened = [root]
        try:
            fd: int | None = root
            # Only root can make entries in the root, so a root-owned <uid> there is root's
            # doing (the SPANK prolog of another job of the user, the admin): handed over.
            levels = [(str(self.uid), create), (self.key, False)]
            for name, adopt in levels + [(copy_folder_name(self.copy), False)] * bool(self.copy):
                assert fd is not None
                fd = _open_owned_dir(fd, name, self.uid, self.gid, create=create, adopt=adopt)
                if fd is None:
                    break
                opened.append(fd)
            yield fd
        finally:
            for fd in opened:
                os.close(fd)


def _open_owned_dir(
    parent: int, name: str, uid: int, gid: int | None, *, create: bool, adopt: bool = False
) -> int | None:
    """Open folder `name` under `parent` without following a link; it must belong to `uid`.
    A missing folder is created (mode 0700, handed to `uid`) when `create`; with `adopt`, one
    of this process's user is handed over too."""
    created = False
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            return None
        with contextlib.suppress(FileExistsError):  # made meanwhile: checked below
            os.mkdir(name, 0o700, dir_fd=parent)
            created = True
        fd = _open_dir(parent, name)
    except OSError as exc:
        raise _unsafe(name, exc) from exc
    try:
        info = os.fstat(fd)
        me = os.geteuid()
        if (created or adopt) and info.st_uid == me != uid:
            os.fchown(fd, uid, gid if gid is not None else -1)
            os.fchmod(fd, 0o700)
            info = os.fstat(fd)
        if info.st_uid != uid:
            raise StateFolderError(
                f"folder {name!r} belongs to uid {info.st_uid}, not to the job's user "
                f"(uid {uid}); not using it"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_dir(parent: int, name: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        raise _unsafe(name, exc) from exc


def _unsafe(name: str, exc: OSError) -> StateFolderError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return StateFolderError(f"{name!r} is a link or not a folder; not following it")
    return StateFolderError(f"cannot open folder {name!r}: {exc.strerror}")


def _read_owned_json(folder: int, name: str, owner_uid: int, where: Path) -> dict[str, Any] | None:
    """The JSON object in `name` under the folder descriptor if it is a regular file owned by
    `owner_uid` and small; else None."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            logger.warning("ignoring %s: not a regular file", where / name)
            return None
        if info.st_uid != owner_uid:
            logger.warning(
                "ignoring %s: owned by uid %d, not by the job's user (uid %d)",
                where / name,
                info.st_uid,
                owner_uid,
            )
            return None
        data = os.read(fd, _MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_BYTES:
        logger.warning("ignoring %s: larger than %d bytes", where / name, _MAX_BYTES)
        return None
    try:
        payload = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: deeply nested brackets
        return None
    return payload if isinstance(payload, dict) else None


def _write_file(folder: int, name: str, payload: dict[str, Any], uid: int, gid: int | None) -> None:
    """A new temp file under the folder descriptor, handed to the user, renamed over `name`."""
    tmp = f".{name}.controller-{os.getpid()}"
    data = (json.dumps(payload, indent=1, sort_keys=True) + "\n").encode()
    # A leftover temp file (or one the user put there) is removed, never opened.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=folder)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=folder)
    try:
        os.write(fd, data)
        if os.geteuid() == 0 and uid != 0:
            os.fchown(fd, uid, gid if gid is not None else -1)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)


# -- what the job wrote --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckedAck:
    """An ack.json the controller accepts (see `read_ack`)."""

    job_id: str
    restart_count: int
    step: int
    checkpoint: str
    written_at: float


def read_progress(
    folder: JobFolder, *, job_ids: set[str], now_s: float, max_age_s: float
) -> dict[str, Any] | None:
    """progress.json if trusted: the user's, recent, plausible, and of this job (its `job_id`
    or `job_key` in `job_ids`: a re-submitted job keeps its key, not its id)."""
    payload = folder.read_json(PROGRESS_FILE)
    if payload is None:
        return None
    step: Any = payload.get("step")
    total: Any = payload.get("total_steps")
    updated: Any = payload.get("updated_at")
    rate: Any = payload.get("steps_per_s")
    peak: Any = payload.get("peak_mem_gib")
    checks = [
        (
            bool({str(payload.get("job_id")), str(payload.get("job_key"))} & job_ids),
            "it names another job",
        ),
        (_whole(step), f"step is not a whole number in 0..{STEPS_MAX}"),
        # Each check stands alone (the list is built before it is read): compare only numbers.
        (
            total is None or (_whole(total) and _whole(step) and total >= step),
            f"total_steps is not a whole number in step..{STEPS_MAX}",
        ),
        (_finite(updated) and updated <= now_s + 60, "updated_at is missing or in the future"),
        (
            rate is None or (_finite(rate) and 0 <= rate <= _MAX_RATE),
            f"steps_per_s is not a number in 0..{_MAX_RATE:g}",
        ),
        (
            peak is None or (_finite(peak) and 0 < peak <= MEM_GIB_MAX),
            f"peak_mem_gib is not a number above 0 up to {MEM_GIB_MAX:g}",
        ),
    ]
    for ok, why in checks:
        if not ok:
            logger.warning("ignoring %s: %s", folder.path / PROGRESS_FILE, why)
            return None
    if now_s - float(updated) > max_age_s:
        return None  # a stale report from an earlier run says nothing about this one
    return payload


def read_ack(
    folder: JobFolder, *, job_id: str, restart_count: int, signalled_at: float
) -> CheckedAck | None:
    """ack.json if it answers this signal: same job id and run, written after the signal."""
    payload = folder.read_json(ACK_FILE)
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
        checkpoint=str(payload.get("checkpoint", ""))[:256],
        written_at=float(written),
    )


# -- what the controller writes ------------------------------------------------------------------


def write_placement(folder: JobFolder, payload: dict[str, Any]) -> None:
    """Write placement.json before the job is released onto its target."""
    folder.write_json(PLACEMENT_FILE, payload)


def write_checkpoint_request(
    folder: JobFolder, *, job_id: str, restart_count: int, at: float
) -> None:
    """Write checkpoint_request.json for one run of a job, just before its checkpoint signal,
    and remove an older resume request, so the pause this signal starts is not cut short."""
    folder.remove(RESUME_FILE)
    payload = {"job_id": job_id, "restart_count": restart_count, "requested_at": at}
    folder.write_json(REQUEST_FILE, payload)


def write_resume_request(folder: JobFolder, *, job_id: str, restart_count: int, at: float) -> None:
    """Write resume_request.json: the move of this run is called off, so a job paused after
    its ack trains on at once instead of waiting out its lease."""
    payload = {"job_id": job_id, "restart_count": restart_count, "requested_at": at}
    folder.write_json(RESUME_FILE, payload)


def _whole(value: Any) -> bool:
    """A whole number a spec could have asked for (bounded: it becomes a float later)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= STEPS_MAX


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
