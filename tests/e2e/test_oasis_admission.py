"""oasis on the dev cluster (docs/policies.md, "oasis"): with every K80 reserved by earlier
jobs (and the other nodes busy outside our control), a job whose utility cannot pay for a
schedule stays held with the price and its utility in its admin comment, round after round;
when earlier jobs finish, it is admitted and runs. Each round is a fresh controller process
(`once`), so the schedules admitted are read back from the store every round: a restart keeps
them, never planned again."""

from __future__ import annotations

import json
import re
from pathlib import Path

from slurm_hetsched.core.ports import RoundRecord
from slurm_hetsched.slurm import CliSlurmBackend, GpuRequest, JobOptions

from .conftest import Submitter, wait_for
from .controller_harness import LiveController, wait_settled
from .test_controller import controller_for, submit_managed

ROUND_S = 4.0
CLASS = "oasis1"
TABLE = {
    "format": "hetsched-throughputs/1",
    "source": "test: one class, 10 steps/s on every type",
    "throughputs": {CLASS: {"1": {"v100": 10.0, "p100": 10.0, "k80": 10.0}}},
}
WAITING = re.compile(
    r"hetsched r=\d+ - share=- prio=\S+ waiting:price=[\d.e+-]+>utility=[\d.e+-]+$"
)


def test_a_job_oasis_cannot_admit_waits_until_earlier_jobs_finish(
    submit: Submitter,
    backend: CliSlurmBackend,
    slurm_conf: str,
    state_root: Path,
    tmp_path: Path,
) -> None:
    table = tmp_path / "throughputs.json"
    table.write_text(json.dumps(TABLE))
    ctl = controller_for(
        tmp_path,
        slurm_conf,
        state_root,
        policy="oasis",
        round_s=ROUND_S,
        throughputs=table,
        policy_options={"slot_s": ROUND_S, "horizon": 8, "restart_s": 1.0},
    )
    # The V100s and P100s are busy outside our control: the market is n3's four K80s.
    for gpu_type, node in (("v100", "n1"), ("p100", "n2")):
        other = submit(
            "#!/bin/bash\nexec sleep 900\n",
            JobOptions(gpus=GpuRequest(2, gpu_type), nodelist=node, job_name="other"),
        )
        submit.wait_state(other, "RUNNING")
    # Three jobs alike, each a K80 for about 10,000 s: each admitted one raises the K80s'
    # prices, and the third pays more than it is worth (docs/policies.md, "oasis").
    jobs = [
        submit_managed(submit, state_root, job_class=CLASS, steps=100_000,
                       spec_extra=";utility=linear;umax=100;target=100000")
        for _ in range(3)
    ]  # fmt: skip
    reserved: dict[str, int] = {}
    held: set[str] = set()
    for _ in range(3):
        done = ctl.once()
        assert done.returncode == 0, done.stderr[-3000:]
        seen = wait_settled(backend, jobs)
        record = _last_round(ctl)
        reservations = record.allocation.reservations or {}
        admitted = [j for j in jobs if j in reservations]
        assert admitted and len(admitted) < len(jobs), record.allocation.waiting
        # Admitted schedules come back from the store unchanged: never planned again.
        for job in admitted:
            assert reservations[job].last_slot == reserved.setdefault(
                job, reservations[job].last_slot
            )
        assert set(reserved) == set(admitted)
        held = {j for j in jobs if j not in reservations}
        for job in held:
            assert seen[job].state.value == "PENDING" and seen[job].held, seen[job]
            assert WAITING.fullmatch(seen[job].admin_comment), seen[job].admin_comment
            price, utility = (
                float(x) for x in record.allocation.waiting[job][6:].split(">utility=")
            )
            assert price > utility
    # A schedule may start at the next slot (the rest of this one is too short to pay for a
    # start): by the third round an admitted job runs.
    assert any(seen[j].state.value == "RUNNING" for j in reserved), (
        record.allocation.waiting,
        seen,
    )
    status = ctl.command("status")
    assert status.returncode == 0, status.stderr
    for job in held:
        (line,) = [row for row in status.stdout.splitlines() if row.startswith(f"{job} ")]
        assert re.search(r" waiting:price=[\d.e+-]+>utility=[\d.e+-]+$", line), line
    # The admitted jobs finish: the K80s are free again, and a job held pays for one now.
    for job in reserved:
        backend.cancel(job)
    for job in reserved:
        wait_for(lambda j=job: not backend.job(j).state.is_active, f"job {job} to end", 60)
    started: list[str] = []
    for _ in range(3):  # admitted at once; running by its schedule's first slot
        done = ctl.once()
        assert done.returncode == 0, done.stderr[-3000:]
        seen = wait_settled(backend, sorted(held))
        record = _last_round(ctl)
        started = [j for j in held if j in (record.allocation.reservations or {})]
        assert started, record.allocation.waiting
        if any(seen[j].state.value == "RUNNING" for j in started):
            break
    assert any(seen[j].state.value == "RUNNING" for j in started), seen
    assert all(
        record.plan.placements[j].gpu_types == ("k80",) for j in started
        if j in record.plan.placements
    )  # fmt: skip


def _last_round(ctl: LiveController) -> RoundRecord:
    store = ctl.store()
    try:
        return store.rounds()[-1]
    finally:
        store.close()
