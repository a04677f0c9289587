"""Helpers for end-to-end tests of the job side on the dev cluster.

`FakeController` does, one Slurm call at a time, what the controller will do to a managed job
(docs/interfaces.md): place it (Features, ReqNodeList, placement.json, release) and move it
after a checkpoint (requeue-hold, retarget, placement.json, release, StartTime=now). Jobs are
the real template (sbatch_templates/train.sbatch) with only its training command and comment
lines replaced, running examples/train_mlp.py with this interpreter.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_hetsched.slurm import CliSlurmBackend, JobOptions, JobUpdate
from slurm_hetsched.wrapper import Ack, Placement, read_ack, read_progress, write_placement
from slurm_hetsched.wrapper.files import state_folder
from slurm_hetsched.wrapper.template import render_template as fill_template
from tests.integration.conftest import Submitter, backend, submit, wait_for  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "sbatch_templates" / "train.sbatch"
TRAIN_MLP = REPO / "examples" / "train_mlp.py"
TRAIN_PLAIN = REPO / "examples" / "train_plain.py"
TRAIN_DDP = REPO / "examples" / "train_ddp.py"
DDP_STEPS = 120  # the multi-rank jobs' steps (examples/train_ddp.py)
STEPS = 300
SEED = 0
_STEP_LINE = re.compile(r"^step=(\d+) \S+ node=(\S+) restart=(\d+)$", re.MULTILINE)
_FINAL_LINE = re.compile(r"^final steps=(\d+) (?:\S+ )*params_sha256=([0-9a-f]{64})$", re.MULTILINE)


def render_template(train_args: list[str], *, script: Path = TRAIN_MLP, comment: str) -> str:
    """The shipped template running `script` with `train_args` and the job spec `comment`."""
    return fill_template(TEMPLATE.read_text(), [str(script), *train_args], comment=comment)


def job_environment(state_root: Path, **extra: str) -> dict[str, str]:
    """The variables a test job gets (nothing else of the test's environment leaks in)."""
    variables = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        "SLURM_CONF": os.environ.get("SLURM_CONF", ""),
        "HETSCHED_PYTHON": sys.executable,
        "HETSCHED_STATE_ROOT": str(state_root),
        "HETSCHED_PROGRESS_EVERY_S": "0.5",
    }
    variables.update(extra)
    return variables


@dataclass(frozen=True)
class JobLog:
    """What examples/train_mlp.py printed over all runs of a job (append mode)."""

    text: str
    steps: list[tuple[int, str, int]]  # (step, node, restart) per step line, in order
    final_steps: int | None
    digest: str | None

    @classmethod
    def parse(cls, text: str) -> JobLog:
        steps = [(int(s), node, int(r)) for s, node, r in _STEP_LINE.findall(text)]
        final = _FINAL_LINE.search(text)
        return cls(
            text,
            steps,
            int(final.group(1)) if final else None,
            final.group(2) if final else None,
        )

    def runs(self) -> dict[int, list[int]]:
        """restart count -> the steps that run printed."""
        out: dict[int, list[int]] = {}
        for step, _, restart in self.steps:
            out.setdefault(restart, []).append(step)
        return out

    def nodes(self) -> dict[int, set[str]]:
        out: dict[int, set[str]] = {}
        for _, node, restart in self.steps:
            out.setdefault(restart, set()).add(node)
        return out


class FakeController:
    """The controller's actions on one job, as docs/interfaces.md orders them."""

    def __init__(self, slurm: CliSlurmBackend, state_root: Path) -> None:
        self.backend = slurm
        self.state_root = state_root
        self.round = 0

    def state_dir(self, job_id: str) -> Path:
        """`<root>/<uid>/<key>`: the test's jobs run as the test's user."""
        return state_folder(self.state_root, os.geteuid(), job_id)

    def write_placement(self, job_id: str, gpu_type: str, node: str) -> None:
        self.round += 1
        folder = self.state_dir(job_id)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_placement(folder, Placement(gpu_type, 1, (node,), self.round))

    def place(self, job_id: str, gpu_type: str, node: str) -> None:
        """First release of a held job onto `gpu_type` on `node`."""
        self.backend.retarget(job_id, gpu_type, 1, node)
        self.write_placement(job_id, gpu_type, node)
        self.backend.release(job_id)

    def move(self, job_id: str, gpu_type: str, node: str) -> None:
        """Requeue-hold a running job and release it onto `gpu_type` on `node`."""
        self.backend.requeue_hold(job_id)
        wait_for(lambda: self.backend.job(job_id).held, f"job {job_id} requeued and held", 30)
        self.backend.retarget(job_id, gpu_type, 1, node)
        self.write_placement(job_id, gpu_type, node)
        self.backend.release(job_id)
        self.backend.update(job_id, JobUpdate(start_now=True))

    def move_pending(self, job_id: str, gpu_type: str, node: str) -> None:
        """Hold a pending (e.g. just requeued) job and release it onto `gpu_type` on `node`."""
        self.backend.hold(job_id)
        wait_for(lambda: self.backend.job(job_id).held, f"job {job_id} held", 30)
        self.backend.retarget(job_id, gpu_type, 1, node)
        self.write_placement(job_id, gpu_type, node)
        self.backend.release(job_id)
        self.backend.update(job_id, JobUpdate(start_now=True))

    def wait_ack(self, job_id: str, signalled_at: float, timeout_s: float = 30) -> Ack:
        """The ack a controller would accept: this job id, first run, newer than the signal."""

        def probe() -> Ack | None:
            ack = read_ack(self.state_dir(job_id))
            if ack and ack.job_id == job_id and ack.written_at >= signalled_at:
                return ack
            return None

        return wait_for(probe, f"ack.json of job {job_id}", timeout_s)

    def wait_progress(
        self, job_id: str, *, min_step: int = 0, restart: int = 0, timeout_s: float = 45
    ) -> Mapping[str, object]:
        """progress.json once the given run of the job has done `min_step` steps."""

        def probe() -> Mapping[str, object] | None:
            progress = read_progress(self.state_dir(job_id))
            if (
                progress
                and progress.get("job_id") == job_id
                and progress.get("restart_count") == restart
                and int(progress.get("step") or 0) >= min_step
            ):
                return progress
            return None

        return wait_for(probe, f"job {job_id} run {restart} at step {min_step}", timeout_s)


