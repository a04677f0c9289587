"""Unpickling that never runs code from the file: an allow-list of types and of state.

A plain unpickler calls any callable the pickle names, so a checkpoint someone else planted
could run code as the job's user (or root). The pickle part of a state file is therefore read
by pickle's pure-Python unpickler (the C one cannot check BUILD, and numpy's `__setstate__`
crashes on crafted states) with two limits:
- it finds only allow-listed globals (`_ALLOWED`): plain-data builtins, four `collections`
  types, numpy dtypes and scalars (through checking wrappers), `torch.Size`, `torch.device`,
  the torch dtypes, and the classes registered with `register_safe_type`;
- it sets state (BUILD) only on instances of registered classes, on a state dict's
  OrderedDict its `_metadata`, and on numpy dtypes only their byte order and datetime unit.
Anything else raises UnsafeStateError naming the type. Tensors and arrays never come through
here: serialize.py stores them out of band and builds them itself, checking dtype and shape.
See 'Loading checkpoints safely' in docs/job-side.md.
"""

from __future__ import annotations

import collections
import enum
import importlib
import io
import pickle
import sys
from collections.abc import Callable
from functools import cache
from typing import Any, ClassVar, TypeVar

from slurm_hetsched.wrapper.state_errors import UnsafeStateError

_DOCS = "see 'Loading checkpoints safely' in docs/job-side.md"
T = TypeVar("T")


_registered: dict[str, type] = {}


