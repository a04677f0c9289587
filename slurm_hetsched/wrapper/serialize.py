"""One Python object to one file and back, fast, with a CRC-32 of the whole file.

The object is pickled with its torch tensors and numpy arrays taken out (pickle's persistent
ids, as `torch.save` does); their bytes follow the pickle, each aligned to 64 bytes, written
straight from the tensors' memory. The checksum is computed on a second thread while the
bytes go to disk, so a checkpoint writes at close to the disk's raw bandwidth (torch.save
spends about as long on its own CRC as on the write; benchmarks/checkpoint.py measures both).

File layout: MAGIC (16 bytes) | pickle length (u64 LE) | pickle | pad | blob 0 | pad | blob 1 ...

Loading unpickles, so it must only read files the job itself wrote: the state folder is mode
0700 and owned by the job's user, which makes this the same trust as `torch.load`.

This module neither imports torch nor numpy; it uses them only when they are already loaded
(saving) or when a file holds their arrays (loading).
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import sys
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hetsched.errors import HetschedError

MAGIC = b"HETSCHED-STATE01"
_ALIGN = 64
_CHUNK = 64 << 20  # read size; large enough for full disk speed, small enough to overlap CRC
_SHARE_MIN_BYTES = 4 << 20  # smaller loaded arrays are copied so they do not pin the file buffer


class CorruptStateError(HetschedError):
    """A state file is truncated, damaged or not in this format."""


@dataclass(frozen=True, slots=True)
class FileDigest:
    """Size in bytes and CRC-32 of a whole file."""

    size: int
    crc32: int


class _CrcThread:
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


def _pad(offset: int) -> int:
    return -offset % _ALIGN


def _as_bytes_view(array: Any) -> memoryview:
    """A flat byte view of a contiguous numpy array (also used for tensors via .numpy())."""
    return memoryview(array).cast("B")


class _Pickler(pickle.Pickler):
    """Pickles an object, setting its dense torch tensors and numpy arrays aside as blobs."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.blobs: list[tuple[memoryview, Any]] = []
        self._torch = sys.modules.get("torch")
        self._numpy = sys.modules.get("numpy")

    def persistent_id(self, obj: Any) -> Any:
        torch = self._torch
        if torch is not None and isinstance(obj, torch.Tensor):
            return self._tensor_id(torch, obj)
        numpy = self._numpy
        if numpy is not None and type(obj) is numpy.ndarray and not obj.dtype.hasobject:
            array = numpy.ascontiguousarray(obj)
            self.blobs.append((_as_bytes_view(array.reshape(-1).view(numpy.uint8)), array))
            return ("ndarray", len(self.blobs) - 1, array.dtype.str, array.shape)
        return None

    def _tensor_id(self, torch: Any, tensor: Any) -> Any:
        if tensor.layout != torch.strided or tensor.is_quantized or tensor.device.type == "meta":
            return None  # rare kinds: plain pickling handles them
        data = tensor.detach().resolve_conj().resolve_neg().cpu().contiguous()
        if data.numel():
            view = _as_bytes_view(data.reshape(-1).view(torch.uint8).numpy())
        else:
            view = memoryview(b"")
        self.blobs.append((view, data))
        parameter = isinstance(tensor, torch.nn.Parameter)
        return (
            "tensor",
            len(self.blobs) - 1,
            str(data.dtype).removeprefix("torch."),
            tuple(data.shape),
            bool(tensor.requires_grad),
            parameter,
        )


def save_object(obj: Any, path: Path, *, fsync: bool = True) -> FileDigest:
    """Write `obj` to a new file `path`, fsynced unless `fsync` is False.

    Returns:
        the size and CRC-32 of the file as written.

    Raises:
        FileExistsError: `path` exists (a checkpoint file is never overwritten).
        pickle.PicklingError / TypeError: something in `obj` cannot be pickled.
    """
    buffer = io.BytesIO()
    pickler = _Pickler(buffer)
    pickler.dump(obj)
    header = MAGIC + struct.pack("<Q", buffer.tell()) + buffer.getvalue()
    crc = _CrcThread()
    size = 0
    try:
        with open(path, "xb", buffering=0) as file:

            def write(view: memoryview, owner: Any = None) -> None:
                nonlocal size
                crc.add(view, owner)
                while view:
                    written = file.write(view)
                    assert written is not None  # blocking file
                    view = view[written:]
                    size += written

            write(memoryview(header))
            for view, owner in pickler.blobs:
                write(memoryview(bytes(_pad(size))))
                write(view, owner)
            if fsync:
                os.fdatasync(file.fileno())  # the data and its size: all a reader needs
    finally:
        checksum = crc.finish()  # also on failure: the thread must not outlive the write
    return FileDigest(size, checksum)


