"""hadar on the dev cluster: a job whose utility cannot pay for any GPU stays held, with the
price and its utility in its admin comment, round after round, while a job worth its GPUs
runs (DESIGN.md section 6; docs/policies.md, "hadar")."""

from __future__ import annotations

import re
from pathlib import Path

from slurm_hetsched.slurm import CliSlurmBackend

from .conftest import Submitter
from .controller_harness import wait_settled
from .test_controller import controller_for, submit_managed

ROUNDS = 3
WAITING = re.compile(r"hetsched r=\d+ - share=- prio=\S+ waiting:price=[\d.e+-]+>=utility=0$")


def test_a_job_hadar_does_not_admit_stays_held_with_price_and_utility(
    submit: Submitter,
    backend: CliSlurmBackend,
    slurm_conf: str,
    state_root: Path,
    tmp_path: Path,
) -> None:
    ctl = controller_for(tmp_path, slurm_conf, state_root, policy="hadar", round_s=4.0)
    # 100,000 steps of 0.1 s cannot meet a deadline a minute after submission: worth 0.
    late = submit_managed(
        submit, state_root, steps=100_000, spec_extra=";utility=deadline;target=60"
    )
    worth = submit_managed(submit, state_root, steps=100_000)
    for _ in range(ROUNDS):
        ctl.once()
        jobs = wait_settled(backend, [late, worth])
        assert jobs[worth].state.value == "RUNNING"
        assert jobs[late].state.value == "PENDING" and jobs[late].held
        assert WAITING.fullmatch(jobs[late].admin_comment), jobs[late].admin_comment
    store = ctl.store()
    try:
        records = store.rounds()
    finally:
        store.close()
    assert len(records) == ROUNDS
    # The journal keeps why: the allocation's waiting reasons survive the store.
    assert records[-1].allocation.waiting[late].endswith(">=utility=0")
    assert late not in records[-1].plan.placements
    status = ctl.command("status")
    assert status.returncode == 0, status.stderr
    (line,) = [row for row in status.stdout.splitlines() if row.startswith(f"{late} ")]
    assert re.search(r" waiting:price=[\d.e+-]+>=utility=0$", line), line
