"""Benchmark of the job-side wrapper: checkpoint speed against the disk, and move latencies.

Prints tables, asserts nothing:
1. checkpoint write and load time for 100 MB and 1 GB of state (float32 tensors), against the
   raw write bandwidth of the same disk measured in the same run (the same bytes written
   with os.write + fdatasync, and copied by `dd conv=fdatasync`), with torch.save for
   comparison; loads are timed cold (the files' pages evicted) and warm;
2. signal-to-ack latency in-process (signal -> next step boundary -> checkpoint -> ack.json);
3. with SLURM_CONF set (a dev cluster up): the template job moved between GPU types as the
   controller does it, timing signal -> ack, ack -> RUNNING on the other node (Slurm), and
   ack -> training again (progress.json of the next run).

Targets (issue 6): checkpoint writes at >= 80% of raw disk bandwidth; ack to running again
on another node < 15 s.

    python benchmarks/checkpoint.py [--sizes-mb 100,1000] [--repeats 3] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from slurm_hetsched.wrapper import CheckpointReader, CheckpointStore, CheckpointWriter, JobSession
from slurm_hetsched.wrapper.env import JobEnvironment
from slurm_hetsched.wrapper.files import state_folder
from slurm_hetsched.wrapper.progress import read_ack, read_progress
from slurm_hetsched.wrapper.session import Terminated

REPO = Path(__file__).resolve().parent.parent
TENSORS_PER_STATE = 10


def make_state(size_bytes: int) -> dict[str, torch.Tensor]:
    """`size_bytes` of float32 tensors, like a model's and optimizer's state."""
    per = size_bytes // 4 // TENSORS_PER_STATE
    generator = torch.Generator().manual_seed(0)
    return {f"layer{i}": torch.randn(per, generator=generator) for i in range(TENSORS_PER_STATE)}


def state_bytes(state: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


def evict(path: Path) -> None:
    """Drop `path`'s pages from the page cache (this file only), so a read is cold."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


# ----------------------------------------------------------------------------- disk
def raw_write(folder: Path, state: dict[str, torch.Tensor]) -> float:
    """Seconds to write the state's bytes with os.write, then fdatasync (no format, no CRC)."""
    path = folder / "raw.bin"

    def write() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for tensor in state.values():
                view = memoryview(tensor.numpy()).cast("B")
                while view:
                    view = view[os.write(fd, view) :]
            os.fdatasync(fd)
        finally:
            os.close(fd)

    seconds = timed(write)
    path.unlink()
    return seconds


def dd_write(folder: Path, source: Path) -> float | None:
    """Seconds for `dd bs=4M conv=fdatasync` copying `source` (the same bytes, cached), or None.

    Not from /dev/zero: a virtual disk may store zeros faster than real data.
    """
    if shutil.which("dd") is None:
        return None
    path = folder / "dd.bin"
    argv = ["dd", f"if={source}", f"of={path}", "bs=4M", "conv=fdatasync"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    path.unlink(missing_ok=True)
    match = re.search(r"copied, ([0-9.]+) s", done.stderr)
    if done.returncode != 0 or not match:
        return None
    return float(match.group(1))


def write_source(folder: Path, state: dict[str, torch.Tensor]) -> Path:
    """The state's bytes in a file (left in the page cache) for dd to copy."""
    path = folder / "source.bin"
    with open(path, "wb") as file:
        for tensor in state.values():
            file.write(memoryview(tensor.numpy()).cast("B"))
    return path


def torch_save(folder: Path, state: dict[str, torch.Tensor]) -> float:
    """Seconds for torch.save to a path plus fsync (what most training scripts do)."""
    path = folder / "torch.pt"

    def save() -> None:
        torch.save(state, path)
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)

    seconds = timed(save)
    path.unlink()
    return seconds


def checkpoint_write(store: CheckpointStore, step: int, state: dict[str, torch.Tensor]) -> float:
    def write(writer: CheckpointWriter) -> None:
        writer.save_object("state.bin", {"model": state, "step": step})

    return timed(lambda: store.save(step, write))


def checkpoint_load(store: CheckpointStore, step: int) -> float:
    def load(reader: CheckpointReader) -> None:
        reader.load_object("state.bin")

    return timed(lambda: store.load_latest(load, step=step))


