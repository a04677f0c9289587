"""One Python object to one file and back, fast, with a CRC-32 of the whole file.

The object is pickled with its torch tensors and numpy arrays taken out (pickle's persistent
ids, as `torch.save` does); their bytes follow the pickle, each aligned to 64 bytes, written
straight from the tensors' memory. The checksum is computed on a second thread while the
bytes go to disk, so a checkpoint writes at close to the disk's raw bandwidth (torch.save
spends about as long on its own CRC as on the write; benchmarks/checkpoint.py measures both).

File layout: MAGIC (16 bytes) | pickle length (u64 LE) | pickle | pad | blob 0 | pad | blob 1 ...

Loading never runs code from the file, whoever wrote it: the pickle is read by the
allow-listing unpickler of safe_unpickle.py, and tensors and arrays come only from this
module's builders, which check dtype, shape and size against the file. `save_object` runs the
same unpickler over the pickle before it writes, so a job never writes a file it could not
load. Files are read and checked by checked_files.py (re-exported here): only regular files
(not symlinks) of the process's effective uid, root included, so a file planted by another
user is refused (UntrustedFileError), and only bytes that match their size and CRC-32.

This module neither imports torch nor numpy; it uses them only when they are already loaded
(saving) or when a file holds their arrays (loading).
"""

from __future__ import annotations

import io
import math
import os
import pickle
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurm_hetsched.wrapper.checked_files import (
    CrcThread,
    FileDigest,
    digest_file,
    open_owned,
    read_verified,
)
from slurm_hetsched.wrapper.safe_unpickle import SafeUnpickler, register_safe_type, torch_globals
from slurm_hetsched.wrapper.state_errors import (
    CorruptStateError,
    UnsafeSaveError,
    UnsafeStateError,
    UntrustedFileError,
)

__all__ = [
    "MAGIC",
    "CorruptStateError",
    "FileDigest",
    "UnsafeSaveError",
    "UnsafeStateError",
    "UntrustedFileError",
    "digest_file",
    "load_object",
    "open_owned",
    "read_verified",
    "register_safe_type",
    "save_object",
]

MAGIC = b"HETSCHED-STATE01"
_ALIGN = 64
_SHARE_MIN_BYTES = 4 << 20  # smaller loaded arrays are copied so they do not pin the file buffer
_MAX_DIMS = 64  # numpy's limit; a longer shape in a file is damage or an attack


def _pad(offset: int) -> int:
    return -offset % _ALIGN


def _as_bytes_view(array: Any) -> memoryview:
    """A flat byte view of a contiguous numpy array (also used for tensors via .numpy())."""
    return memoryview(array).cast("B")


