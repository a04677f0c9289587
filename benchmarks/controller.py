"""Controller time per round on the dev cluster, split into observe, decide, plan, enact and
record, with 50, 200 and 1000 managed jobs in the queue. Prints tables; asserts nothing.

    make up && eval "$(.venv/bin/hetsched devcluster env)"
    .venv/bin/python benchmarks/controller.py [--sizes 50,200,1000] [--rounds 4]

Each size submits that many managed jobs (held, untyped `--gres=gpu:1`, a job spec in the
comment, classes taken in turn from the throughput table), each a sleeper that ignores the
checkpoint signal as the template does until its wrapper is up. Then the real controller
(in this process, its own store and state root in a temporary folder, the default policy
max_min_fairness_perf) runs `--rounds` rounds of `--round` seconds, and the jobs are
cancelled. The dev cluster has 8 GPUs, so every round starts, keeps or moves at most 8 jobs
whatever the queue's length: observe, decide and plan should grow with the queue, enact with
the changes. The sleepers never ack, so a move waits out the ack timeout (`--ack-timeout`,
1 s here) before its requeue.

Targets (issue 7): observe + decide + plan under 2 s at 1000 jobs; enact growing with the
number of changes, not of jobs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from slurm_hetsched.controller.commands import service_settings
from slurm_hetsched.controller.config import ControllerConfig
from slurm_hetsched.controller.service import Controller
from slurm_hetsched.data_files import shipped_throughputs
from slurm_hetsched.slurm import CliSlurmBackend, GpuRequest, JobOptions, SlurmCli

JOB_NAME = "hetsched-bench"
SLEEPER = """#!/bin/bash
#SBATCH --hold
#SBATCH --requeue
# Ignores the checkpoint signal (as the template does while the wrapper starts); dies on the
# SIGTERM of a requeue.
trap '' USR2
sleep 3600 & wait
"""
PHASES = ("observe", "decide", "plan", "enact", "record")


def submit_sleepers(backend: CliSlurmBackend, n: int, folder: Path) -> list[str]:
    classes = [c for c in shipped_throughputs().classes if "(" in c or c in ("A3C", "CycleGAN")]
    ids = []
    for i in range(n):
        options = JobOptions(
            job_name=JOB_NAME,
            gpus=GpuRequest(1),
            comment=f"hetsched:class={classes[i % len(classes)]};steps=1000000",
            output=str(folder / "sleeper-%j.out"),
            chdir=str(folder),
        )
        ids.append(backend.submit(SLEEPER, [options]))
    return ids


def cancel_all(backend: CliSlurmBackend) -> None:
    subprocess.run(["scancel", f"--name={JOB_NAME}"], check=False)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        active = [j for j in backend.list_jobs() if j.name == JOB_NAME and j.state.is_active]
        if not active:
            return
        time.sleep(1)


def run_size(n: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    backend = CliSlurmBackend(SlurmCli())
    rows = []
    with tempfile.TemporaryDirectory(prefix="hetsched-bench-") as scratch:
        folder = Path(scratch)
        started = time.perf_counter()
        submit_sleepers(backend, n, folder)
        submit_s = time.perf_counter() - started
        config = ControllerConfig(
            round_s=args.round,
            min_reset_interval_s=0.0,
            store=folder / "rounds.sqlite",
            state_root=folder / "state",
            ack_timeout_s=args.ack_timeout,
            requeue_timeout_s=60.0,
            slurm_conf=os.environ["SLURM_CONF"],
            retries=1,
            retry_backoff_s=0.5,
        )
        controller = Controller(service_settings(config))
        try:
            for _ in range(args.rounds):
                began = time.monotonic()
                summary = controller.run_round()
                fields = summary.fields
                rows.append(
                    {
                        "jobs": n,
                        "submit_s": submit_s,
                        "round": fields.get("round", "-"),
                        **{p: fields.get(f"{p}_s", float("nan")) for p in PHASES},
                        "changes": sum(
                            int(fields.get(k, 0)) for k in ("moved", "started", "stopped")
                        ),
                        "comments": controller.cluster.last.comments_written,
                        "recomputed": fields.get("recomputed", 0),
                    }
                )
                time.sleep(max(0.0, began + args.round - time.monotonic()))
        finally:
            controller.close()
            cancel_all(backend)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,200,1000", help="queued managed jobs per run")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per size (4)")
    parser.add_argument("--round", type=float, default=10.0, help="round length, s (10)")
    parser.add_argument("--ack-timeout", type=float, default=1.0, help="ack timeout, s (1)")
    args = parser.parse_args(argv)
    if not os.environ.get("SLURM_CONF"):
        print('needs the dev cluster: make up && eval "$(.venv/bin/hetsched devcluster env)"')
        return 2
    from slurm_hetsched.cli import _quiet_solver_banner

    _quiet_solver_banner()
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        print(f"{size} jobs ...", file=sys.stderr)
        rows.extend(run_size(size, args))
    header = (
        f"{'jobs':>5} {'round':>5} {'observe':>8} {'decide':>7} {'plan':>6} {'o+d+p':>6} "
        f"{'enact':>6} {'record':>6} {'changes':>7} {'comments':>8} {'solved':>6}"
    )
    print("seconds per phase of each round (the first round of a size writes every comment)")
    print(header)
    for r in rows:
        odp = r["observe"] + r["decide"] + r["plan"]
        print(
            f"{r['jobs']:>5} {r['round']:>5} {r['observe']:>8.3f} {r['decide']:>7.3f} "
            f"{r['plan']:>6.3f} {odp:>6.3f} {r['enact']:>6.2f} {r['record']:>6.3f} "
            f"{r['changes']:>7} {r['comments']:>8} {'yes' if r['recomputed'] else 'no':>6}"
        )
    submits = {r["jobs"]: r["submit_s"] for r in rows}
    timed = ", ".join(f"{n} in {s:.0f} s" for n, s in submits.items())
    print(f"\nsubmitting the sleepers: {timed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