def disk_table(folder: Path, sizes_mb: list[int], repeats: int) -> list[list[str]]:
    rows = [
        [
            "state",
            "raw os.write",
            "dd",
            "checkpoint write",
            "vs raw*",
            "torch.save",
            "load cold",
            "load warm",
        ]
    ]
    store = CheckpointStore(folder, keep=1000)
    step = 0
    for size_mb in sizes_mb:
        state = make_state(size_mb * 1_000_000)
        size = state_bytes(state)
        source = write_source(folder, state)
        raw, dd, ckpt, tsave, cold, warm = [], [], [], [], [], []
        for _ in range(repeats):  # interleaved, so drifts of the disk hit all alike
            raw.append(raw_write(folder, state))
            dd_s = dd_write(folder, source)
            if dd_s is not None:
                dd.append(dd_s)
            step += 1
            ckpt.append(checkpoint_write(store, step, state))
            tsave.append(torch_save(folder, state))
            evict(folder / f"ckpt-{step}")
            cold.append(checkpoint_load(store, step))
            warm.append(checkpoint_load(store, step))
            shutil.rmtree(folder / f"ckpt-{step}")
        source.unlink()
        # Ratio per repeat against the faster of the two raw writes next to it: robust to the
        # disk's drift over the run (a VM's disk varies by tens of percent minute to minute).
        fastest_raw = [min(pair) for pair in zip(raw, dd or raw, strict=True)]
        ratio = statistics.median(r / c for r, c in zip(fastest_raw, ckpt, strict=True))
        rows.append(
            [
                f"{size / 1e6:.0f} MB",
                _rate(size, raw),
                _rate(size, dd) if dd else "n/a",
                _rate(size, ckpt),
                f"{100 * ratio:.0f}%",
                _rate(size, tsave),
                _secs(cold),
                _secs(warm),
            ]
        )
        del state
    return rows


def _rate(size: int, seconds: list[float]) -> str:
    median = statistics.median(seconds)
    return f"{median:.2f} s ({size / median / 1e6:.0f} MB/s)"


def _secs(seconds: list[float]) -> str:
    median = statistics.median(seconds)
    return f"{median:.2f} s"


# ----------------------------------------------------------------------------- in-process ack
def ack_latency(folder: Path, size_mb: int, repeats: int, step_s: float) -> list[float]:
    """Signal -> ack.json written, in this process, with `step_s` long steps."""
    state = make_state(size_mb * 1_000_000)
    return [_one_ack(folder / f"ack-{size_mb}-{index}", state, step_s) for index in range(repeats)]


def _one_ack(state_dir: Path, state: dict[str, torch.Tensor], step_s: float) -> float:
    env = JobEnvironment(
        job_id="bench",
        job_key="bench",
        restart_count=0,
        rank=0,
        local_rank=0,
        world_size=1,
        node="local",
        num_gpus=0,
        state_dir=state_dir,
        checkpoint_every_s=None,
        lease_timeout_s=600,
    )

    def save(writer: CheckpointWriter) -> None:
        writer.save_object("state.bin", state)

    session = JobSession(total_steps=None, save=save, env=env, gpu_lookup=lambda n: None)
    signalled: list[float] = []

    def send() -> None:
        signalled.append(time.time())
        os.kill(os.getpid(), signal.SIGUSR2)

    def requeue_after_ack() -> None:  # the controller, once it sees the ack
        while read_ack(state_dir) is None:
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Timer(0.2, send).start()
    threading.Thread(target=requeue_after_ack, daemon=True).start()
    try:
        with session:
            while True:
                time.sleep(step_s)  # one training step
                session.step_done()
    except Terminated:
        pass
    ack = read_ack(state_dir)
    assert ack is not None
    shutil.rmtree(state_dir)
    return ack.written_at - signalled[0]


