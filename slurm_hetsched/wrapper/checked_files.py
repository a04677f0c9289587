"""State files on disk, trusted and checked: a file is opened only if it is a regular file of
this process's uid, and read back against its size and CRC-32.

Reading refuses symlinks, FIFOs and files of another uid, root included (`open_owned`: a file
planted by another user is never read). The CRC-32 runs on a second thread (`CrcThread`) while
the bytes move, so checking costs almost no time on top of the disk's: serialize.py uses it
for writing, `read_verified` for reading, and `digest_file` sums a file written by other means.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hetsched.wrapper.state_errors import CorruptStateError, UntrustedFileError

_CHUNK = 64 << 20  # read size; large enough for full disk speed, small enough to overlap CRC


@dataclass(frozen=True, slots=True)
class FileDigest:
    """Size in bytes and CRC-32 of a whole file."""

    size: int
    crc32: int


class CrcThread:
    """CRC-32 over a sequence of buffers in order, on one background thread.

    zlib.crc32 releases the GIL for large buffers, so it runs while the main thread writes or
    reads the next buffer. Each buffer's owner is kept alive until its CRC is done.
    """

    def __init__(self) -> None:
        self.crc = 0
        self._items: list[tuple[memoryview, Any] | None] = []
        self._ready = threading.Condition()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="hetsched-crc", daemon=True)
        self._thread.start()

    def add(self, view: memoryview, owner: Any = None) -> None:
        with self._ready:
            self._items.append((view, owner))
            self._ready.notify()

    def finish(self) -> int:
        with self._ready:
            self._items.append(None)
            self._ready.notify()
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.crc

    def _run(self) -> None:
        try:
            while True:
                with self._ready:
                    while not self._items:
                        self._ready.wait()
                    item = self._items.pop(0)
                if item is None:
                    return
                self.crc = zlib.crc32(item[0], self.crc)
        except BaseException as exc:  # handed to finish()
            self._error = exc


def open_owned(path: Path) -> io.FileIO:
    """Open `path` for reading if it is a regular file owned by this process's effective uid.

    Not following a symlink and checking the open file (not the path) leaves no window for a
    swap; O_NONBLOCK keeps a planted FIFO from blocking the open.

    Raises:
        UntrustedFileError: a symlink, not a regular file, or owned by another uid.
        OSError: it cannot be opened (missing, no permission).
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        owner = os.lstat(path).st_uid
        raise UntrustedFileError(
            f"{path} is a symbolic link (owner uid {owner}); state files are never followed "
            "through links"
        ) from None
    try:
        info = os.fstat(fd)
        euid = os.geteuid()
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFileError(f"{path} is not a regular file (owner uid {info.st_uid})")
        if info.st_uid != euid:
            raise UntrustedFileError(
                f"{path} belongs to uid {info.st_uid}, not to this job's uid {euid}: refusing "
                "to read it (planted by another user?)"
            )
        return open(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def read_verified(path: Path, expected: FileDigest) -> bytearray:
    """The whole file, checked against its size and CRC-32.

    Raises:
        UntrustedFileError: a symlink, not a regular file, or not owned by this process's uid.
        CorruptStateError: missing, unreadable, wrong size or checksum mismatch.
    """
    try:
        with open_owned(path) as file:
            size = os.fstat(file.fileno()).st_size
            if size != expected.size:
                raise CorruptStateError(
                    f"{path} has {size} bytes, its checkpoint manifest says {expected.size}"
                )
            data = bytearray(size)
            view = memoryview(data)
            crc = CrcThread()
            done = 0
            while done < size:
                got = file.readinto(view[done : done + _CHUNK])
                if not got:
                    raise CorruptStateError(f"{path} ended after {done} of {size} bytes")
                crc.add(view[done : done + got])
                done += got
    except OSError as exc:
        raise CorruptStateError(f"cannot read {path}: {exc}") from exc
    actual = crc.finish()
    if actual != expected.crc32:
        raise CorruptStateError(
            f"{path}: checksum mismatch (crc32 {actual:08x}, manifest {expected.crc32:08x})"
        )
    return data


def digest_file(path: Path) -> FileDigest:
    """Size and CRC-32 of a file written by other means (read back)."""
    crc = 0
    size = 0
    with open(path, "rb", buffering=0) as file:
        while chunk := file.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return FileDigest(size, crc)