# ----------------------------------------------------------------------------- saving
class _Pickler(pickle.Pickler):
    """Pickles an object, setting its dense torch tensors and numpy arrays aside as blobs."""

    def __init__(self, file: io.BytesIO, where: str) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.blobs: list[tuple[memoryview, Any]] = []
        self.sources: list[Any] = []  # the object of each blob, for the load check
        self._where = where
        self._torch = sys.modules.get("torch")
        self._numpy = sys.modules.get("numpy")

    def persistent_id(self, obj: Any) -> Any:
        torch = self._torch
        if torch is not None and isinstance(obj, torch.Tensor):
            return self._tensor_id(torch, obj)
        numpy = self._numpy
        if numpy is not None and type(obj) is numpy.ndarray:
            if obj.dtype == object:
                # Items are pickled (and checked) like any value; never as raw pointers.
                return ("objects", obj.shape, list(obj.reshape(-1)))
            if obj.dtype.hasobject:
                raise UnsafeSaveError(
                    f"cannot save {self._where}: a structured array with Python-object fields "
                    f"({obj.dtype}) cannot be loaded safely; save its fields separately",
                    "numpy.ndarray",
                )
            array = numpy.ascontiguousarray(obj)
            self._add(_as_bytes_view(array.reshape(-1).view(numpy.uint8)), array, obj)
            return ("ndarray", len(self.blobs) - 1, array.dtype.str, array.shape)
        return None

    def _add(self, view: memoryview, owner: Any, source: Any) -> None:
        self.blobs.append((view, owner))
        self.sources.append(source)

    def _tensor_id(self, torch: Any, tensor: Any) -> Any:
        if tensor.layout != torch.strided or tensor.is_quantized or tensor.device.type == "meta":
            kind = "quantized" if tensor.is_quantized else f"{tensor.layout}, {tensor.device}"
            # Their plain pickles call torch._utils._rebuild_*, which loading refuses.
            raise UnsafeSaveError(
                f"cannot save {self._where}: it holds a tensor that is not dense ({kind}); only "
                "dense tensors load safely: convert it (e.g. .to_dense(), .dequantize()) or "
                "leave it out of the checkpoint",
                "torch.Tensor",
            )
        data = tensor.detach().resolve_conj().resolve_neg().cpu().contiguous()
        if data.numel():
            view = _as_bytes_view(data.reshape(-1).view(torch.uint8).numpy())
        else:
            view = memoryview(b"")
        self._add(view, data, tensor)
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

    The pickle is first loaded back as `load_object` would (tensors and arrays are not copied
    for that), so nothing is written that loading would refuse.

    Returns:
        the size and CRC-32 of the file as written.

    Raises:
        FileExistsError: `path` exists (a checkpoint file is never overwritten).
        UnsafeSaveError: `obj` holds a type that loading refuses (the message names it), or a
            tensor that is not dense; nothing was written.
        pickle.PicklingError / TypeError: something in `obj` cannot be pickled or loaded back.
    """
    buffer = io.BytesIO()
    pickler = _Pickler(buffer, str(path))
    pickler.dump(obj)
    pickled = buffer.getvalue()
    _check_loadable(pickled, pickler.sources, str(path))
    header = MAGIC + struct.pack("<Q", len(pickled)) + pickled
    crc = CrcThread()
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


def _check_loadable(pickled: bytes, sources: list[Any], where: str) -> None:
    """Load `pickled` with the loading rules, its tensors and arrays being `sources`."""
    try:
        _CheckUnpickler(io.BytesIO(pickled), sources, where).load()
    except UnsafeStateError as exc:
        raise UnsafeSaveError(f"cannot save {exc}; nothing was written", exc.type_name) from None
    except Exception as exc:
        raise pickle.PicklingError(f"cannot save {where}: it would not load: {exc!r}") from exc


def load_object(data: bytearray, where: str = "<state>") -> Any:
    """The object saved by `save_object`, from the file's verified bytes.

    Large arrays share memory with `data`; small ones are copied.

    Raises:
        UnsafeStateError: the pickle needs a type that loading does not allow (named).
        CorruptStateError: not this format, or the pickle does not load.
    """
    if len(data) < len(MAGIC) + 8 or bytes(data[: len(MAGIC)]) != MAGIC:
        raise CorruptStateError(f"{where} is not a hetsched state file (bad magic)")
    (pickle_len,) = struct.unpack_from("<Q", data, len(MAGIC))
    start = len(MAGIC) + 8
    if start + pickle_len > len(data):
        raise CorruptStateError(f"{where} is truncated inside its pickle")
    offsets = _Offsets(start + pickle_len, len(data))
    pickled = io.BytesIO(memoryview(data)[start : start + pickle_len])
    try:
        return _Unpickler(pickled, data, offsets, where).load()
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


def _element_count(shape: Any, where: str) -> int:
    """The number of elements of a shape from a file: a tuple of non-negative ints."""
    if (
        type(shape) is not tuple
        or len(shape) > _MAX_DIMS
        or any(type(dim) is not int or dim < 0 for dim in shape)
    ):
        raise CorruptStateError(f"{where}: bad shape (not a tuple of non-negative ints)")
    return math.prod(shape)  # a Python int: no overflow; the caller bounds it by the file


def _object_array(shape: Any, items: Any, where: str) -> Any:
    """An object array from its items (each already unpickled under the same rules)."""
    import numpy

    count = _element_count(shape, where)
    if type(items) is not list or len(items) != count:
        raise CorruptStateError(f"{where}: object array items do not match its shape")
    array = numpy.empty(count, dtype=object)
    for index, item in enumerate(items):  # one by one: numpy would unpack nested sequences
        array[index] = item
    return array.reshape(shape)


class _Unpickler(SafeUnpickler):
    """Loads a state file: tensors and arrays are built from the file's blobs."""

    def __init__(self, file: io.BytesIO, data: bytearray, offsets: _Offsets, where: str) -> None:
        super().__init__(file, where)
        self._data = data
        self._offsets = offsets
        self._builders: dict[str, Callable[..., Any]] = {
            "tensor": self._tensor,
            "ndarray": self._ndarray,
            "objects": self._objects,
        }

    def persistent_load(self, pid: Any) -> Any:
        if type(pid) is tuple and pid and type(pid[0]) is str and pid[0] in self._builders:
            return self._builders[pid[0]](*pid[1:])
        raise CorruptStateError(f"{self._where}: unknown persistent id")

    def _ndarray(self, index: Any, dtype_str: Any, shape: Any) -> Any:
        import numpy

        if type(index) is not int or type(dtype_str) is not str:
            raise CorruptStateError(f"{self._where}: bad array entry")
        dtype = numpy.dtype(dtype_str)
        if dtype.hasobject:  # its bytes would be taken for pointers
            raise CorruptStateError(f"{self._where}: array of dtype {dtype} from raw bytes")
        count = _element_count(shape, self._where)
        nbytes = count * dtype.itemsize
        offset = self._offsets.take(index, nbytes, self._where)
        if nbytes == 0:
            return numpy.empty(shape, dtype=dtype)
        array = numpy.frombuffer(self._data, dtype=dtype, count=count, offset=offset)
        array = array.reshape(shape)
        return array.copy() if nbytes < _SHARE_MIN_BYTES else array

    def _objects(self, shape: Any, items: Any) -> Any:
        return _object_array(shape, items, self._where)

    def _tensor(
        self, index: Any, dtype_name: Any, shape: Any, requires_grad: Any, parameter: Any
    ) -> Any:
        import torch

        dtype = torch_globals().get(dtype_name) if type(dtype_name) is str else None
        if (
            type(index) is not int
            or not isinstance(dtype, torch.dtype)
            or type(requires_grad) is not bool
            or type(parameter) is not bool
        ):
            raise CorruptStateError(f"{self._where}: bad tensor entry")
        numel = _element_count(shape, self._where)
        nbytes = numel * dtype.itemsize
        offset = self._offsets.take(index, nbytes, self._where)
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


class _CheckUnpickler(SafeUnpickler):
    """Loads a pickle before it is written: tensors and arrays are the objects being saved."""

    def __init__(self, file: io.BytesIO, sources: list[Any], where: str) -> None:
        super().__init__(file, where)
        self._sources = sources

    def persistent_load(self, pid: Any) -> Any:
        if pid[0] == "objects":
            return _object_array(pid[1], pid[2], self._where)
        return self._sources[pid[1]]