def read_verified(path: Path, expected: FileDigest) -> bytearray:
    """The whole file, checked against its size and CRC-32.

    Raises:
        CorruptStateError: missing, unreadable, wrong size or checksum mismatch.
    """
    try:
        with open(path, "rb", buffering=0) as file:
            size = os.fstat(file.fileno()).st_size
            if size != expected.size:
                raise CorruptStateError(
                    f"{path} has {size} bytes, its checkpoint manifest says {expected.size}"
                )
            data = bytearray(size)
            view = memoryview(data)
            crc = _CrcThread()
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


def load_object(data: bytearray, where: str = "<state>") -> Any:
    """The object saved by `save_object`, from the file's verified bytes.

    Large arrays share memory with `data`; small ones are copied.

    Raises:
        CorruptStateError: not this format, or the pickle does not load.
    """
    if len(data) < len(MAGIC) + 8 or bytes(data[: len(MAGIC)]) != MAGIC:
        raise CorruptStateError(f"{where} is not a hetsched state file (bad magic)")
    (pickle_len,) = struct.unpack_from("<Q", data, len(MAGIC))
    start = len(MAGIC) + 8
    if start + pickle_len > len(data):
        raise CorruptStateError(f"{where} is truncated inside its pickle")
    offsets = _Offsets(start + pickle_len, len(data))
    unpickler = _Unpickler(io.BytesIO(memoryview(data)[start : start + pickle_len]), data, offsets)
    try:
        return unpickler.load()
    except CorruptStateError:
        raise
    except Exception as exc:
        raise CorruptStateError(f"{where} does not unpickle: {exc!r}") from exc


class _Offsets:
    """Hands out blob offsets in file order (blobs are laid out in persistent-id order)."""

    def __init__(self, first: int, end: int) -> None:
        self.next = first
        self.end = end
        self.seen: dict[int, int] = {}

    def take(self, index: int, nbytes: int, where: str) -> int:
        if index != len(self.seen):
            raise CorruptStateError(f"{where}: blob {index} out of order")
        offset = self.next + _pad(self.next)
        if offset + nbytes > self.end:
            raise CorruptStateError(f"{where}: blob {index} runs past the end of the file")
        self.seen[index] = offset
        self.next = offset + nbytes
        return offset


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, data: bytearray, offsets: _Offsets) -> None:
        super().__init__(file)
        self._data = data
        self._offsets = offsets
        self._builders: dict[str, Callable[..., Any]] = {
            "tensor": self._tensor,
            "ndarray": self._ndarray,
        }

    def persistent_load(self, pid: Any) -> Any:
        if not isinstance(pid, tuple) or not pid or pid[0] not in self._builders:
            raise CorruptStateError(f"unknown persistent id {pid!r}")
        return self._builders[pid[0]](*pid[1:])

    def _ndarray(self, index: int, dtype_str: str, shape: tuple[int, ...]) -> Any:
        import numpy

        dtype = numpy.dtype(dtype_str)
        count = int(numpy.prod(shape, dtype=numpy.int64))
        offset = self._offsets.take(index, count * dtype.itemsize, "ndarray")
        array = numpy.frombuffer(self._data, dtype=dtype, count=count, offset=offset)
        array = array.reshape(shape)
        return array.copy() if array.nbytes < _SHARE_MIN_BYTES else array

    def _tensor(
        self,
        index: int,
        dtype_name: str,
        shape: tuple[int, ...],
        requires_grad: bool,
        parameter: bool,
    ) -> Any:
        import torch

        dtype = getattr(torch, dtype_name)
        numel = 1
        for dim in shape:
            numel *= dim
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        offset = self._offsets.take(index, nbytes, "tensor")
        if numel == 0:
            tensor = torch.empty(shape, dtype=dtype)
        else:
            tensor = torch.frombuffer(self._data, dtype=dtype, count=numel, offset=offset)
            tensor = tensor.reshape(shape)
            if nbytes < _SHARE_MIN_BYTES:
                tensor = tensor.clone()
        if parameter:
            return torch.nn.Parameter(tensor, requires_grad=requires_grad)
        return tensor.requires_grad_(requires_grad) if requires_grad else tensor
