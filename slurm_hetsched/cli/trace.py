"""`hetsched trace generate`: its arguments, checked and passed to the trace generators."""

from __future__ import annotations

import argparse
from pathlib import Path

from slurm_hetsched.cli.values import non_negative_seconds, number_pair, positive_seconds
from slurm_hetsched.errors import ConfigError


def add_trace(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("trace", help="generate job traces for the simulator")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    g = actions.add_parser(
        "generate",
        help="a seeded synthetic trace in our JSONL or CSV format",
        description=(
            # A description is printed as it is (no %-formatting, unlike an argument's help).
            "Generate a trace with Poisson or bursty arrivals, Gavel's Philly-derived durations "
            "(80% 10^1.5-10^3 min, 20% 10^3-10^4 min) and GPU counts (multi: 70% 1, 10% 2, "
            "15% 4, 5% 8), job classes drawn from the throughput table, and optionally "
            "restart costs per class. docs/simulation.md."
        ),
    )
    g.add_argument("--output", "-o", required=True, metavar="FILE", help=".jsonl or .csv")
    g.add_argument("--jobs", "-n", type=int, metavar="N", help="number of jobs")
    rate = g.add_mutually_exclusive_group()
    rate.add_argument("--rate", type=float, metavar="JOBS_PER_HOUR", help="mean arrival rate")
    rate.add_argument(
        "--lam", type=float, metavar="S", help="mean seconds between arrivals (0: all at once)"
    )
    g.add_argument(
        "--arrivals",
        choices=("poisson", "bursty"),
        help="poisson (default; with --rate or --lam) or bursty: bursts of jobs separated by "
        "quiet periods, in the spirit of Sia's (SOSP'23) bursty workload",
    )
    g.add_argument(
        "--burst-jobs-max",
        type=int,
        metavar="N",
        help="with --arrivals bursty: each burst has 1..N jobs, uniform (default: 100)",
    )
    g.add_argument(
        "--burst-window",
        type=float,
        metavar="S",
        help="with --arrivals bursty: a burst's jobs arrive within S seconds of its first "
        "(default: 3600)",
    )
    g.add_argument(
        "--burst-quiet",
        type=float,
        metavar="S",
        help="with --arrivals bursty: mean quiet seconds from the end of one burst's window to "
        "the next burst, exponential (default: 14400)",
    )
    g.add_argument(
        "--restart-range",
        nargs="?",
        const="25,250",
        metavar="LO,HI",
        help="write restart costs: one per job class, uniform in [LO,HI] seconds, as each job's "
        "restart_s; alone: 25,250 (published checkpoint-restores, Sia SOSP'23)",
    )
    g.add_argument("--seed", type=int, default=0, help="seed (default: 0)")
    g.add_argument(
        "--mix", choices=("multi", "single"), default="multi", help="GPU counts (default: multi)"
    )
    g.add_argument(
        "--gpu-types", metavar="T1,T2", help="the cluster's GPU types (default: the table's)"
    )
    g.add_argument(
        "--due-factor",
        metavar="A,B",
        help="add due dates: arrival + U(A,B) x the job's fastest execution time",
    )
    g.add_argument(
        "--tardiness-weight",
        metavar="LO,HI",
        default="1,1",
        help="with due dates: cost per second late ~ U(LO,HI) (default: 1,1)",
    )
    g.add_argument("--throughputs", type=Path, metavar="FILE", help="throughput table file")
    g.add_argument("--format", choices=("jsonl", "csv"), help="output format (default: by name)")
    g.add_argument(
        "--scenario",
        choices=("andreas1", "andreas2", "hadar"),
        help="ANDREAS's evaluation instead: N nodes half V100 half T4 (1: 2 x V100 or 1 x T4 per "
        "node; 2: 4 x V100 or 2 x T4), 10 N jobs with due dates; also writes STEM.nodes.toml "
        "and STEM.throughputs.json for `hetsched simulate`; or hadar: Hadar's batch of 480 "
        "jobs (--jobs N) at time 0 on 15 x 4 GPUs (20 v100, 20 p100, 20 k80), also writes "
        "STEM.nodes.toml (docs/simulation.md)",
    )
    g.add_argument(
        "--nodes", type=int, metavar="N", help="with --scenario andreas1/2: number of nodes"
    )
    g.add_argument(
        "--t4-ratio",
        type=float,
        default=0.35,
        metavar="R",
        help="with --scenario: T4 steps/s = R x V100's (default: 0.35; docs/simulation.md)",
    )


def trace_command(args: argparse.Namespace) -> int:
    from slurm_hetsched.sim.arrivals import Bursts
    from slurm_hetsched.sim.generate import run_generate
    from slurm_hetsched.sim.restart_costs import check_restart_range
    from slurm_hetsched.sim.scenarios import run_generate_scenario

    if args.scenario == "hadar":
        return _hadar(args)
    if args.scenario:
        if args.nodes is None:
            raise ConfigError("--scenario needs --nodes N")
        given = _drawn_flags_given(args, "--jobs")
        if given:
            raise ConfigError(f"--scenario draws the jobs itself; drop {', '.join(given)}")
        print(
            run_generate_scenario(
                args.output,
                int(args.scenario[-1]),
                args.nodes,
                args.seed,
                throughputs=args.throughputs,
                t4_ratio=args.t4_ratio,
                fmt=args.format,
            )
        )
        return 0
    burst_flags = {
        flag: value
        for flag, value in (
            ("--burst-jobs-max", args.burst_jobs_max),
            ("--burst-window", args.burst_window),
            ("--burst-quiet", args.burst_quiet),
        )
        if value is not None
    }
    bursts = None
    if args.arrivals == "bursty":
        if args.jobs is None:
            raise ConfigError("--arrivals bursty needs --jobs N")
        given = [f for f, v in (("--rate", args.rate), ("--lam", args.lam)) if v is not None]
        if given:
            raise ConfigError(
                f"--arrivals bursty draws its own arrivals; drop {', '.join(given)} (set the "
                "bursts with --burst-jobs-max, --burst-window, --burst-quiet)"
            )
        if args.burst_jobs_max is not None and args.burst_jobs_max < 1:
            raise ConfigError(f"--burst-jobs-max {args.burst_jobs_max}: expected jobs >= 1")
        if args.burst_window is not None:
            positive_seconds(args.burst_window, "--burst-window")
        if args.burst_quiet is not None:
            non_negative_seconds(args.burst_quiet, "--burst-quiet")
        chosen = {
            "jobs_max": args.burst_jobs_max,
            "window_s": args.burst_window,
            "quiet_s": args.burst_quiet,
        }
        bursts = Bursts(**{name: value for name, value in chosen.items() if value is not None})
    elif burst_flags:
        raise ConfigError(f"{', '.join(burst_flags)} need --arrivals bursty")
    elif args.jobs is None or (args.rate is None and args.lam is None):
        raise ConfigError(
            "give --jobs N and one of --rate or --lam, or --arrivals bursty (or --scenario)"
        )
    restart_range = (
        check_restart_range(number_pair(args.restart_range, "--restart-range"), "--restart-range")
        if args.restart_range is not None
        else None
    )

    print(
        run_generate(
            args.output,
            n_jobs=args.jobs,
            seed=args.seed,
            rate_per_hour=args.rate,
            lam_s=args.lam,
            bursts=bursts,
            restart_range=restart_range,
            mix=args.mix,
            fmt=args.format,
            throughputs=args.throughputs,
            gpu_types=args.gpu_types.split(",") if args.gpu_types else None,
            due_factor=number_pair(args.due_factor, "--due-factor") if args.due_factor else None,
            tardiness_weight=number_pair(args.tardiness_weight, "--tardiness-weight"),
        )
    )
    return 0


def _hadar(args: argparse.Namespace) -> int:
    """`--scenario hadar`: its own nodes, and jobs drawn by the scenario (--jobs, --seed)."""
    from slurm_hetsched.sim.scenario_hadar import N_JOBS, run_generate_hadar

    given = _drawn_flags_given(args, "--nodes")
    if given:
        raise ConfigError(
            f"--scenario hadar has its own nodes and draws the jobs itself; drop {', '.join(given)}"
        )
    n_jobs = N_JOBS if args.jobs is None else args.jobs
    if n_jobs < 1:
        raise ConfigError(f"--jobs {n_jobs}: expected a whole number >= 1")
    print(
        run_generate_hadar(
            args.output, args.seed, n_jobs, throughputs=args.throughputs, fmt=args.format
        )
    )
    return 0


# The generator's flags a scenario sets itself (it draws the jobs).
_DRAWN_FLAGS = (
    "--rate",
    "--lam",
    "--due-factor",
    "--gpu-types",
    "--arrivals",
    "--burst-jobs-max",
    "--burst-window",
    "--burst-quiet",
    "--restart-range",
)


def _drawn_flags_given(args: argparse.Namespace, first: str) -> list[str]:
    """Of `first` and the flags a scenario sets itself, those given on the command line."""
    flags = (first, *_DRAWN_FLAGS)
    return [flag for flag in flags if getattr(args, flag[2:].replace("-", "_")) is not None]
