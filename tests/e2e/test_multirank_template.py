"""The shipped template runs one data-parallel training over the components of a Slurm
heterogeneous job: 2 ranks on n1's V100s and 1 on n3's K80 (srun --het-group=0,1), the
checkpoint signal relayed to every rank, a requeue resumed from the checkpoint; every step runs
once and the result is bit-identical to an uninterrupted 3-rank run on this machine. (Moves
decided by hadar rounds are the controller's tests; this one drives Slurm by hand.)"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hetsched.slurm import CliSlurmBackend, GpuRequest, JobOptions

from .conftest import (
    FakeController,
    Submitter,
    job_environment,
    render_template,
    signal_time,
    wait_done,
)

ROOT = Path(__file__).resolve().parents[2]
TRAIN_DDP = ROOT / "examples" / "train_ddp.py"
STEPS = 120
ARGS = ["--steps", str(STEPS)]
STEP = re.compile(r"^step=(\d+) .*ranks=(\d+) node=(\S+) restart=(\d+)$", re.MULTILINE)


@pytest.fixture(scope="module")
def three_rank_digest(tmp_path_factory: pytest.TempPathFactory) -> str:
    """params_sha256 of an uninterrupted 3-rank run (torchrun, gloo, no Slurm)."""
    folder = tmp_path_factory.mktemp("ddp-reference")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "HETSCHED"))}
    env |= {"HETSCHED_STATE_DIR": str(folder / "state"), "OMP_NUM_THREADS": "1"}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3"]
    argv += ["--master-port", port, str(TRAIN_DDP), *ARGS]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    found = re.search(r"params_sha256=([0-9a-f]{64})", done.stdout)
    assert done.returncode == 0 and found, done.stdout[-2000:] + done.stderr[-2000:]
    return found.group(1)


def test_a_heterogeneous_job_trains_on_all_its_components_and_moves_bit_identical(
    submit: Submitter,
    backend: CliSlurmBackend,
    controller: FakeController,
    state_root: Path,
    three_rank_digest: str,
) -> None:
    script = render_template(
        [*ARGS, "--step-time-s", "0.1"],
        script=TRAIN_DDP,
        comment=f"hetsched:class=LM (batch size 20);steps={STEPS};gpus=3",
    )
    environment = job_environment(state_root, HETSCHED_CHECKPOINT_EVERY_S="0")
    first = JobOptions(
        gpus=GpuRequest(2), ntasks=2, nodes=1, nodelist="n1", export=environment,
        export_all=False, chdir=str(submit.folder),
    )  # fmt: skip
    second = JobOptions(
        gpus=GpuRequest(1), ntasks=1, nodes=1, nodelist="n3", export=environment,
        export_all=False,
    )  # fmt: skip
    job = submit(script, first, second)
    backend.release(job)
    progress = controller.wait_progress(job, min_step=30, timeout_s=120)
    assert progress["step"] is not None
    # squeue shows both components, each with its node and GPUs.
    parts = {j.het_job_offset: j for j in backend.list_jobs([job]) if j.is_het_component}
    assert (parts[0].nodes, parts[0].gres_detail) == ("n1", ("gpu:v100:2(IDX:0-1)",))
    assert (parts[1].nodes, parts[1].gres_detail) == ("n3", ("gpu:k80:1(IDX:0)",))

    signalled = signal_time()
    backend.signal(job, "USR2")  # the batch shell only: the template relays it through srun
    ack = controller.wait_ack(job, signalled, timeout_s=60)
    backend.requeue(job)
    log = wait_done(submit, job, timeout_s=300)
    steps = [(int(s), int(r), n, int(k)) for s, r, n, k in STEP.findall(log.text)]
    assert [s for s, _, _, _ in steps] == list(range(1, STEPS + 1)), "every step exactly once"
    assert {r for _, r, _, _ in steps} == {3}, "three ranks in every run"
    assert {k for s, _, _, k in steps if s <= ack.step} == {0}
    assert {k for s, _, _, k in steps if s > ack.step} == {1}
    assert log.final_steps == STEPS
    assert log.digest == three_rank_digest
