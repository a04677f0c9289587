"""Atomic checkpoints in the job's state folder: `ckpt-<step>/` with a `COMMITTED` marker.

Writing: files go into a hidden temporary folder next to the checkpoints; each file and the
folder are fsynced; the `COMMITTED` marker (a JSON manifest with every file's size and CRC-32)
is written and fsynced last; the folder is renamed to `ckpt-<step>` and the state folder
fsynced. A crash at any point leaves either no `ckpt-<step>` or a complete one, and never
touches an older checkpoint. An existing committed `ckpt-<step>` is never overwritten.

Reading: the newest checkpoint whose marker parses and whose files match their size and
checksum wins; a torn or corrupt one (no marker, unreadable, checksum mismatch) is skipped with
a warning and the previous committed one used (the failure PyTorch Lightning #19970 describes).
Only folders and files owned by the process's effective uid, and no symlinks, are read, under
every uid including root: another user's planted `ckpt-*` is skipped with a warning. A
checkpoint whose pickle needs a type loading refuses (serialize.UnsafeStateError) is skipped
with an error naming the type; if no older one loads, that error is raised rather than the job
starting over.

Only the job's rank 0 writes; this module does not know about ranks. The writer and reader a
save or load function is handed are checkpoint_handles.py's (re-exported here).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from slurm_hetsched.statefolder import MARKER, checkpoint_name, checkpoint_step
from slurm_hetsched.wrapper.checked_files import open_owned
from slurm_hetsched.wrapper.checkpoint_handles import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointReader,
    CheckpointUnsafeError,
    CheckpointWriter,
)
from slurm_hetsched.wrapper.files import fsync_dir
from slurm_hetsched.wrapper.state_errors import CorruptStateError

__all__ = [
    "FORMAT",
    "MARKER",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointReader",
    "CheckpointStore",
    "CheckpointUnsafeError",
    "CheckpointWriter",
]

logger = logging.getLogger(__name__)

FORMAT = "hetsched-checkpoint/1"
_TEMP_PREFIX = ".tmp-ckpt-"
_TRASH_PREFIX = ".trash-ckpt-"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """A `ckpt-<step>` folder and whether its marker is there."""

    step: int
    path: Path
    committed: bool


class CheckpointStore:
    """The checkpoints of one job, in its state folder.

    Args:
        folder: the job's state folder (exists; see files.ensure_state_dir).
        keep: committed checkpoints kept after each save (older ones are removed).
        stall_s: TEST HOOK: seconds to stall after the files are written and before the commit,
            so a test can kill the job in the middle of a write. 0 in real use.
        wall: Unix-seconds clock for `written_at`.
    """

    def __init__(
        self,
        folder: Path,
        *,
        keep: int = 3,
        stall_s: float = 0.0,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.folder = folder
        self.keep = keep
        self.stall_s = stall_s
        self._wall = wall

    def checkpoints(self) -> list[CheckpointInfo]:
        """Every `ckpt-<step>` folder of this uid, newest first; `committed` means the marker
        exists. Other `ckpt-*` entries (symlinks, files, another uid's) are skipped with a
        warning: a planted one must not be loaded, even by a job of root."""
        infos = []
        euid = os.geteuid()
        for entry in self._entries():
            step = checkpoint_step(entry.name)
            if step is None:
                continue
            try:
                info = entry.lstat()  # not is_dir(): it follows symlinks
            except OSError:  # removed meanwhile
                continue
            if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
                kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a folder"
                logger.warning("ignoring %s: it is %s (owner uid %d)", entry, kind, info.st_uid)
                continue
            if info.st_uid != euid:
                logger.warning(
                    "ignoring %s: it belongs to uid %d, not to this job's uid %d",
                    entry,
                    info.st_uid,
                    euid,
                )
                continue
            infos.append(CheckpointInfo(step, entry, _has_marker(entry)))
        return sorted(infos, key=lambda info: info.step, reverse=True)

    def latest(self) -> CheckpointInfo | None:
        """The newest checkpoint with a marker (not yet checksummed), or None."""
        return next((info for info in self.checkpoints() if info.committed), None)

    def open(self, info: CheckpointInfo) -> CheckpointReader:
        """A reader for `info` after checking its marker.

        Raises:
            CheckpointCorruptError: no marker, or a marker that is not a valid manifest.
        """
        manifest = _read_manifest(info.path / MARKER)
        if manifest is None:
            raise CheckpointCorruptError(f"{info.path} has no readable {MARKER} marker (torn)")
        if manifest.get("format") != FORMAT or manifest.get("step") != info.step:
            raise CheckpointCorruptError(
                f"{info.path}/{MARKER} is not a {FORMAT} manifest for step {info.step}"
            )
        if not isinstance(manifest.get("files"), Mapping):
            raise CheckpointCorruptError(f"{info.path}/{MARKER} lists no files")
        return CheckpointReader(info.path, info.step, manifest)

    def load_latest(
        self, load: Callable[[CheckpointReader], T], *, step: int | None = None
    ) -> tuple[CheckpointReader, T] | None:
        """Load the newest usable checkpoint (or exactly `step`) with `load`.

        A torn or corrupt checkpoint (CheckpointCorruptError from the marker, a file check or
        `load`) is skipped with a warning and the previous committed one tried. One that needs
        a type loading refuses (CheckpointUnsafeError) is skipped with an error naming it; if
        no older one loads, that error is raised: starting over would discard the run. Other
        errors of `load` (e.g. a model that no longer matches the saved state) are raised:
        silently falling back to an older checkpoint, or to none, would hide them.

        Returns:
            the reader and what `load` returned, or None when there is no usable checkpoint.

        Raises:
            CheckpointUnsafeError: every checkpoint that was not corrupt was refused.
        """
        refused: CheckpointUnsafeError | None = None
        for info in self.checkpoints():
            if step is not None and info.step != step:
                continue
            try:
                reader = self.open(info)
                return reader, load(reader)
            except CheckpointUnsafeError as exc:
                if step is not None:
                    raise
                logger.error("refusing checkpoint %s: %s", info.path.name, exc)
                refused = refused or exc
            except CheckpointCorruptError as exc:
                if step is not None:
                    raise
                logger.warning("skipping checkpoint %s: %s", info.path.name, exc)
        if step is not None:
            raise CheckpointCorruptError(f"no checkpoint for step {step} in {self.folder}")
        if refused is not None:
            raise refused
        return None

    def save(
        self,
        step: int,
        write: Callable[[CheckpointWriter], None],
        *,
        meta: Mapping[str, Any] | None = None,
        rank_states: list[Any] | None = None,
    ) -> Path:
        """Write and commit `ckpt-<step>` with `write`, then keep only the newest `keep`.

        An already committed `ckpt-<step>` is kept as it is (the state at a given step is the
        same; overwriting it would risk the good copy). A torn one is replaced.

        Returns:
            the committed checkpoint folder.

        Raises:
            CheckpointError / OSError: the write failed; older checkpoints are untouched and the
                temporary folder removed.
        """
        final = self.folder / checkpoint_name(step)
        if _owned_dir(final) and _has_marker(final):
            logger.debug("%s is already committed; not writing it again", final.name)
            return final
        temp = self.folder / f"{_TEMP_PREFIX}{step}-{os.getpid()}-{time.monotonic_ns()}"
        temp.mkdir(mode=0o700)
        started = time.perf_counter()
        try:
            writer = CheckpointWriter(temp, step, rank_states or [])
            write(writer)
            digests = writer.finish()
            if self.stall_s > 0:
                logger.warning("TEST HOOK: stalling checkpoint %d for %.1f s", step, self.stall_s)
                time.sleep(self.stall_s)
            manifest = {
                "format": FORMAT,
                "step": step,
                "written_at": self._wall(),
                "files": {
                    name: {"size": d.size, "crc32": d.crc32} for name, d in sorted(digests.items())
                },
                "meta": dict(meta or {}),
            }
            # The marker needs no rename of its own: renaming the folder is the atomic step,
            # and one fsync of the folder makes every entry in it durable before that.
            _write_durably(temp / MARKER, (json.dumps(manifest, indent=1) + "\n").encode())
            fsync_dir(temp)
            if os.path.lexists(final):  # torn or not ours: move it aside, never write into it
                _remove(final, self.folder / f"{_TRASH_PREFIX}{step}-{os.getpid()}")
            os.rename(temp, final)
            fsync_dir(self.folder)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        size = sum(d.size for d in digests.values())
        elapsed = time.perf_counter() - started
        logger.info("checkpoint %s committed: %.1f MB in %.2f s", final.name, size / 1e6, elapsed)
        self.prune()
        return final

    def prune(self) -> None:
        """Keep the newest `keep` committed checkpoints; remove older ones, torn ones older
        than the newest committed one, and temporary folders left by killed writers.

        Call it only while no other process writes checkpoints of this job.
        """
        infos = self.checkpoints()
        committed = [info for info in infos if info.committed]
        newest = committed[0].step if committed else None
        for info in committed[self.keep :]:
            _remove(info.path, None)
        for info in infos:
            if not info.committed and newest is not None and info.step < newest:
                _remove(info.path, None)
        for entry in self._entries():
            if entry.name.startswith((_TEMP_PREFIX, _TRASH_PREFIX)):
                logger.info("removing %s, left by an interrupted checkpoint write", entry.name)
                _remove(entry, None)

    def _entries(self) -> list[Path]:
        try:
            return list(self.folder.iterdir())
        except FileNotFoundError:
            return []


def _write_durably(path: Path, data: bytes) -> None:
    """Create `path` with `data` and fsync it (the caller fsyncs the folder)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _remove(path: Path, aside: Path | None) -> None:
    """Remove a folder; with `aside`, first rename it there so the name is free at once."""
    if aside is not None:
        os.rename(path, aside)
        path = aside
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)  # the link itself, never what it points to
    else:
        shutil.rmtree(path, ignore_errors=True)


def _owned_dir(path: Path) -> bool:
    """Whether `path` is a folder (not a symlink) owned by this process's effective uid."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()


def _has_marker(folder: Path) -> bool:
    """Whether `folder` holds a `COMMITTED` file (not a symlink; its owner is checked on read)."""
    try:
        return stat.S_ISREG((folder / MARKER).lstat().st_mode)
    except OSError:
        return False


def _read_manifest(path: Path) -> dict[str, Any] | None:
    """The JSON object in marker `path`; None if missing, unreadable or not an object.

    Raises:
        CheckpointCorruptError: the marker is a symlink, not a file, or not this uid's.
    """
    try:
        with open_owned(path) as file:
            payload = json.loads(file.read())
    except CorruptStateError as exc:
        raise CheckpointCorruptError(str(exc)) from exc
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None
