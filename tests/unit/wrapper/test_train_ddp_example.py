"""examples/train_ddp.py under torchrun on this machine (gloo, no Slurm): a run moved with the
checkpoint protocol (checkpoint signal to every rank, ack, SIGTERM in the pause, a new run from
the checkpoint) onto another number of ranks (2, then 3) does every step exactly once and ends
with a held-out loss within 2% of an uninterrupted 3-rank run (the global batch stays the
same). Moves on the same number of ranks, bit-identical, decided by hadar rounds on the dev
cluster: tests/e2e/test_hadar_moves.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_hetsched.statefolder import state_folder
from slurm_hetsched.wrapper import read_ack

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "train_ddp.py"
STEPS = 120
FINAL = re.compile(r"final steps=(\d+) heldout_loss=([\d.]+) params_sha256=([0-9a-f]{64})")
STEP = re.compile(r"^step=(\d+) ", re.MULTILINE)


def torchrun(ranks: int, state_root: Path, *extra: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "HETSCHED_STATE_ROOT": str(state_root),
        "HETSCHED_JOB_KEY": "ddp",
        "HETSCHED_CHECKPOINT_EVERY_S": "0",
        "HETSCHED_LEASE_TIMEOUT_S": "600",
        "OMP_NUM_THREADS": "1",
    }
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks)]
    # --standalone: torchrun picks a free port itself (a port probed here could be taken
    # before torchrun binds it)
    argv += ["--standalone", str(EXAMPLE), "--steps", str(STEPS), *extra]
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT
    )


def finish(process: subprocess.Popen[str]) -> str:
    out, _ = process.communicate(timeout=300)
    assert process.returncode == 0, out
    return out


def run_whole(ranks: int, state_root: Path) -> tuple[str, float, str]:
    out = finish(torchrun(ranks, state_root))
    found = FINAL.search(out)
    assert found is not None, out
    return found.group(1), float(found.group(2)), found.group(3)


def moved_run(first: int, second: int, state_root: Path) -> tuple[list[int], float, str]:
    """`first` ranks until the checkpoint signal, then `second` ranks from the checkpoint."""
    process = torchrun(first, state_root, "--step-time-s", "0.05")
    assert process.stdout is not None
    lines: list[str] = []
    for line in process.stdout:  # wait for training to be under way, counted in steps
        lines.append(line)
        if line.startswith("step=30 "):
            break
    workers = _children(process.pid)
    assert len(workers) == first, workers
    for pid in workers:  # srun relays the signal to every rank in the Slurm template
        os.kill(pid, signal.SIGUSR2)
    state_dir = state_folder(state_root, os.geteuid(), "ddp")
    ack, give_up = None, time.monotonic() + 120  # a hang guard, not a timing assertion
    while ack is None and process.poll() is None and time.monotonic() < give_up:
        ack = read_ack(state_dir)
        time.sleep(0.05)
    assert ack is not None, f"no ack in {state_dir}"
    process.send_signal(signal.SIGTERM)  # the requeue: torchrun passes it to the ranks
    rest, _ = process.communicate(timeout=120)
    lines.extend(rest.splitlines(keepends=True))
    second_out = finish(torchrun(second, state_root))
    steps = [int(s) for s in STEP.findall("".join(lines) + second_out)]
    found = FINAL.search(second_out)
    assert found is not None, second_out
    assert int(found.group(1)) == STEPS
    assert ack.step < STEPS
    return steps, float(found.group(2)), found.group(3)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[float, str]:
    steps, loss, digest = run_whole(3, tmp_path_factory.mktemp("whole"))
    assert int(steps) == STEPS
    return loss, digest


def test_two_ranks_then_three_keep_the_global_batch(
    tmp_path: Path, uninterrupted: tuple[float, str]
) -> None:
    steps, loss, _ = moved_run(2, 3, tmp_path)
    assert steps == list(range(1, STEPS + 1)), "every step exactly once"
    assert abs(loss - uninterrupted[0]) <= 0.02 * uninterrupted[0]
