"""Loading a state file never runs code from it: the allow-list, registration, the checked
builders of tensors and arrays, and the check before a save."""

from __future__ import annotations

import builtins
import collections
import copyreg
import enum
import functools
import logging
import math
import os
import pickle
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from slurm_hetsched.wrapper import (
    CheckpointStore,
    CheckpointWriter,
    UnsafeSaveError,
    UnsafeStateError,
    register_safe_type,
)
from slurm_hetsched.wrapper import safe_unpickle as safe_unpickle_module
from slurm_hetsched.wrapper.checkpoint import CheckpointReader, CheckpointUnsafeError
from slurm_hetsched.wrapper.serialize import (
    MAGIC,
    CorruptStateError,
    digest_file,
    load_object,
    read_verified,
    save_object,
)

# torch is optional (the `torch` extra): without it these tests skip, and under CI fail.
torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, type]:
    """A registry of safe types of this test only."""
    fresh: dict[str, type] = {}
    monkeypatch.setattr(safe_unpickle_module, "_registered", fresh)
    return fresh


# ----------------------------------------------------------------------------- helpers
class Reduce:
    """Pickles as a call of `func(*args)`: what a planted pickle does."""

    def __init__(self, func: Callable[..., Any], *args: Any) -> None:
        self.func = func
        self.args = args

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.func, self.args)


class Pid:
    """Pickles as persistent id `pid` (to craft the entries of tensors and arrays)."""

    def __init__(self, *pid: Any) -> None:
        self.pid = pid


class PidPickler(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        return obj.pid if isinstance(obj, Pid) else None


def pickled(obj: Any) -> bytes:
    import io

    buffer = io.BytesIO()
    PidPickler(buffer, protocol=5).dump(obj)
    return buffer.getvalue()


def ops(obj: Any) -> bytes:
    """The opcodes of `obj` without PROTO and STOP, to splice into a crafted pickle (protocol
    3: no frames, and each piece's memo indexes are used only within the piece)."""
    return pickle.dumps(obj, protocol=3)[2:-1]


def crafted(*pieces: bytes) -> bytes:
    return b"\x80\x03" + b"".join(pieces) + pickle.STOP


def persistent(*pid: Any) -> bytes:
    return ops(pid) + pickle.BINPERSID


def stack_global(module: str, name: str) -> bytes:
    """A protocol-4 pickle of just global `module`.`name` (any name, dotted ones too)."""

    def text(value: str) -> bytes:
        data = value.encode()
        return pickle.SHORT_BINUNICODE + bytes([len(data)]) + data

    return b"\x80\x04" + text(module) + text(name) + pickle.STACK_GLOBAL + pickle.STOP


def plant(path: Path, pickle_bytes: bytes, blobs: bytes = b"") -> None:
    """A correctly framed state file: only the unpickler stands between it and execution."""
    data = MAGIC + struct.pack("<Q", len(pickle_bytes)) + pickle_bytes
    if blobs:
        data += bytes(-len(data) % 64) + blobs
    path.write_bytes(data)


def load_planted(path: Path, pickle_bytes: bytes, blobs: bytes = b"") -> Any:
    plant(path, pickle_bytes, blobs)
    return load_object(read_verified(path, digest_file(path)), str(path))


def roundtrip(obj: Any, path: Path) -> Any:
    digest = save_object(obj, path)
    return load_object(read_verified(path, digest), str(path))


def plant_checkpoint(store: CheckpointStore, step: int, pickle_bytes: bytes) -> None:
    """A committed checkpoint (valid manifest and CRC) holding `pickle_bytes` as state.bin."""

    def write(writer: CheckpointWriter) -> None:
        plant(writer.path("state.bin"), pickle_bytes)

    store.save(step, write)


def load_state(reader: CheckpointReader) -> Any:
    return reader.load_object("state.bin")


# ----------------------------------------------------------------------------- payloads
def attacks(marker: Path) -> list[Reduce]:
    """Planted payloads, each of which would create `marker` (or worse) if it ran."""
    script = f"open({str(marker)!r}, 'w').close()"
    return [
        Reduce(os.system, f"touch {marker}"),
        Reduce(subprocess.check_call, ["touch", str(marker)]),
        Reduce(builtins.exec, script),
        Reduce(builtins.eval, f"exec({script!r})"),
        Reduce(builtins.open, str(marker), "w"),
        Reduce(builtins.getattr, collections.OrderedDict, "fromkeys"),
        Reduce(builtins.__import__, "os"),
        Reduce(functools.partial, os.system, f"touch {marker}"),
        Reduce(copyreg._reconstructor, collections.OrderedDict, dict, {}),
        Reduce(pickle.loads, pickle.dumps(Reduce(os.system, f"touch {marker}"))),
        Reduce(torch.load, str(marker)),
        Reduce(torch._utils._rebuild_tensor_v2, None, 0, (1,), (1,), False, None),
        Reduce(np.load, str(marker), None, True),
    ]


@pytest.mark.parametrize("index", range(13))
def test_a_planted_payload_is_refused_and_never_runs(tmp_path: Path, index: int) -> None:
    marker = tmp_path / "pwned"
    payload = attacks(marker)[index]
    name = f"{payload.func.__module__}.{payload.func.__qualname__}"
    # Nested inside plain data, as it would be in a real state.
    data = pickled({"model": {"w": [1, 2]}, "extras": {"x": payload}})
    with pytest.raises(UnsafeStateError) as caught:
        load_planted(tmp_path / "state.bin", data)
    assert not marker.exists(), "the payload ran"
    assert caught.value.type_name == name
    assert name in str(caught.value) and "register_safe_type" in str(caught.value)
    assert isinstance(caught.value, CorruptStateError)


def test_a_protocol_0_payload_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    data = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()
    with pytest.raises(UnsafeStateError, match=r"os\.system"):
        load_planted(tmp_path / "state.bin", data)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("torch", "float32.__class__"),  # pickle would follow dotted names
        ("collections", "OrderedDict.fromkeys"),
        ("builtins", "int.__subclasses__"),
        ("builtins", "type"),
        ("builtins", "object"),
        ("torch", "load"),
        ("torch", "Tensor"),
        ("torch", "Generator"),
        ("torch.serialization", "_get_layout"),
        ("numpy", "ndarray"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "load"),
        ("os", "system"),
    ],
)
def test_only_exact_allowed_names_are_found(tmp_path: Path, module: str, name: str) -> None:
    with pytest.raises(UnsafeStateError) as caught:
        load_planted(tmp_path / "state.bin", stack_global(module, name))
    assert caught.value.type_name == f"{module}.{name}"


