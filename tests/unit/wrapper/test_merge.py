"""The merge helper of a forked job (`python -m slurm_hetsched.wrapper.merge`): the weighted
average against the test's own arithmetic, and every refusal (exit 2, nothing loaded)."""

from __future__ import annotations

import json
import os
import pickle
import stat
import struct
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from fork_helpers import load_merged, plant, trainer_state, two_copies  # noqa: E402

from slurm_hetsched.wrapper import merge  # noqa: E402
from slurm_hetsched.wrapper.checkpoint import (  # noqa: E402
    CheckpointReader,
    CheckpointStore,
    CheckpointWriter,
)
from slurm_hetsched.wrapper.serialize import MAGIC  # noqa: E402

EUID = os.geteuid()
needs_root = pytest.mark.skipif(EUID != 0, reason="needs root to give a folder to another uid")


def run(key: Path, out_step: int, *copies: str, capsys: Any, **kwargs: Any) -> tuple[int, dict]:  # type: ignore[type-arg]
    argv = ["--key-dir", str(key), "--out-step", str(out_step), "--allow-root"]
    for item in copies:
        argv += ["--copy", item]
    status = merge.main(argv, **kwargs)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1, "one JSON line on stdout"
    return status, json.loads(lines[0])


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The checkpoint folders whose state was loaded."""
    seen: list[Path] = []
    original = CheckpointReader.load_object

    def spy(self: CheckpointReader, name: str) -> Any:
        seen.append(self.folder)
        return original(self, name)

    monkeypatch.setattr(CheckpointReader, "load_object", spy)
    return seen


def test_the_merge_is_the_step_weighted_average(tmp_path: Path, capsys: Any) -> None:
    key = tmp_path / "42"
    status, out = run(key, 140, *two_copies(key), capsys=capsys)
    assert status == 0
    assert out["merged"] == "merged/ckpt-140" and out["step"] == 140 and out["copies"] == 2
    assert isinstance(out["seconds"], float)
    merged = load_merged(key, 140)
    # 30 and 10 steps: weights 3/4 and 1/4.
    assert merged["model"]["w"].tolist() == [1.0 * 0.75 + 4.0 * 0.25, 2.0 * 0.75 + 8.0 * 0.25]
    assert merged["model"]["b"].tolist() == [10.0 * 0.75 + 40.0 * 0.25]
    assert merged["model"]["count"].item() == 1, "a counter: from the copy with most steps"
    momentum = merged["optimizer"]["state"]
    assert momentum[0]["momentum_buffer"].tolist() == [0.5 * 0.75 + 1.5 * 0.25, -0.75 + 0.75]
    assert momentum[1]["momentum_buffer"].tolist() == [5.0 * 0.75 + 15.0 * 0.25]
    assert merged["optimizer"]["param_groups"][0]["lr"] == 0.1, "from the most-steps copy"
    assert merged["lr_scheduler"] == {"last_epoch": 7} and merged["extras"] == {"tag": "a"}
    assert merged["rng"] == [{"tag": "a"}]
    assert merged["data"] == {"epoch": 2, "batch_in_epoch": 6}, "the range that ends last"
    assert merged["step"] == 140 and merged["model"]["w"].dtype == torch.float32
    assert stat.S_IMODE(os.stat(key / "merged").st_mode) == 0o700
    assert not [p for p in (key / "merged").iterdir() if p.name.startswith(".")]


def test_checkpoints_may_be_given_as_absolute_paths_in_the_key_folder(
    tmp_path: Path, capsys: Any
) -> None:
    key = tmp_path / "42"
    a, b = two_copies(key)
    absolute = [f"{key}/{a}", f"{key}/{b}"]
    status, out = run(key, 140, *absolute, capsys=capsys)
    assert status == 0 and out["copies"] == 2
    status, out = run(key, 150, f"{tmp_path}/other/ckpt-130:30:30", capsys=capsys)
    assert status == 2 and "CHECKPOINT" in out["error"]


def test_adam_moments_are_averaged_and_its_step_count_taken(tmp_path: Path, capsys: Any) -> None:
    def adam(step: float, m: float, v: float) -> dict[str, Any]:
        entry = {"step": torch.tensor(float(step)), "exp_avg": torch.tensor([float(m)]),
                 "exp_avg_sq": torch.tensor([float(v)])}  # fmt: skip
        return {"state": {0: entry, 1: dict(entry)}, "param_groups": [{"params": [0, 1]}]}

    key = tmp_path / "42"
    plant(key, 5, trainer_state([1.0], [0.0], tag="a", data=(0, 5), optimizer=adam(5, 1, 2)))
    plant(key / "copy-2", 15, trainer_state([2.0], [0.0], tag="b", data=(0, 9),
                                            optimizer=adam(15, 3, 6)))  # fmt: skip
    status, _ = run(key, 20, "ckpt-5:5:5", "copy-2/ckpt-15:15:20", capsys=capsys)
    assert status == 0
    state = load_merged(key, 20)["optimizer"]["state"][0]
    assert state["exp_avg"].tolist() == [1 * 0.25 + 3 * 0.75]
    assert state["exp_avg_sq"].tolist() == [2 * 0.25 + 6 * 0.75]
    assert state["step"].item() == 15.0


def test_a_copy_of_no_steps_adds_nothing_and_is_not_read(
    tmp_path: Path, capsys: Any, loads: list[Path]
) -> None:
    key = tmp_path / "42"
    a, _ = two_copies(key)
    status, out = run(key, 130, a, "copy-1/ckpt-110:0:0", capsys=capsys)
    assert status == 0 and out["copies"] == 1
    assert load_merged(key, 130)["model"]["w"].tolist() == [1.0, 2.0]
    assert key / "copy-1" / "ckpt-110" not in loads


def test_no_copy_with_steps_is_an_error(tmp_path: Path, capsys: Any) -> None:
    key = tmp_path / "42"
    two_copies(key)
    status, out = run(key, 130, "ckpt-130:0:0", "copy-1/ckpt-110:0:0", capsys=capsys)
    assert status == 2 and "no copy trained" in out["error"]
    assert not (key / "merged" / "ckpt-130").exists()


def test_the_last_two_merged_checkpoints_are_kept(tmp_path: Path, capsys: Any) -> None:
    key = tmp_path / "42"
    copies = two_copies(key)
    for step in (140, 150, 160):
        assert run(key, step, *copies, capsys=capsys)[0] == 0
    assert sorted(p.name for p in (key / "merged").iterdir()) == ["ckpt-150", "ckpt-160"]


def test_a_symlink_in_place_of_a_copys_checkpoint_is_refused_never_loaded(
    tmp_path: Path, capsys: Any, loads: list[Path]
) -> None:
    key = tmp_path / "42"
    a, b = two_copies(key)
    elsewhere = tmp_path / "elsewhere"
    plant(elsewhere, 110, trainer_state([9.0, 9.0], [9.0, 9.0], tag="x", data=(0, 0)))
    target = key / "copy-1" / "ckpt-110"
    target.rename(key / "copy-1" / "moved")
    target.symlink_to(elsewhere / "ckpt-110")
    status, out = run(key, 140, a, b, capsys=capsys)
    assert status == 2 and out["copy"] == "copy-1/ckpt-110" and "symbolic link" in out["error"]
    assert not any(str(p).startswith(str(elsewhere)) for p in loads)
    assert not (key / "merged" / "ckpt-140").exists()


def test_a_symlink_in_place_of_a_copys_folder_is_refused(tmp_path: Path, capsys: Any) -> None:
    key = tmp_path / "42"
    a, b = two_copies(key)
    (key / "copy-1").rename(tmp_path / "copy-1-real")
    (key / "copy-1").symlink_to(tmp_path / "copy-1-real")
    status, out = run(key, 140, a, b, capsys=capsys)
    assert status == 2 and out["copy"] == "copy-1/ckpt-110" and "symbolic link" in out["error"]


def test_a_symlink_in_place_of_merged_is_refused(tmp_path: Path, capsys: Any) -> None:
    key = tmp_path / "42"
    copies = two_copies(key)
    (tmp_path / "target").mkdir()
    (key / "merged").symlink_to(tmp_path / "target")
    status, out = run(key, 140, *copies, capsys=capsys)
    assert status == 2 and "merged folder" in out["error"] and "symbolic link" in out["error"]
    assert list((tmp_path / "target").iterdir()) == []


@needs_root
def test_a_copys_checkpoint_of_another_uid_is_refused(
    tmp_path: Path, capsys: Any, loads: list[Path]
) -> None:
    key = tmp_path / "42"
    a, b = two_copies(key)
    os.chown(key / "copy-1" / "ckpt-110", 12345, 12345)
    status, out = run(key, 140, a, b, capsys=capsys)
    assert status == 2 and out["copy"] == "copy-1/ckpt-110" and "uid 12345" in out["error"]
    assert key / "copy-1" / "ckpt-110" not in loads


@needs_root
def test_a_copys_state_file_of_another_uid_is_refused(tmp_path: Path, capsys: Any) -> None:
    key = tmp_path / "42"
    a, b = two_copies(key)
    os.chown(key / "copy-1" / "ckpt-110" / "state.bin", 12345, 12345)
    status, out = run(key, 140, a, b, capsys=capsys)
    assert status == 2 and out["copy"] == "copy-1/ckpt-110" and "uid 12345" in out["error"]


def test_folders_of_another_uid_are_refused(tmp_path: Path, capsys: Any) -> None:
    # Without root: the helper told to expect another uid sees the job's folders as planted.
    key = tmp_path / "42"
    status, out = run(key, 140, *two_copies(key), capsys=capsys, uid=EUID + 1)
    assert status == 2 and f"uid {EUID}" in out["error"]


def test_an_uncommitted_checkpoint_is_refused(tmp_path: Path, capsys: Any) -> None:
    key = tmp_path / "42"
    a, b = two_copies(key)
    (key / "copy-1" / "ckpt-110" / "COMMITTED").unlink()
    status, out = run(key, 140, a, b, capsys=capsys)
    assert status == 2 and "not committed" in out["error"]


def test_copies_of_different_models_are_refused(tmp_path: Path, capsys: Any) -> None:
    key = tmp_path / "42"
    plant(key, 10, trainer_state([1.0, 2.0], [0.0, 0.0], tag="a", data=(0, 1)))
    plant(key / "copy-1", 10, trainer_state([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], tag="a",
                                            data=(0, 1)))  # fmt: skip
    status, out = run(key, 20, "ckpt-10:10:10", "copy-1/ckpt-10:10:20", capsys=capsys)
    assert status == 2 and "cannot be averaged" in out["error"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--copy", "ckpt-1:1"],
        ["--copy", "../ckpt-1:1:1"],
        ["--copy", "copy-1/../ckpt-1:1:1"],
        ["--copy", "/abs/ckpt-1:1:1"],
        ["--copy", "merged/ckpt-1:1:1"],
        ["--copy", "copy-1/ckpt-1:1:x"],
        ["--copy", "ckpt-1:-1:1"],
        ["--copy", "ckpt-1:1:1", "--copy", "ckpt-1:2:2"],
    ],
)
def test_bad_arguments_are_refused(tmp_path: Path, capsys: Any, argv: list[str]) -> None:
    full = ["--key-dir", str(tmp_path), "--out-step", "5", "--allow-root", *argv]
    assert merge.main(full) == 2
    assert "error" in json.loads(capsys.readouterr().out)


def test_the_helper_refuses_to_run_as_root_without_allow_root(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch, loads: list[Path]
) -> None:
    key = tmp_path / "42"
    copies = two_copies(key)
    monkeypatch.setattr(merge.os, "geteuid", lambda: 0)
    argv = ["--key-dir", str(key), "--out-step", "140"]
    for item in copies:
        argv += ["--copy", item]
    assert merge.main(argv) == 2
    out = json.loads(capsys.readouterr().out)
    assert "root" in out["error"] and "--allow-root" in out["error"]
    assert loads == [] and not (key / "merged").exists()


class _Run:
    """Pickles as a call of os.system: what a planted pickle would do."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


def test_a_copy_checkpoint_whose_pickle_runs_code_is_refused_and_nothing_runs(
    tmp_path: Path, capsys: Any
) -> None:
    key = tmp_path / "42"
    a, _ = two_copies(key)
    marker = tmp_path / "ran"
    payload = pickle.dumps({"format": 1, "model": _Run(f"touch {marker}")}, protocol=4)

    def write(writer: CheckpointWriter) -> None:
        framed = MAGIC + struct.pack("<Q", len(payload)) + payload
        writer.path("state.bin").write_bytes(framed)

    (key / "copy-3").mkdir(mode=0o700)
    CheckpointStore(key / "copy-3").save(120, write)
    status, out = run(key, 150, a, "copy-3/ckpt-120:20:50", capsys=capsys)
    assert status == 2 and out["copy"] == "copy-3/ckpt-120" and "system" in out["error"]
    assert not marker.exists()