@pytest.fixture
def state_root(tmp_path: Path) -> Path:
    root = tmp_path / "state"
    root.mkdir(mode=0o700)
    return root


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A folder under /tmp every user may traverse; only root may list it or create in it."""
    root = Path(tempfile.mkdtemp(prefix="hetsched-e2e-users-", dir="/tmp"))
    os.chmod(root, 0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def controller(backend: CliSlurmBackend, state_root: Path) -> FakeController:  # noqa: F811
    return FakeController(backend, state_root)


@pytest.fixture(scope="session")
def reference_digest(tmp_path_factory: pytest.TempPathFactory) -> str:
    """params_sha256 of an uninterrupted local run (no Slurm) with the tests' steps and seed."""
    folder = tmp_path_factory.mktemp("reference")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "HETSCHED"))}
    env["HETSCHED_STATE_DIR"] = str(folder / "state")
    done = subprocess.run(
        [sys.executable, str(TRAIN_MLP), "--steps", str(STEPS), "--seed", str(SEED)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    log = JobLog.parse(done.stdout)
    assert done.returncode == 0 and log.digest, done.stderr[-2000:]
    return log.digest


@pytest.fixture(scope="session")
def three_rank_digest(three_rank_run: tuple[str, float]) -> str:
    return three_rank_run[0]


@pytest.fixture(scope="session")
def three_rank_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, float]:
    """params_sha256 and held-out loss of an uninterrupted 3-rank run of examples/train_ddp.py
    with DDP_STEPS steps (torchrun, gloo, no Slurm)."""
    folder = tmp_path_factory.mktemp("ddp-reference")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "HETSCHED"))}
    env |= {"HETSCHED_STATE_DIR": str(folder / "state"), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3"]
    argv += [str(TRAIN_DDP), "--steps", str(DDP_STEPS)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    found = re.search(r"heldout_loss=([\d.]+) params_sha256=([0-9a-f]{64})", done.stdout)
    assert done.returncode == 0 and found, done.stdout[-2000:] + done.stderr[-2000:]
    return found.group(2), float(found.group(1))


def job_log(submitter: Submitter, job_id: str) -> JobLog:
    return JobLog.parse((submitter.folder / f"slurm-{job_id}.out").read_text())


def wait_done(submitter: Submitter, job_id: str, timeout_s: float = 60) -> JobLog:
    """The job's log once the job COMPLETED (fails on any other end state)."""

    def probe() -> str | None:
        state = submitter.job(job_id).state.value
        return state if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") else None

    state = wait_for(probe, f"job {job_id} to finish", timeout_s)
    log = job_log(submitter, job_id)
    assert state == "COMPLETED", f"job {job_id} ended {state}:\n{log.text[-3000:]}"
    return log


def submit_template(
    submitter: Submitter,
    state_root: Path,
    train_args: list[str],
    *,
    comment: str = f"hetsched:class=LM (batch size 20);steps={STEPS}",
    **env: str,
) -> str:
    """Submit the rendered template (held, untyped GRES) with the test's environment."""
    script = render_template(
        ["--steps", str(STEPS), "--seed", str(SEED), *train_args], comment=comment
    )
    options = JobOptions(
        export=job_environment(state_root, **env), export_all=False, chdir=str(submitter.folder)
    )
    return submitter(script, options)


def signal_time() -> float:
    """A wall-clock time just before a signal (acks must be written after it)."""
    return time.time()