def test_a_planted_checkpoint_alone_is_refused_loudly(tmp_path: Path) -> None:
    """No silent start from scratch: the only checkpoint refused raises, naming the type."""
    marker = tmp_path / "pwned"
    store = CheckpointStore(tmp_path / "state")
    (tmp_path / "state").mkdir()
    plant_checkpoint(store, 10, pickled({"x": Reduce(os.system, f"touch {marker}")}))
    with pytest.raises(CheckpointUnsafeError, match=r"posix\.system|os\.system"):
        store.load_latest(load_state)
    assert not marker.exists()


def test_a_refused_checkpoint_falls_back_with_an_error_naming_the_type(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marker = tmp_path / "pwned"
    folder = tmp_path / "state"
    folder.mkdir()
    store = CheckpointStore(folder)
    store.save(5, lambda writer: writer.save_object("state.bin", {"good": True}))
    plant_checkpoint(store, 10, pickled({"x": Reduce(os.system, f"touch {marker}")}))
    with caplog.at_level(logging.WARNING):
        found = store.load_latest(load_state)
    assert found is not None and found[0].step == 5 and found[1] == {"good": True}
    refused = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert refused and "ckpt-10" in refused[0].getMessage()
    assert "system" in refused[0].getMessage()
    assert not marker.exists()
    with pytest.raises(CheckpointUnsafeError):  # asked for by step: never replaced
        store.load_latest(load_state, step=10)


# ----------------------------------------------------------------------------- BUILD
F8_BLOB = struct.pack("<4d", 1, 2, 3, 4)


def test_setting_the_state_of_a_loaded_array_is_refused(tmp_path: Path) -> None:
    """ndarray.__setstate__ would take a dtype and bytes from the file."""
    state = (1, (4,), np.dtype("<f8"), False, b"\0" * 32)
    data = crafted(persistent("ndarray", 0, "<f8", (4,)), ops(state), pickle.BUILD)
    with pytest.raises(UnsafeStateError, match=r"sets the state of a numpy\.ndarray"):
        load_planted(tmp_path / "state.bin", data, F8_BLOB)


def test_numpys_object_setstate_crash_is_unreachable(tmp_path: Path) -> None:
    """numpy 2.4 crashes on this BUILD (an object dtype and a too short list): refused."""
    state = (1, (4,), np.dtype("O"), False, [1, 2, 3])
    data = crafted(persistent("ndarray", 0, "<f8", (4,)), ops(state), pickle.BUILD)
    with pytest.raises(UnsafeStateError, match=r"state\.bin: .*numpy dtype .* Python objects"):
        load_planted(tmp_path / "state.bin", data, F8_BLOB)


def test_setting_the_state_of_a_loaded_tensor_is_refused(tmp_path: Path) -> None:
    """Tensor.__setstate__ would call set_ with storage, offset, size and stride."""
    state = (None, 0, (100,), (1,))
    data = crafted(persistent("tensor", 0, "float64", (4,), False, False), ops(state), b"b")
    with pytest.raises(UnsafeStateError, match=r"sets the state of a torch\.Tensor"):
        load_planted(tmp_path / "state.bin", data, F8_BLOB)


@pytest.mark.parametrize(
    "state",
    [
        (3, "|", None, ("a",), {"a": (np.dtype("<f8"), 0)}, 8, 1, 16),  # fields
        (3, "|", (np.dtype("<f4"), (2,)), None, None, 8, 4, 0),  # subarray
        (3, "|", None, None, None, 16, 1, 0),  # another size
        (3, "|", None, None, None, 8, 1, 63),  # flags of an object dtype
        (4, "|", None, None, None, 8, 1, 0, ({"k": 1}, None)),  # metadata
        "garbage",
    ],
)
def test_dtype_state_may_set_only_byte_order_and_datetime_unit(tmp_path: Path, state: Any) -> None:
    data = crafted(ops(Reduce(np.dtype, "V8", False, True)), ops(state), pickle.BUILD)
    with pytest.raises(UnsafeStateError, match=r"sets the state of a numpy\.dtypes\.VoidDType"):
        load_planted(tmp_path / "state.bin", data)


def test_attributes_may_be_set_only_as_torch_sets_them(tmp_path: Path) -> None:
    ordered = ops(collections.OrderedDict())
    good = crafted(ordered, ops({"_metadata": {"": {"version": 1}}}), pickle.BUILD)
    loaded = load_planted(tmp_path / "good.bin", good)
    assert loaded == {} and loaded._metadata == {"": {"version": 1}}
    for state in ({"items": list}, {"_metadata": {}, "keys": list}):
        bad = crafted(ordered, ops(state), pickle.BUILD)
        with pytest.raises(UnsafeStateError, match=r"collections\.OrderedDict"):
            load_planted(tmp_path / "bad.bin", bad)


# ----------------------------------------------------------------------------- allow-list
def test_allowed_values_round_trip_exactly(tmp_path: Path) -> None:
    nan = np.frombuffer(struct.pack("<Q", 0x7FF8_0000_DEAD_BEEF), dtype="<f8")[0]
    obj = {
        "nan": nan,
        "python": [1, 2.5, -0.0, 1j, True, None, "é", b"b", bytearray(b"x"), (1, (2,))],
        "sets": [{1, 2}, frozenset({3})],
        "ranges": [slice(1, 9, 2), range(2, 10, 3)],
        "types": [int, float, str, list],
        "collections": [
            collections.OrderedDict(b=1, a=2),
            collections.defaultdict(list, a=[1]),
            collections.deque([1, 2], maxlen=5),
            collections.Counter("abracadabra"),
        ],
        "numpy": [
            np.float64(0.1),
            np.float32(1.5),
            np.float16(-2),
            np.int64(-(2**62)),
            np.uint8(255),
            np.bool_(True),
            np.complex128(1 - 2j),
            np.str_("abc"),
            np.bytes_(b"xy"),
            np.datetime64("2024-02-29T12:00", "m"),
            np.timedelta64(5, "s"),
        ],
        "dtypes": [np.dtype("f4"), np.dtype(">i8"), np.dtype("U3"), np.dtype("M8[D]")],
        "torch": [torch.Size([2, 3]), torch.device("cpu"), torch.device("cuda", 1)],
        "torch_dtypes": [torch.float32, torch.bfloat16, torch.int8, torch.bool],
        "objects": np.array([1, "x", [2]], dtype=object),
    }
    loaded = roundtrip(obj, tmp_path / "s.bin")
    for key in obj:
        if key in ("nan", "objects"):
            continue
        assert loaded[key] == obj[key], key
        assert [type(v) for v in loaded[key]] == [type(v) for v in obj[key]], key
    assert type(loaded["nan"]) is np.float64 and loaded["nan"].tobytes() == nan.tobytes()
    assert loaded["collections"][1].default_factory is list
    assert loaded["collections"][2].maxlen == 5
    assert loaded["objects"].dtype == object and list(loaded["objects"]) == [1, "x", [2]]


def test_a_models_state_dict_keeps_its_metadata(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    state = model.state_dict()
    loaded = roundtrip(state, tmp_path / "s.bin")
    assert type(loaded) is collections.OrderedDict
    assert loaded._metadata == state._metadata  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- registration
@dataclass(frozen=True, slots=True)
class Frozen:
    lr: float
    tags: tuple[str, ...]


@dataclass
class Mutable:
    name: str
    values: list[int] = field(default_factory=list)


class Phase(enum.Enum):
    WARMUP = "warmup"
    MAIN = "main"


class Point(NamedTuple):
    x: int
    y: float


class Unregistered:
    def __init__(self) -> None:
        self.x = 1


def helper() -> None:
    """A function: pickled by name, so never loadable."""


def test_registered_types_round_trip(tmp_path: Path) -> None:
    for cls in (Frozen, Mutable, Phase, Point):
        register_safe_type(cls)
    obj = {
        "frozen": Frozen(0.1, ("a", "b")),
        "mutable": Mutable("m", [1, 2]),
        "phase": Phase.MAIN,
        "point": Point(1, 2.5),
    }
    loaded = roundtrip(obj, tmp_path / "s.bin")
    assert loaded == obj
    assert loaded["phase"] is Phase.MAIN


def test_an_enum_member_pickled_through_getattr_loads_only_if_registered(
    tmp_path: Path, registry: dict[str, type]
) -> None:
    """Some Python 3.11 releases (Debian 12's 3.11.2) pickle an Enum member as
    getattr(cls, name): allowed for members of registered Enums, and nothing else."""
    as_getattr = pickled({"phase": Reduce(builtins.getattr, Phase, "MAIN")})
    with pytest.raises(UnsafeStateError) as caught:
        load_planted(tmp_path / "a.bin", as_getattr)
    assert caught.value.type_name.endswith(".Phase")
    register_safe_type(Phase)
    assert load_planted(tmp_path / "b.bin", as_getattr) == {"phase": Phase.MAIN}
    for name in ("__class__", "_missing_", "mro"):
        with pytest.raises(UnsafeStateError) as caught:
            load_planted(tmp_path / "c.bin", pickled(Reduce(builtins.getattr, Phase, name)))
        assert caught.value.type_name == "builtins.getattr"


def test_register_is_a_decorator_and_checks_its_argument(registry: dict[str, type]) -> None:
    @dataclass
    class Local:
        x: int

    assert register_safe_type(Frozen) is Frozen
    assert registry[f"{Frozen.__module__}.Frozen"] is Frozen
    with pytest.raises(TypeError, match="takes a class"):
        register_safe_type(helper)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="inside a function"):
        register_safe_type(Local)


@pytest.mark.parametrize("cls", [Frozen, Mutable, Phase, Point, Unregistered])
def test_an_unregistered_type_is_refused_at_save_time(tmp_path: Path, cls: type) -> None:
    value = {Frozen: Frozen(1.0, ()), Mutable: Mutable("x"), Phase: Phase.WARMUP}.get(
        cls, Point(1, 2.0) if cls is Point else Unregistered()
    )
    path = tmp_path / "s.bin"
    with pytest.raises(UnsafeSaveError) as caught:
        save_object({"extras": value}, path)
    name = f"{cls.__module__}.{cls.__qualname__}"
    assert caught.value.type_name == name and name in str(caught.value)
    assert "register_safe_type" in str(caught.value)
    assert isinstance(caught.value, pickle.PicklingError)
    assert not path.exists(), "nothing written"


@pytest.mark.parametrize(
    "value",
    [
        helper,
        np.random.default_rng(0),
        np.ma.masked_array([1, 2], mask=[0, 1]),
        torch.Generator(),
        logging.getLogger("x").__class__,
    ],
)
def test_other_unloadable_values_are_refused_at_save_time(tmp_path: Path, value: Any) -> None:
    path = tmp_path / "s.bin"
    with pytest.raises(UnsafeSaveError, match="cannot save"):
        save_object({"extras": value}, path)
    assert not path.exists()


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("kind", ["sparse_coo", "sparse_csr", "meta"])
def test_tensors_that_are_not_dense_fail_at_save_time(tmp_path: Path, kind: str) -> None:
    tensor = {
        "sparse_coo": lambda: torch.eye(3).to_sparse(),
        "sparse_csr": lambda: torch.eye(3).to_sparse_csr(),
        "meta": lambda: torch.empty(3, device="meta"),
    }[kind]()
    path = tmp_path / "s.bin"
    with pytest.raises(UnsafeSaveError, match="not dense"):
        save_object({"t": tensor}, path)
    assert not path.exists()


def test_structured_arrays_with_objects_fail_at_save_time(tmp_path: Path) -> None:
    array = np.zeros(2, dtype=[("a", "f8"), ("b", "O")])
    with pytest.raises(UnsafeSaveError, match="Python-object fields"):
        save_object({"a": array}, tmp_path / "s.bin")


def test_a_type_registered_only_when_saving_is_refused_when_loading(
    tmp_path: Path, registry: dict[str, type]
) -> None:
    register_safe_type(Frozen)
    path = tmp_path / "s.bin"
    digest = save_object({"config": Frozen(0.5, ())}, path)
    registry.clear()  # a later process that forgot to register it
    with pytest.raises(UnsafeStateError, match=r"register_safe_type\(Frozen\)"):
        load_object(read_verified(path, digest), str(path))


def test_a_refused_save_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(1, lambda writer: writer.save_object("state.bin", {"ok": 1}))
    with pytest.raises(UnsafeSaveError):
        store.save(2, lambda writer: writer.save_object("state.bin", {"x": Unregistered()}))
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-1"]


# ----------------------------------------------------------------------------- builders
def tensor_pid(dtype: Any = "float64", shape: Any = (4,), grad: Any = False) -> bytes:
    return pickled(Pid("tensor", 0, dtype, shape, grad, False))


def array_pid(dtype: Any = "<f8", shape: Any = (4,)) -> bytes:
    return pickled(Pid("ndarray", 0, dtype, shape))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (tensor_pid("Tensor"), "bad tensor entry"),
        (tensor_pid("load"), "bad tensor entry"),
        (tensor_pid("float32.__class__"), "bad tensor entry"),
        (tensor_pid(7), "bad tensor entry"),
        (tensor_pid(grad=1), "bad tensor entry"),
        (tensor_pid(shape=(-1,)), "bad shape"),
        (tensor_pid(shape=[4]), "bad shape"),
        (tensor_pid(shape=(4.0,)), "bad shape"),
        (tensor_pid(shape=(True,)), "bad shape"),
        (tensor_pid(shape=(1,) * 65), "bad shape"),
        (tensor_pid(shape=(2**61, 8)), "runs past the end"),  # count*itemsize > 2**63
        (tensor_pid(shape=(2**62, 2**62)), "runs past the end"),
        (tensor_pid(shape=(5,)), "runs past the end"),
        (array_pid("O"), "from raw bytes"),
        (array_pid("|O"), "from raw bytes"),
        (array_pid("f8,O"), "from raw bytes"),
        (array_pid("(2,)O"), "from raw bytes"),
        (array_pid(shape=(-4,)), "bad shape"),
        (array_pid(shape=(2**62, 2**62)), "runs past the end"),
        (array_pid(b"<f8"), "bad array entry"),
        (pickled(Pid("objects", (3,), [1, 2])), "do not match its shape"),
        (pickled(Pid("storage", 0)), "unknown persistent id"),
        (pickled(Pid()), "unknown persistent id"),
    ],
)
def test_crafted_tensor_and_array_entries_fail_cleanly(
    tmp_path: Path, data: bytes, message: str
) -> None:
    with pytest.raises(CorruptStateError, match=message):
        load_planted(tmp_path / "state.bin", data, F8_BLOB)


def test_checked_builders_still_build(tmp_path: Path) -> None:
    data = pickled([Pid("tensor", 0, "float64", (2, 2), True, True), Pid("ndarray", 1, ">i4", ())])
    blobs = F8_BLOB + bytes(32) + struct.pack(">i", 7)
    tensor, array = load_planted(tmp_path / "state.bin", data, blobs)
    assert isinstance(tensor, torch.nn.Parameter) and tensor.tolist() == [[1, 2], [3, 4]]
    assert array.dtype == np.dtype(">i4") and int(array) == 7
    assert math.prod(tensor.shape) == 4
