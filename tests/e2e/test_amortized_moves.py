"""Amortized moves on the dev cluster: where the plain mechanism moves jobs back and forth round
after round, the default keeps them on their GPUs (docs/mechanism.md, "Moves that pay for
themselves").

Three 2-GPU jobs share one 2-GPU v100 slot (n1) and two 2-GPU k80 slots (n3); n2 is drained.
Max-min fairness gives each job 1/3 of the v100 time (tests/e2e/test_controller.py derives it
by hand), so the plain mechanism rotates the jobs through n1: most rounds after the first move
one job onto n1 and one off it. With amortized moves and a 30 s restart cost (a 270 s
residence at the default 10% share), six short rounds move nothing: the job on n1 stays for
its residence, so the move up that would pay for its k80 job has no GPUs to go to.
Everything asserted is counted from the journal (plans and actions) and from Slurm's restart
counts.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from slurm_hetsched.slurm import CliSlurmBackend

from .conftest import Submitter
from .controller_harness import drained, wait_settled
from .test_controller import TABLE, controller_for, submit_managed

ROUNDS = 6


@pytest.mark.parametrize("moves", ["plain", "amortized"])
def test_plain_moves_jobs_back_and_forth_every_round_and_amortized_keeps_them(
    moves: str,
    submit: Submitter,
    backend: CliSlurmBackend,
    slurm_conf: str,
    state_root: Path,
    tmp_path: Path,
) -> None:
    table = tmp_path / "throughputs.json"
    table.write_text(json.dumps(TABLE))
    round_s = 8.0
    ctl = controller_for(
        tmp_path,
        slurm_conf,
        state_root,
        throughputs=table,
        round_s=round_s,
        moves=moves,
        restart_s=30.0,
    )
    with drained(backend, ["n2"]):
        ids = [
            submit_managed(submit, state_root, job_class="steady", steps=100000, gpus=2)
            for _ in range(3)
        ]
        for _ in range(ROUNDS):
            began = time.monotonic()  # pacing only: rounds of about equal length
            ctl.once()
            wait_settled(backend, ids)
            time.sleep(max(0.0, began + round_s - time.monotonic()))
        restarts = {job_id: job.restart_count for job_id, job in wait_settled(backend, ids).items()}

    store = ctl.store()
    try:
        records = store.rounds()
        actions = store.actions()
    finally:
        store.close()
    assert [r.round for r in records] == list(range(1, ROUNDS + 1))
    assert all(len(r.plan.placements) == 3 for r in records), "every job runs every round"
    requeued = [a for a in actions if a.kind == "requeue_hold" and a.status == "done"]
    if moves == "plain":
        swaps = 0
        for record in records[1:]:
            onto_n1 = [k for k, p in record.plan.move.items() if p.gpu_types == ("v100",)]
            off_n1 = [k for k, p in record.plan.move.items() if p.gpu_types == ("k80",)]
            assert len(onto_n1) == len(off_n1) <= 1, (record.round, record.plan.move)
            swaps += len(onto_n1)
            assert record.plan.held == {}
        # Jobs go back and forth: a swap in most rounds. Not in every one: the mechanism counts
        # the seconds each job ran, and a move that is slow (both cores busy) can shorten the
        # round of the job it put on n1 so much that it stays the highest priority for a
        # round or two. Amortized moves (below) never swap at all.
        assert swaps >= 2, swaps
        assert len(requeued) == 2 * swaps  # each move checkpointed and requeued once
        assert sum(restarts.values()) == 2 * swaps
    else:
        for record in records[1:]:
            assert record.plan.move == {} and record.plan.stop == (), record.plan
            # The plain plan's swap was undone: the job on n1 is held for its residence (the
            # k80 job's move up would pay, but n1 stays taken), and nothing moves.
            assert len(record.plan.held) == 1, record.plan.held
            (key,) = record.plan.held
            assert record.plan.keep[key].gpu_types == ("v100",)
            assert record.plan.held[key].startswith("residence: stayed ")
        assert requeued == []
        assert restarts == dict.fromkeys(ids, 0)
