"""Nodes Slurm gives no new jobs, end to end on the dev cluster (issue 14): the real
`hetsched controller` never places a job on a drained or reserved node, and moves a managed job
off a node drained under it. Placements are read from the controller's store and journal, where
jobs run from Slurm."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_hetsched.slurm import CliSlurmBackend, GpuRequest, JobOptions
from slurm_hetsched.wrapper.files import state_folder

from .conftest import SEED, Submitter, job_environment, render_template, wait_for
from .controller_harness import LiveController, drained, wait_settled


def submit_managed(submit: Submitter, state_root: Path) -> str:
    """A template job (held, one untyped GPU) that trains until cancelled."""
    steps = 100000
    script = render_template(
        ["--steps", str(steps), "--seed", str(SEED), "--step-time-s", "0.1"],
        comment=f"hetsched:class=LM (batch size 20);steps={steps}",
    )
    options = JobOptions(
        gpus=GpuRequest(1),
        export=job_environment(state_root),
        export_all=False,
        chdir=str(submit.folder),
    )
    return submit(script, options)


def controller_in(tmp_path: Path, slurm_conf: str, state_root: Path) -> LiveController:
    folder = tmp_path / "controller"
    folder.mkdir()
    return LiveController(folder, slurm_conf, state_root)


@contextlib.contextmanager
def reserved(backend: CliSlurmBackend, node: str) -> Iterator[None]:
    """`node` in an active reservation the test's jobs do not ask for, deleted afterwards."""
    name = f"hetsched-test-{os.getpid()}"
    user = pwd.getpwuid(os.geteuid()).pw_name
    backend.cli.run(
        [
            "scontrol",
            "create",
            "reservation",
            f"ReservationName={name}",
            "StartTime=now",
            "Duration=5",  # minutes: gone by itself should the deletion below fail
            f"Nodes={node}",
            f"Users={user}",
            "Flags=IGNORE_JOBS",
        ]
    )
    try:
        # slurmctld flags the node a few seconds after the reservation starts.
        wait_for(
            lambda: (
                "RESERVED" in next(n for n in backend.list_nodes() if n.name == node).unplannable
            ),
            f"node {node} flagged RESERVED",
            30,
        )
        yield
    finally:
        backend.cli.run(["scontrol", "delete", f"ReservationName={name}"])
        wait_for(
            lambda: next(n for n in backend.list_nodes() if n.name == node).available,
            f"node {node} back in service",
            30,
        )


def out_of_service(
    how: str, backend: CliSlurmBackend, node: str
) -> contextlib.AbstractContextManager[None]:
    return drained(backend, [node]) if how == "drain" else reserved(backend, node)


@pytest.mark.parametrize("how", ["drain", "reservation"])
def test_no_job_is_placed_on_a_node_out_of_service(
    how: str,
    submit: Submitter,
    backend: CliSlurmBackend,
    slurm_conf: str,
    state_root: Path,
    tmp_path: Path,
) -> None:
    """n1 (the v100s, where LM runs fastest) drained or reserved: two rounds place both jobs on
    the other nodes, and every recorded snapshot shows n1 without capacity."""
    ctl = controller_in(tmp_path, slurm_conf, state_root)
    with out_of_service(how, backend, "n1"):
        ids = [submit_managed(submit, state_root) for _ in range(2)]
        for round_ in (1, 2):
            ctl.once()
            jobs = wait_settled(backend, ids)
            for job_id in ids:
                assert jobs[job_id].state.value == "RUNNING", jobs[job_id]
                assert jobs[job_id].nodes in ("n2", "n3"), jobs[job_id].nodes
            store = ctl.store()
            try:
                record = store.load()
            finally:
                store.close()
            assert record is not None and record.round == round_
            placed = {node for p in record.plan.placements.values() for node in p.nodes}
            assert placed and "n1" not in placed, record.plan.placements
            assert record.snapshot is not None
            (n1,) = [n for n in record.snapshot.nodes if n.name == "n1"]
            assert not n1.available and n1.free_gpus("v100") == 0


def test_a_job_on_a_node_drained_under_it_is_moved_off(
    submit: Submitter,
    backend: CliSlurmBackend,
    slurm_conf: str,
    state_root: Path,
    tmp_path: Path,
) -> None:
    """A managed job runs on X; X is drained; the next round checkpoints it, requeues it and
    releases it onto another node, where Slurm runs it."""
    ctl = controller_in(tmp_path, slurm_conf, state_root)
    job_id = submit_managed(submit, state_root)
    ctl.once()
    first = wait_settled(backend, [job_id])[job_id]
    assert first.state.value == "RUNNING", first
    node = first.nodes
    progress = state_folder(state_root, os.geteuid(), job_id) / "progress.json"
    wait_for(
        lambda: progress.exists() and json.loads(progress.read_text()).get("step", 0) >= 5,
        "the job trains (so it can acknowledge a checkpoint)",
        90,
    )
    with drained(backend, [node]):
        ctl.once()
        moved = wait_settled(backend, [job_id])[job_id]
        assert moved.state.value == "RUNNING", moved
        assert moved.nodes != node, f"job {job_id} still runs on the drained node {node}"
        assert moved.restart_count == 1
    store = ctl.store()
    try:
        actions = [a for a in store.actions(job_key=job_id) if a.round == 2]
        record = store.load()
    finally:
        store.close()
    kinds = [a.kind for a in actions if a.status == "done"]
    for before, after in [("signal", "requeue_hold"), ("requeue_hold", "release")]:
        assert before in kinds and after in kinds, kinds
        assert kinds.index(before) < kinds.index(after), kinds
    # The round's placement (a move, or a start once last round's placement on the drained
    # node is dropped) is off the drained node.
    assert record is not None and record.round == 2
    assert node not in record.plan.placements[job_id].nodes, record.plan
