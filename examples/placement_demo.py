"""Demo on the dev cluster: GPU jobs placed by type, and one job moved to another GPU type.

Run it with `make demo` (which brings the dev cluster up first), or by hand:
    hetsched devcluster up && eval "$(hetsched devcluster env)" && python examples/placement_demo.py

It submits jobs the way slurm-hetsched's template does (an untyped `--gres=gpu:N`, the GPU type
as a node feature), shows where each one landed and which GPUs it sees, then moves one job
from a K80 to a V100 with the steps the controller uses (requeue-hold, retarget, release):
same job id, restart count 1. Exits non-zero if any job ends up on the wrong GPU type.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from slurm_hetsched.errors import HetschedError
from slurm_hetsched.slurm import CliSlurmBackend, GpuRequest, JobOptions, JobUpdate, SlurmCli

JOB_SCRIPT = """#!/bin/bash
# Logs each start (node, restart count, GPUs it sees), then works until cancelled.
echo "start node=$SLURMD_NODENAME restart=${SLURM_RESTART_COUNT:-0} cuda=$CUDA_VISIBLE_DEVICES"
for i in $(seq 1 1200); do sleep 0.5 & wait $!; done
"""

# (name, GPU type, GPUs): fits the default layout n1 = 2 x v100, n2 = 2 x p100, n3 = 4 x k80
# and leaves one V100 free for the move.
JOBS = [("resnet50", "v100", 1), ("transformer", "p100", 2), ("a3c", "k80", 2), ("lm", "k80", 1)]
MOVED = "lm"


def wait_for_start(log: Path, count: int, timeout_s: float = 60.0) -> dict[str, str]:
    """The fields of the `count`-th start line the job wrote."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            starts = [line for line in log.read_text().splitlines() if line.startswith("start")]
        except OSError:
            starts = []
        if len(starts) >= count:
            return dict(part.split("=", 1) for part in starts[count - 1].split()[1:])
        time.sleep(0.25)
    raise TimeoutError(f"no start #{count} in {log} after {timeout_s:.0f} s")


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def run(backend: CliSlurmBackend, folder: Path, job_ids: list[str]) -> bool:
    """Submit, check placements, move one job; `job_ids` collects what was submitted."""
    node_types = {n.name: ",".join(n.gpus) for n in backend.list_nodes()}
    print("nodes:", ", ".join(f"{name}={types}" for name, types in node_types.items()))
    submitted = {}
    for name, gpu_type, count in JOBS:
        log = folder / f"{name}.log"
        options = JobOptions(
            job_name=name,
            gpus=GpuRequest(count),
            constraint=gpu_type,
            requeue=True,
            open_mode_append=True,
            output=str(log),
        )
        submitted[name] = (backend.submit(JOB_SCRIPT, [options]), gpu_type, count, log)
        job_ids.append(submitted[name][0])
    print(f"submitted {len(JOBS)} jobs (untyped --gres=gpu:N, GPU type as --constraint)\n")

    ok = True
    rows = [("JOB", "NAME", "WANTS", "NODE", "NODE'S GPUS", "CUDA_VISIBLE_DEVICES", "RIGHT TYPE")]
    for name, (job_id, gpu_type, count, log) in submitted.items():
        start = wait_for_start(log, 1)
        job = backend.job(job_id)
        right = gpu_type in node_types.get(job.nodes, "") and len(start["cuda"].split(",")) == count
        ok &= right
        rows.append(
            (
                job_id,
                name,
                f"{gpu_type} x{count}",
                job.nodes,
                node_types.get(job.nodes, "?"),
                start["cuda"],
                "yes" if right else "NO",
            )
        )
    print(table(rows))

    job_id, _, count, log = submitted[MOVED]
    print(f"\nmoving job {job_id} ({MOVED}) from k80 to v100: requeue-hold, retarget, release")
    backend.requeue_hold(job_id)
    while not backend.job(job_id).held:
        time.sleep(0.2)
    backend.retarget(job_id, "v100", count)
    backend.release(job_id)
    backend.update(job_id, JobUpdate(start_now=True))
    start = wait_for_start(log, 2)
    job = backend.job(job_id)
    moved_ok = "v100" in node_types.get(job.nodes, "") and start["restart"] == "1"
    print(
        f"job {job.job_id} now runs on {job.nodes} ({node_types.get(job.nodes)}), "
        f"restart count {start['restart']}, GPUs {start['cuda']}: "
        f"{'moved' if moved_ok else 'NOT MOVED'}"
    )
    return ok and moved_ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--keep-jobs",
        action="store_true",
        help="leave the demo jobs running (look at them with squeue)",
    )
    args = parser.parse_args()
    backend = CliSlurmBackend(SlurmCli(slurm_conf=os.environ.get("SLURM_CONF")))
    folder = Path(tempfile.mkdtemp(prefix="hetsched-demo-"))
    job_ids: list[str] = []
    try:
        ok = run(backend, folder, job_ids)
    except (HetschedError, TimeoutError) as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        ok = False
    finally:
        if not args.keep_jobs:
            for job_id in job_ids:
                backend.cancel(job_id)
    print(
        "\n" + ("demo OK" if ok else "demo FAILED") + ": the dev cluster is still up; "
        "`hetsched devcluster status` shows it, `make down` stops it."
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
