"""The state file format: exact round trips of tensors and arrays, and its checksum."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import pytest

from slurm_hetsched.wrapper.serialize import (
    CorruptStateError,
    FileDigest,
    UntrustedFileError,
    digest_file,
    load_object,
    open_owned,
    read_verified,
    save_object,
)

# torch is optional (the `torch` extra): without it these tests skip, and under CI fail.
torch = pytest.importorskip("torch")


def roundtrip(obj: object, path: Path) -> object:
    digest = save_object(obj, path)
    return load_object(read_verified(path, digest), str(path))


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    def raw(t: torch.Tensor) -> torch.Tensor:
        return t.contiguous().view(-1).view(torch.uint8)

    return a.dtype == b.dtype and a.shape == b.shape and raw(a).equal(raw(b))


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.complex64,
    ],
)
def test_tensors_round_trip_bit_exactly(tmp_path: Path, dtype: torch.dtype) -> None:
    source = (torch.randn(37, 5) * 100).to(dtype)
    loaded = roundtrip({"t": source}, tmp_path / "s.bin")
    assert same_bits(loaded["t"], source)  # type: ignore[index]


def test_tensor_kinds(tmp_path: Path) -> None:
    big = torch.randn(1 << 21)  # 8 MiB: shares the file buffer instead of being copied
    nan = torch.tensor([float("nan"), -0.0, float("inf")])
    parameter = torch.nn.Parameter(torch.randn(3, 3))
    obj = {
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0, 4),
        "strided": torch.arange(20.0).reshape(4, 5).t(),
        "big": big,
        "nan": nan,
        "param": parameter,
        "grad": torch.ones(2, requires_grad=True),
        "tied": [big, big],
    }
    loaded = roundtrip(obj, tmp_path / "s.bin")
    assert isinstance(loaded, dict)
    for key in ("scalar", "empty", "big", "nan"):
        assert same_bits(loaded[key], obj[key]), key
    assert same_bits(loaded["strided"], obj["strided"].contiguous())
    assert isinstance(loaded["param"], torch.nn.Parameter) and loaded["param"].requires_grad
    assert loaded["grad"].requires_grad
    assert same_bits(loaded["tied"][1], big)


def test_numpy_and_python_values(tmp_path: Path) -> None:
    state = np.random.RandomState(3).get_state()
    obj = {
        "rng": state,
        "array": np.arange(12, dtype=">i4").reshape(3, 4),
        "text": "é",
        "nested": [(1, 2.5, None), {"a": b"bytes"}],
        "objects": np.array([1, "x"], dtype=object),
    }
    loaded = roundtrip(obj, tmp_path / "s.bin")
    assert isinstance(loaded, dict)
    assert loaded["rng"][0] == "MT19937" and np.array_equal(loaded["rng"][1], state[1])
    assert loaded["array"].dtype == np.dtype(">i4")
    assert np.array_equal(loaded["array"], obj["array"])
    assert loaded["nested"] == obj["nested"] and loaded["text"] == "é"
    assert list(loaded["objects"]) == [1, "x"]


def test_digest_is_crc32_of_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "s.bin"
    digest = save_object({"t": torch.randn(1000)}, path)
    data = path.read_bytes()
    assert digest == FileDigest(len(data), zlib.crc32(data)) == digest_file(path)


def test_damage_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "s.bin"
    digest = save_object({"t": torch.randn(1000)}, path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x80
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError, match="checksum mismatch"):
        read_verified(path, digest)
    path.write_bytes(bytes(data[:100]))
    with pytest.raises(CorruptStateError, match="bytes"):
        read_verified(path, digest)
    with pytest.raises(CorruptStateError, match="bad magic"):
        load_object(bytearray(b"x" * 64))


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "s.bin"
    path.write_bytes(b"old")
    with pytest.raises(FileExistsError):
        save_object({"a": 1}, path)


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file to another uid (os.chown)")


def test_a_symlinked_file_is_not_followed(tmp_path: Path) -> None:
    real = tmp_path / "real.bin"
    digest = save_object({"a": 1}, real)
    link = tmp_path / "s.bin"
    link.symlink_to(real)
    with pytest.raises(UntrustedFileError, match="symbolic link"):
        read_verified(link, digest)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "s.bin"
    os.mkfifo(fifo)
    with pytest.raises(UntrustedFileError, match="not a regular file"):
        read_verified(fifo, FileDigest(0, 0))


def test_a_file_of_another_uid_is_refused(tmp_path: Path) -> None:
    needs_root()
    path = tmp_path / "s.bin"
    digest = save_object({"a": 1}, path)
    os.chown(path, 12345, 12345)
    with pytest.raises(UntrustedFileError, match=r"s\.bin belongs to uid 12345.*uid 0"):
        read_verified(path, digest)
    with pytest.raises(UntrustedFileError, match="12345"):
        open_owned(path)