def _name_of(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register_safe_type(cls: type[T]) -> type[T]:
    """Let checkpoints of this process hold instances of `cls`; returns `cls` (a decorator too).

    Loading builds them as pickle does: it may call `cls(*args)` or `cls.__new__(cls, *args)`
    with values from the file, then `__setstate__` or the instance's `__dict__` with its state.
    Register only classes that are safe to build from any data (dataclasses, NamedTuples and
    Enums of plain values), never ones whose constructor or `__setstate__` opens files, runs
    commands or calls what it is given. Register in every process that saves or loads, before
    the job resumes (at import, or with TorchTrainer's `safe_types=`).

    Raises:
        TypeError: `cls` is not a class.
        ValueError: pickle cannot find `cls` by name (it is defined inside a function).
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_safe_type takes a class, not {cls!r}")
    if "<locals>" in cls.__qualname__:
        raise ValueError(f"{_name_of(cls)} is defined inside a function; pickle cannot find it")
    _registered[_name_of(cls)] = cls
    return cls


class _Refused(Exception):
    """Raised by the wrappers below; the unpickler turns it into UnsafeStateError with the file."""

    def __init__(self, message: str, type_name: str) -> None:
        super().__init__(message)
        self.type_name = type_name


def _numpy_dtype(spec: Any, align: Any = False, copy: Any = False) -> Any:
    """`numpy.dtype` as numpy's own pickles call it: from a type string, without objects.

    Always a new dtype, so the BUILD that follows changes no dtype that arrays share.
    """
    import numpy

    if type(spec) is not str or type(align) is not bool or type(copy) is not bool:
        raise _Refused(f"calls numpy.dtype with a {type(spec).__name__}", "numpy.dtype")
    dtype = numpy.dtype(spec, align=align, copy=True)
    if dtype.hasobject:
        raise _Refused(f"holds a numpy dtype {spec!r} that holds Python objects", "numpy.dtype")
    return dtype


def _numpy_scalar(dtype: Any, data: Any) -> Any:
    """numpy's scalar unpickling, only from a dtype without objects and exactly its bytes."""
    import numpy

    if (
        not isinstance(dtype, numpy.dtype)
        or dtype.hasobject
        or type(data) is not bytes
        or len(data) != dtype.itemsize
    ):
        raise _Refused("holds a numpy scalar of a bad dtype or size", "numpy scalar")
    try:
        multiarray = importlib.import_module("numpy._core.multiarray")
    except ModuleNotFoundError:  # numpy 1
        multiarray = importlib.import_module("numpy.core.multiarray")
    return multiarray.scalar(dtype, data)


def _dtype_state_ok(dtype: Any, state: Any) -> bool:
    """Whether BUILD of `state` onto a numpy dtype only sets what numpy's own pickles of plain
    dtypes set: byte order, and the unit of a datetime. Fields, subarrays, size and flags
    stay as they are: with them a dtype could lay Python objects over bytes of the file."""
    if type(state) is not tuple or len(state) not in (8, 9) or state[0] != len(state) - 5:
        return False
    _, order, subarray, names, fields, size, alignment, flags = state[:8]
    plain = (
        order in ("<", ">", "|", "=")
        and subarray is None
        and names is None
        and fields is None
        and size in (-1, dtype.itemsize)
        and alignment in (-1, dtype.alignment)
        and flags == dtype.flags
    )
    if len(state) == 8 or not plain:
        return plain
    meta = state[8]  # (metadata, datetime metadata) of a version 4 state
    return (
        dtype.kind in "mM"
        and type(meta) is tuple
        and len(meta) == 2
        and meta[0] is None
        and type(meta[1]) is tuple
        and len(meta[1]) == 4
        and type(meta[1][0]) is bytes
        and all(type(part) is int for part in meta[1][1:])
    )


def _state_ok(inst: Any, state: Any) -> bool:
    """Whether BUILD may give `inst` (not of a registered class) `state`: the module versions
    torch's state_dict() keeps in its OrderedDict's `_metadata`, or a plain dtype's state."""
    if type(inst) is collections.OrderedDict:
        return type(state) is dict and state.keys() == {"_metadata"}
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(inst, numpy.dtype) and _dtype_state_ok(inst, state)


_PLAIN_TYPES: tuple[type, ...] = (
    int,
    float,
    complex,
    bool,
    str,
    bytes,
    bytearray,
    list,
    tuple,
    dict,
    set,
    frozenset,
    slice,
    range,
    collections.OrderedDict,
    collections.defaultdict,
    collections.deque,
    collections.Counter,
)


def _enum_member(cls: Any, name: Any) -> Any:
    """`getattr(cls, name)`, as some Python 3.11 releases pickle an Enum member, only for a
    member `name` of a registered Enum class `cls`."""
    if (
        isinstance(cls, type)
        and issubclass(cls, enum.Enum)
        and _registered.get(_name_of(cls)) is cls
        and type(name) is str
        and name in cls.__members__
    ):
        return cls[name]
    raise _Refused(
        "calls builtins.getattr, which loading allows only for a member of an Enum registered "
        "with slurm_hetsched.wrapper.register_safe_type",
        "builtins.getattr",
    )


# Global name -> what the unpickler gets for it. Each is safe to call with any data from the
# file. None stands, True/False and the containers have opcodes of their own; the torch names
# are resolved in `allowed_global`.
_ALLOWED: dict[str, Any] = {_name_of(cls): cls for cls in _PLAIN_TYPES} | {
    "builtins.getattr": _enum_member,
    "numpy.dtype": _numpy_dtype,
    "numpy._core.multiarray.scalar": _numpy_scalar,  # numpy 2
    "numpy.core.multiarray.scalar": _numpy_scalar,  # numpy 1
}


@cache
def torch_globals() -> dict[str, Any]:
    """torch.Size, torch.device and the dtypes (torch.float32, ...), by name in module torch."""
    import torch

    names = {name: value for name, value in vars(torch).items() if isinstance(value, torch.dtype)}
    return names | {"Size": torch.Size, "device": torch.device}


def allowed_global(module: str, name: str) -> Any | None:
    """What the unpickler may get for global `module`.`name`, or None (exact names only: no
    dotted attribute paths, which pickle would otherwise follow)."""
    key = f"{module}.{name}"
    found = _registered.get(key)
    if found is None:
        found = _ALLOWED.get(key)
    if found is None and module == "torch":
        found = torch_globals().get(name)
    return found


def _refusal(where: str, type_name: str, what: str) -> UnsafeStateError:
    short = type_name.rpartition(".")[2]
    return UnsafeStateError(
        f"{where}: the state {what} {type_name}, which loading a checkpoint does not allow "
        f"(unpickling it could run code from the file). If {type_name} is a class of yours "
        "that is safe to build from any data (a dataclass, NamedTuple or Enum of plain "
        "values), register it in every process that saves or loads it: "
        f"slurm_hetsched.wrapper.register_safe_type({short}); otherwise save plain data "
        f"instead (e.g. its state_dict()); {_DOCS}",
        type_name,
    )


class SafeUnpickler(pickle._Unpickler):
    """pickle's pure-Python unpickler limited as the module docstring says."""

    dispatch: ClassVar[dict[int, Callable[..., None]]] = dict(pickle._Unpickler.dispatch)
    stack: list[Any]  # pickle's working stack (set by load)

    def __init__(self, file: io.BytesIO, where: str) -> None:
        super().__init__(file)
        self._where = where

    def load(self) -> Any:
        try:
            return super().load()
        except _Refused as exc:
            raise UnsafeStateError(f"{self._where}: the state {exc}", exc.type_name) from None

    def find_class(self, module: str, name: str) -> Any:
        found = allowed_global(module, name)
        if found is None:
            raise _refusal(self._where, f"{module}.{name}", "refers to")
        return found

    def load_build(self) -> None:
        """BUILD: set the state of stack[-2] to stack[-1], if its type may have it set."""
        inst, state = self.stack[-2:]
        cls = type(inst)
        if _registered.get(_name_of(cls)) is not cls and not _state_ok(inst, state):
            raise _refusal(self._where, _name_of(cls), "sets the state of a")
        pickle._Unpickler.load_build(self)  # type: ignore[attr-defined]

    dispatch[pickle.BUILD[0]] = load_build