# ----------------------------------------------------------------------------- dev cluster
def cluster_moves(folder: Path) -> list[list[str]] | None:
    """Move the template job k80 -> v100 -> p100 on the dev cluster and time each move."""
    if not os.environ.get("SLURM_CONF"):
        return None
    from slurm_hetsched.slurm import CliSlurmBackend, JobOptions, JobUpdate, SlurmCli
    from slurm_hetsched.wrapper import Placement, write_placement

    backend = CliSlurmBackend(SlurmCli(timeout_s=30))
    root = folder / "cluster-state"
    root.mkdir()
    template = (REPO / "sbatch_templates" / "train.sbatch").read_text()
    script = re.sub(
        r"^TRAIN=\(.*\)$",
        lambda _: (
            f'TRAIN=("$PYTHON" -u {REPO}/examples/train_mlp.py --steps 20000 --step-time-s 0.01)'
        ),
        template,
        flags=re.MULTILINE,
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/root"),
        "SLURM_CONF": os.environ["SLURM_CONF"],
        "HETSCHED_PYTHON": sys.executable,
        "HETSCHED_STATE_ROOT": str(root),
        "HETSCHED_PROGRESS_EVERY_S": "0.2",
    }
    job = backend.submit(
        script,
        [
            JobOptions(
                export=env, export_all=False, chdir=str(folder), output=str(folder / "slurm-%j.out")
            )
        ],
    )
    state = state_folder(root, os.geteuid(), job)

    def wait(probe: Callable[[], Any], what: str, timeout_s: float = 90) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = probe()
            if value:
                return value
            time.sleep(0.05)
        raise TimeoutError(f"no {what} after {timeout_s} s")

    def place(gpu_type: str, node: str, round_: int) -> None:
        backend.retarget(job, gpu_type, 1, node)
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_placement(state, Placement(gpu_type, 1, (node,), round_))
        backend.release(job)

    def progress_of(restart: int, min_step: int = 1) -> Any:
        progress = read_progress(state)
        if progress and progress.get("restart_count") == restart:
            return progress if int(progress["step"]) >= min_step else None
        return None

    def move(restart: int, gpu_type: str, node: str) -> list[str]:
        signalled = time.time()
        backend.signal(job, "USR2")
        ack = wait(lambda: (a := read_ack(state)) and a.written_at >= signalled and a, "ack")
        acked = time.time()
        backend.requeue_hold(job)
        wait(lambda: backend.job(job).held, "held")
        held = time.time()
        backend.retarget(job, gpu_type, 1, node)
        write_placement(state, Placement(gpu_type, 1, (node,), restart + 1))
        backend.release(job)
        backend.update(job, JobUpdate(start_now=True))
        wait(lambda: backend.job(job).state.value == "RUNNING", "RUNNING")
        running = time.time()
        wait(lambda: progress_of(restart, ack.step + 1), "training again")
        training = time.time()
        return [
            f"-> {gpu_type} ({node})",
            f"{ack.written_at - signalled:.2f} s",
            f"{held - acked:.1f} s",
            f"{running - acked:.1f} s",
            f"{training - acked:.1f} s",
        ]

    rows = [["move", "signal -> ack", "ack -> held", "ack -> RUNNING", "ack -> training"]]
    try:
        place("k80", "n3", 1)
        wait(lambda: progress_of(0, 50), "first run training")
        for restart, (gpu_type, node) in enumerate([("v100", "n1"), ("p100", "n2")], start=1):
            rows.append(move(restart, gpu_type, node))
    finally:
        backend.cancel(job)
        # Its last progress.json write must land before the folder is removed.
        wait(lambda: not backend.job(job).state.is_active, "the job to end", 60)
    return rows


def print_table(title: str, rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print(f"\n{title}")
    for row in rows:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="100,1000", help="state sizes (default 100,1000)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="folder on the disk to measure (a temp dir)")
    parser.add_argument("--no-slurm", action="store_true", help="skip the dev cluster part")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes_mb.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="hetsched-bench-", dir=args.dir))
    torch.set_num_threads(1)
    try:
        print(f"disk: {folder} (medians of {args.repeats}); torch {torch.__version__}")
        print_table(
            "checkpoint write/load vs raw disk bandwidth (write = fsynced and committed)",
            disk_table(folder, sizes, args.repeats),
        )
        print("  * median over repeats of (faster raw write) / (checkpoint write), same bytes")
        rows = [["state", "step time", "signal -> ack (median, max)"]]
        for size_mb in (10, 100):
            latencies = ack_latency(folder, size_mb, args.repeats, 0.05)
            rows.append(
                [
                    f"{size_mb} MB",
                    "50 ms",
                    f"{statistics.median(latencies):.2f} s, {max(latencies):.2f} s",
                ]
            )
        print_table("signal -> ack in-process (next step boundary + checkpoint + ack.json)", rows)
        if not args.no_slurm:
            moves = cluster_moves(folder)
            if moves is None:
                print("\n(no SLURM_CONF: dev cluster moves skipped)")
            else:
                print_table(
                    "moves on the dev cluster (template job, examples/train_mlp.py; "
                    "'training' includes Python + torch start-up)",
                    moves,
                )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
