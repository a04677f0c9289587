"""A job of a class in no table, end to end on the dev cluster: the controller schedules it on
the neutral prior, gives it a stint on each GPU type (each a real move through Slurm), learns
its row from its own progress reports, and the learned row matches the speeds the job really
ran at (the emulation knob, HETSCHED_EMULATE_RATES) within 10%."""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path

import pytest

from slurm_hetsched.controller.config import load_config
from slurm_hetsched.core.explore import Stint
from slurm_hetsched.core.problem import build_problem
from slurm_hetsched.slurm import CliSlurmBackend
from slurm_hetsched.wrapper.files import state_folder

from .conftest import Submitter
from .controller_harness import wait_settled
from .test_controller import controller_for, submit_managed

# What the job really runs at, relative: the emulation stretches each step by fastest / mine.
EMULATED = {"v100": 3.0, "p100": 2.0, "k80": 1.0}
MAX_ROUNDS = 16


def test_a_class_in_no_table_is_explored_and_learned_within_ten_percent(
    submit: Submitter,
    backend: CliSlurmBackend,
    slurm_conf: str,
    state_root: Path,
    tmp_path: Path,
) -> None:
    round_s = 8.0
    ctl = controller_for(tmp_path, slurm_conf, state_root, round_s=round_s)
    speeds = ",".join(f"{t}={v}" for t, v in EMULATED.items())
    job_id = submit_managed(
        submit,
        state_root,
        job_class="my-own-model",
        steps=1_000_000,
        step_time_s=0.05,
        HETSCHED_EMULATE_GPU_SPEED="1",
        HETSCHED_EMULATE_RATES=speeds,
    )
    learned: dict[str, float] = {}
    for round_ in range(1, MAX_ROUNDS + 1):
        began = time.monotonic()
        ctl.once()
        wait_settled(backend, [job_id])
        if round_ == 1:
            # Nothing measured yet: its share is marked as an estimate in Slurm and in status.
            assert "share=v100~:1" in backend.job(job_id).admin_comment
            status = ctl.command("status")
            assert status.returncode == 0, status.stderr
            # `status` reads the job's progress report itself: a speed reported since the
            # round (a loaded machine starts status slowly) is a measurement, and the mark
            # rightly goes. Without one even now, the mark must be there.
            progress = state_folder(state_root, os.geteuid(), job_id) / "progress.json"
            reported = progress.exists() and json.loads(progress.read_text()).get("steps_per_s")
            if not reported:
                assert "v100~:1" in status.stdout and "still an estimate" in status.stdout
        store = ctl.store()
        try:
            record = store.load()
        finally:
            store.close()
        assert record is not None
        (job,) = [j for j in record.snapshot.jobs if j.key == job_id]
        learned = dict(job.measured_steps_per_s)
        if set(learned) == set(EMULATED) and job_id not in record.plan.exploring:
            break
        # Rounds of about equal length, as the service runs them (pacing only: what is
        # asserted is counted from the journal and Slurm).
        time.sleep(max(0.0, began + round_s - time.monotonic()))
    assert set(learned) == set(EMULATED), f"measured on {sorted(learned)} only"
    # Measured everywhere: no mark left.
    assert "~" not in backend.job(job_id).admin_comment

    store = ctl.store()
    try:
        records = store.rounds()
    finally:
        store.close()
    # Every type was a stint, and each stint that changed its type was a move in the journal.
    stints = [
        Stint.from_text(r.plan.exploring[job_id]) for r in records if job_id in r.plan.exploring
    ]
    explored = {s.target for s in stints if s is not None}
    assert explored == set(EMULATED)
    # Bounded: at most the configured rounds per type (3, the default) for each type.
    assert len(stints) <= 3 * len(EMULATED)
    placed = [
        r.plan.placements[job_id].gpu_types[0] for r in records if job_id in r.plan.placements
    ]
    assert set(placed) == set(EMULATED)
    moves = sum(job_id in r.plan.move for r in records)
    changes = sum(a != b for a, b in itertools.pairwise(placed))
    assert moves >= changes >= 2

    # The learned ratios are the emulated ones within 10%...
    for gpu_type, speed in EMULATED.items():
        ratio = learned[gpu_type] / learned["k80"]
        assert ratio == pytest.approx(speed / EMULATED["k80"], rel=0.10), (gpu_type, learned)
    # ... and so is the row the policy now decides on.
    last = records[-1]
    assert last.snapshot is not None
    problem = build_problem(last.snapshot, load_config(ctl.config).site_data())
    row = dict(
        zip(problem.gpu_types, problem.throughput[problem.job_ids.index(job_id)], strict=True)
    )
    for gpu_type, speed in EMULATED.items():
        assert row[gpu_type] / row["k80"] == pytest.approx(speed, rel=0.10), row
