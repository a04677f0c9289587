"""A job never goes where it cannot fit, end to end on the dev cluster: `mem=14` in its spec
rules out the k80 (12 GiB in the shipped gpu_types.toml) even when the k80 node is the only
one with free GPUs; the job waits, and starts on a type with room once one is back."""

from __future__ import annotations

import time
from pathlib import Path

from slurm_hetsched.slurm import CliSlurmBackend

from .conftest import Submitter
from .controller_harness import drained, wait_settled
from .test_controller import controller_for, submit_managed

ROUNDS = 4


def test_a_memory_need_keeps_a_job_off_smaller_gpus(
    submit: Submitter,
    backend: CliSlurmBackend,
    slurm_conf: str,
    state_root: Path,
    tmp_path: Path,
) -> None:
    round_s = 6.0
    ctl = controller_for(tmp_path, slurm_conf, state_root, round_s=round_s)
    with drained(backend, ["n1", "n2"]):
        big = submit_managed(submit, state_root, steps=100_000, spec_extra=";mem=14")
        small = submit_managed(submit, state_root, steps=100_000)
        for _ in range(ROUNDS):
            began = time.monotonic()
            ctl.once()
            jobs = wait_settled(backend, [big, small])
            # Only k80 GPUs are free: the job that fits runs there, the other waits.
            assert jobs[small].state.value == "RUNNING" and jobs[small].nodes == "n3"
            assert jobs[big].state.value == "PENDING", jobs[big].nodes
            time.sleep(max(0.0, began + round_s - time.monotonic()))
    # A type with room is back: the job that needs 14 GiB starts there, never on n3.
    ctl.once()
    jobs = wait_settled(backend, [big, small])
    assert jobs[big].state.value == "RUNNING" and jobs[big].nodes in ("n1", "n2")
    store = ctl.store()
    try:
        records = store.rounds()
    finally:
        store.close()
    assert len(records) == ROUNDS + 1
    for record in records:
        placement = record.plan.placements.get(big)
        assert placement is None or placement.gpu_types != ("k80",), record.round
