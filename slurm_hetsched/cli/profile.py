"""`hetsched profile`: measure a job class on the cluster's GPU types and write the site
throughput table the controller reads (docs/throughput.md, "Profiling a class")."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType

from slurm_hetsched.errors import ConfigError


def add_profile(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from slurm_hetsched.profiling.plan import DEFAULT_STEPS, DEFAULT_TIMEOUT_S

    p = sub.add_parser(
        "profile",
        usage="%(prog)s --class NAME --output FILE [options] -- COMMAND ...",
        help="measure a job class's steps/s on each GPU type and write a site throughput table",
        description=(
            "Submit one short job of the training command per GPU type and GPU count (typed "
            "--gres=gpu:TYPE:N on one node, no hetsched comment, so the controller leaves it "
            "alone), wait for them, read the steps/s each job's wrapper measured, and write "
            "them to --output as class -> count -> type entries in the hetsched-throughputs/1 "
            "format, merged into the file if it exists (the same entries replaced, the rest "
            "kept). The command must train through the wrapper (JobSession or TorchTrainer) "
            "and take its step count where it says {steps}. Point the controller's "
            "site.throughputs at the file. See docs/throughput.md."
        ),
        epilog=(
            "Example: hetsched profile --class 'BERT-base' --gpus 1,2 --output "
            "/etc/hetsched/throughputs.json -- ~/venvs/train/bin/python train.py "
            "--steps {steps}"
        ),
    )
    p.add_argument(
        "--class",
        dest="job_class",
        required=True,
        metavar="NAME",
        help="the class name to write (the class= jobs of this kind give in their spec)",
    )
    p.add_argument(
        "--output",
        type=Path,
        required=True,
        metavar="FILE",
        help="the throughput file (JSON) to write, or to merge into if it exists",
    )
    p.add_argument(
        "--gpu-types",
        metavar="T1,T2",
        help="GPU types to measure (default: every GPU type of the cluster's nodes, or of "
        "--partition's)",
    )
    p.add_argument(
        "--gpus",
        default="1",
        metavar="N1,N2",
        help="GPU counts to measure each type at, on one node (default: 1)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_STEPS,
        metavar="N",
        help=f"training steps per job, put where the command says {{steps}} (default: "
        f"{DEFAULT_STEPS}); the rate is over the last 60 s of training",
    )
    p.add_argument("--partition", metavar="NAME", help="partition to submit to")
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"seconds to wait for all jobs, queueing included; then they are cancelled "
        f"(default: {DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--export-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a variable for the jobs, on top of this shell's environment (repeatable), e.g. "
        "HETSCHED_EMULATE_GPU_SPEED=1 on the dev cluster",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="where the run folder of job outputs and state folders is made; the compute "
        "nodes must see it at the same path (default: the current folder)",
    )
    p.add_argument(
        "training_command",  # not `command`: the top-level parser's dest for the subcommand
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help="the training command, after `--`; relative paths are from the current folder",
    )


def profile_command(args: argparse.Namespace) -> int:
    from slurm_hetsched.profiling.plan import (
        ProfileRequest,
        parse_export,
        parse_gpu_counts,
        parse_gpu_types,
    )
    from slurm_hetsched.profiling.run import run_profile
    from slurm_hetsched.slurm import CliSlurmBackend, SlurmCli

    command = list(args.training_command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not args.workdir.is_dir():
        raise ConfigError(f"--workdir {args.workdir}: not a folder")
    request = ProfileRequest(
        job_class=args.job_class,
        command=tuple(command),
        output=args.output,
        gpu_types=None if args.gpu_types is None else parse_gpu_types(args.gpu_types),
        gpu_counts=parse_gpu_counts(args.gpus),
        steps=args.steps,
        partition=args.partition,
        timeout_s=args.timeout,
        export=parse_export(args.export_env),
        workdir=args.workdir,
    )
    backend = CliSlurmBackend(SlurmCli(timeout_s=60, retries=2))
    # SIGTERM (a batch system's or a test's timeout) cancels the jobs as Ctrl-C does.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        run_profile(request, backend, out=sys.stdout)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
