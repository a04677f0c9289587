"""progress.json, ack.json, placement.json and the GPU type lookup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from wrapper_fakes import FakeClock, make_env

from slurm_hetsched.statefolder import state_folder
from slurm_hetsched.wrapper.files import StateDirError, ensure_state_dir, write_json_atomic
from slurm_hetsched.wrapper.placement import (
    Placement,
    read_placement,
    resolve_gpu_type,
    write_placement,
)
from slurm_hetsched.wrapper.progress import (
    Ack,
    ProgressReporter,
    read_ack,
    resume_requested,
    write_ack,
)

PROGRESS_KEYS = {
    "job_key",
    "job_id",
    "step",
    "total_steps",
    "steps_per_s",
    "gpu_type",
    "num_gpus",
    "node",
    "updated_at",
    "peak_mem_gib",
}


def reporter(tmp_path: Path, clock: FakeClock, every_s: float = 5.0) -> ProgressReporter:
    return ProgressReporter(
        make_env(tmp_path),
        total_steps=1000,
        gpu_type="k80",
        num_gpus=1,
        every_s=every_s,
        window_s=10.0,
        clock=clock.monotonic,
        wall=clock.wall,
    )


def test_progress_file_has_the_design_keys(tmp_path: Path) -> None:
    clock = FakeClock()
    assert reporter(tmp_path, clock).update(0)
    payload = json.loads((tmp_path / "progress.json").read_text())
    assert PROGRESS_KEYS <= set(payload)
    assert payload["job_key"] == "42" and payload["job_id"] == "42" and payload["node"] == "n3"
    assert payload["gpu_type"] == "k80" and payload["num_gpus"] == 1
    assert payload["steps_per_s"] is None, "no rate before it is measured"
    assert payload["updated_at"] == clock.wall() and payload["status"] == "running"
    assert [p.name for p in tmp_path.iterdir()] == ["progress.json"], "no temporary file left"


def test_progress_is_written_every_few_seconds_with_a_windowed_rate(tmp_path: Path) -> None:
    clock = FakeClock()
    progress = reporter(tmp_path, clock, every_s=5.0)
    written = []
    for step in range(1, 101):
        clock.advance(0.1)  # 10 steps/s
        written.append(progress.update(step))
    assert written.count(True) == 2  # at t=0.1 (first) and t=5.1
    payload = json.loads((tmp_path / "progress.json").read_text())
    assert payload["step"] == 51 and payload["steps_per_s"] == pytest.approx(10.0)
    for step in range(101, 201):  # now 2 steps/s; the 10 s window forgets the fast part
        clock.advance(0.5)
        progress.update(step)
    assert progress.steps_per_s() == pytest.approx(2.0)
    progress.reset_window()
    assert progress.steps_per_s() is None
    assert progress.update(200, status="paused", force=True)
    assert json.loads((tmp_path / "progress.json").read_text())["status"] == "paused"


# ----------------------------------------------------------------------------------------------
# peak_mem_gib: PyTorch's peak allocation on the current CUDA device, or null


def fake_torch(*, available: bool = True, initialized: bool = True, peak: object = 0) -> object:
    """A stand-in for an imported torch whose torch.cuda reports what the test says."""

    def max_memory_allocated() -> int:
        if isinstance(peak, Exception):
            raise peak
        return peak  # type: ignore[return-value]

    cuda = types.SimpleNamespace(
        is_available=lambda: available,
        is_initialized=lambda: initialized,
        max_memory_allocated=max_memory_allocated,
    )
    return types.SimpleNamespace(cuda=cuda)


def written_peak(tmp_path: Path) -> object:
    assert reporter(tmp_path, FakeClock()).update(1, force=True), "training goes on regardless"
    return json.loads((tmp_path / "progress.json").read_text())["peak_mem_gib"]


def test_the_peak_is_null_without_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # never imported by the program
    assert written_peak(tmp_path) is None


def test_the_peak_is_null_on_this_machine_with_real_torch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine: the peak is a real figure")
    assert written_peak(tmp_path) is None


def test_the_peak_is_the_allocated_maximum_in_gib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", fake_torch(peak=int(12.5 * 2**30)))
    assert written_peak(tmp_path) == 12.5


@pytest.mark.parametrize(
    "torch",
    [
        fake_torch(available=False, peak=2**30),
        fake_torch(initialized=False, peak=2**30),  # CUDA unused: no context made for it
        fake_torch(peak=0),
        fake_torch(peak=RuntimeError("CUDA error: unspecified launch failure")),
    ],
    ids=["no-cuda", "uninitialised", "nothing-allocated", "driver-error"],
)
def test_the_peak_is_null_when_there_is_none_or_it_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, torch: object
) -> None:
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert written_peak(tmp_path) is None


def test_the_progress_module_does_not_import_torch() -> None:
    code = "import sys, slurm_hetsched.wrapper.progress; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_ack_round_trip(tmp_path: Path) -> None:
    ack = Ack(job_id="42", restart_count=1, step=120, checkpoint="ckpt-120", written_at=5.5)
    write_ack(tmp_path, ack)
    payload = json.loads((tmp_path / "ack.json").read_text())
    assert set(payload) == {"job_id", "restart_count", "step", "checkpoint", "written_at"}
    assert read_ack(tmp_path) == ack
    (tmp_path / "ack.json").write_text('{"job_id": "42"}')
    assert read_ack(tmp_path) is None


def test_placement_round_trip_and_malformed(tmp_path: Path) -> None:
    assert read_placement(tmp_path) is None
    write_placement(tmp_path, Placement("V100", 2, ("n1",), round=7))
    assert read_placement(tmp_path) == Placement("v100", 2, ("n1",), 7)
    (tmp_path / "placement.json").write_text('{"gpu_type": "k80", "nodes": "n[1-3,10]"}')
    assert read_placement(tmp_path) == Placement("k80", None, ("n1", "n2", "n3", "n10"), None)
    (tmp_path / "placement.json").write_text("[1, 2]")
    assert read_placement(tmp_path) is None


def test_placement_nodes_in_slurm_host_list_notation(tmp_path: Path) -> None:
    # The whole list, not one term: a bracket group never swallows the names after it.
    (tmp_path / "placement.json").write_text('{"gpu_type": "v100", "nodes": "n[1-2],gpu7"}')
    placement = read_placement(tmp_path)
    assert placement is not None and placement.nodes == ("n1", "n2", "gpu7")
    (tmp_path / "placement.json").write_text('{"gpu_type": "v100", "nodes": ["gpu[01-03,7]", "x"]}')
    placement = read_placement(tmp_path)
    assert placement is not None and placement.nodes == ("gpu01", "gpu02", "gpu03", "gpu7", "x")


def test_gpu_type_sources_in_order(tmp_path: Path) -> None:
    asked: list[str] = []

    def lookup(node: str) -> dict[str, int]:
        asked.append(node)
        return {"p100": 2}

    # 1. placement.json naming this node
    write_placement(tmp_path, Placement("v100", 1, ("n3",)))
    assert resolve_gpu_type(tmp_path, "n3", in_slurm=True, lookup=lookup)[0] == "v100"
    assert asked == []
    # 2. a stale placement (other nodes): the node's single type from Slurm
    assert resolve_gpu_type(tmp_path, "n2", in_slurm=True, lookup=lookup)[0] == "p100"
    # 3. several types on the node, or no Slurm: unknown
    (tmp_path / "placement.json").unlink()
    mixed = resolve_gpu_type(tmp_path, "n9", in_slurm=True, lookup=lambda n: {"a": 1, "b": 1})
    assert mixed[0] == "unknown"
    assert resolve_gpu_type(tmp_path, "n2", in_slurm=False, lookup=lookup)[0] == "unknown"
    assert resolve_gpu_type(tmp_path, "n2", in_slurm=True, lookup=lambda n: None)[0] == "unknown"


def test_state_dir_is_created_private(tmp_path: Path) -> None:
    folder = ensure_state_dir(tmp_path / "root" / "42")
    assert folder.stat().st_mode & 0o777 == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    assert ensure_state_dir(loose).stat().st_mode & 0o777 == 0o700
    (tmp_path / "file").write_text("x")
    with pytest.raises(StateDirError, match="not a folder"):
        ensure_state_dir(tmp_path / "file")


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a folder away")


@needs_root
def test_a_state_folder_of_another_user_is_refused_even_by_root(tmp_path: Path) -> None:
    """Root's jobs get no exemption: a folder someone made ahead of the job may hold a
    planted checkpoint."""
    uid = os.geteuid()
    planted = tmp_path / "root" / str(uid) / "43"
    planted.mkdir(parents=True)
    os.chown(planted, 4242, 4242)
    with pytest.raises(StateDirError, match="belongs to uid 4242"):
        ensure_state_dir(planted)
    os.chown(planted, uid, -1)
    os.chown(planted.parent, 4242, 4242)
    with pytest.raises(StateDirError, match="belongs to uid 4242"):
        ensure_state_dir(planted)


def test_a_symlinked_state_folder_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    link = tmp_path / "root" / str(os.geteuid()) / "44"
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere)
    with pytest.raises(StateDirError, match="link"):
        ensure_state_dir(link)


def test_the_layout_is_root_uid_key(tmp_path: Path) -> None:
    assert state_folder(tmp_path, 1000, "k") == tmp_path / "1000" / "k"
    folder = ensure_state_dir(state_folder(tmp_path / "r", os.geteuid(), "k"))
    assert folder.parent.stat().st_mode & 0o777 == 0o700


def test_a_resume_request_is_obeyed_only_for_this_run_and_after_the_ack(tmp_path: Path) -> None:
    write_json_atomic(
        tmp_path / "resume_request.json",
        {"job_id": "7", "restart_count": 1, "requested_at": 100.0},
    )
    assert resume_requested(tmp_path, "7", 1, since=90.0)
    assert not resume_requested(tmp_path, "7", 1, since=101.0), "an older call-off"
    assert not resume_requested(tmp_path, "7", 2, since=90.0), "another run"
    assert not resume_requested(tmp_path, "8", 1, since=90.0), "another job"
    assert not resume_requested(tmp_path, None, 1, since=90.0)


def test_a_user_folder_others_could_write_is_tightened(tmp_path: Path) -> None:
    folder = state_folder(tmp_path / "r", os.geteuid(), "k")
    folder.mkdir(parents=True)
    folder.parent.chmod(0o777)
    ensure_state_dir(folder)
    assert folder.parent.stat().st_mode & 0o777 == 0o700
