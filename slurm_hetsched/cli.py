"""Command line entry point `hetsched`: argv and environment -> a driver call.

This is the only module that parses arguments or configures logging; the drivers
and adapters it calls take plain values.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slurm_hetsched import __version__
from slurm_hetsched.errors import ConfigError, HetschedError

logger = logging.getLogger(__name__)


def _add_devcluster(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "devcluster",
        help="bring a local Slurm 22.05 cluster with fake typed GPUs up or down",
        description=(
            "A real slurmctld and one slurmd per node on this machine, with fake typed GPUs, "
            "for the demo, the tests and trying the controller. Needs root; installs Slurm "
            "and munge from Debian's packages when they are missing."
        ),
    )
    p.add_argument(
        "--config",
        type=Path,
        help="node layout (TOML); default: etc/devcluster.toml of this checkout, "
        "else the built-in n1=2xv100, n2=2xp100, n3=4xk80",
    )
    p.add_argument(
        "--dir",
        type=Path,
        help="folder holding the cluster's config, state, logs and pid files; default: "
        "$HETSCHED_DEVCLUSTER_DIR, else .devcluster/ of this checkout, else a folder in the "
        "system temp dir",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser(
        "up",
        help="install if needed, start, wait until every node is idle",
        description=(
            "Install Slurm and munge if missing, start the daemons that are not running and "
            "wait until every node is idle. A slurmctld that died is restarted from the state "
            "it saved, so queued and running jobs are kept; after `down` (which cancels every "
            "job) and on the first start, slurmctld starts clean."
        ),
    )
    up.add_argument(
        "--spank",
        action="append",
        type=Path,
        metavar="PATH",
        help="register this SPANK plugin .so as `optional` in etc/plugstack.conf (repeatable; "
        "the list replaces the registered one; build ours with `make -C spank`). On a running "
        "cluster new jobs get it at once",
    )
    up.add_argument(
        "--clean",
        action="store_true",
        help="start slurmctld without the state it saved, discarding every saved job and node "
        "state (a stopped cluster only: run `down` first). Without it, a cluster whose "
        "slurmctld died is restarted with its jobs; after `down` it starts clean anyway",
    )
    actions.add_parser(
        "install",
        help="only install Slurm, its headers and munge from Debian's packages if missing",
    )
    actions.add_parser("down", help="cancel all jobs and stop the daemons this tool started")
    actions.add_parser("status", help="print nodes, GPU types and jobs")
    actions.add_parser("env", help="print `export SLURM_CONF=...` for this cluster (for eval)")


def _run_devcluster(args: argparse.Namespace) -> int:
    from slurm_hetsched.devcluster import DevCluster, default_config_path, default_dir
    from slurm_hetsched.nodelayout import load_devcluster_config

    config_path = args.config or default_config_path()
    config = load_devcluster_config(config_path)
    folder = args.dir or (
        Path(os.environ["HETSCHED_DEVCLUSTER_DIR"])
        if os.environ.get("HETSCHED_DEVCLUSTER_DIR")
        else default_dir()
    )
    cluster = DevCluster(config, folder.resolve())
    if args.action == "up":
        print(cluster.up(spank_plugins=args.spank, clean=args.clean))
    elif args.action == "install":
        print(cluster.install())
    elif args.action == "down":
        print(cluster.down())
    elif args.action == "status":
        print(cluster.status())
    elif args.action == "env":
        print(f"export SLURM_CONF={shlex.quote(str(cluster.slurm_conf))}")
    return 0


def _add_allocate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "allocate",
        help="what-if: one policy's allocation for a problem in JSON",
        description=(
            "Solve one allocation problem (GPUs per type, jobs with throughputs per type) with "
            "one policy and print the time fraction of each job on each GPU type as JSON. "
            "The same decision code as the controller and the simulator. Format: "
            "docs/interfaces.md; examples: examples/*.json."
        ),
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--problem", type=Path, metavar="FILE", help="problem JSON ('-': stdin)")
    what.add_argument("--list", action="store_true", help="list the policies and exit")
    what.add_argument(
        "--list-classes",
        action="store_true",
        help="list the job classes of the throughput table (the class= of a job spec) and exit",
    )
    p.add_argument(
        "--policy",
        default="max_min_fairness_perf",
        help="policy name (default: %(default)s; see --list)",
    )
    p.add_argument(
        "--policy-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a policy option, e.g. energy_slack=0.1 (repeatable; overrides the file's "
        "policy_options; docs/policies.md lists them)",
    )
    p.add_argument("--compact", action="store_true", help="print JSON on one line")


def _quiet_solver_banner() -> None:
    """HiGHS prints a banner on the process's C-level stdout when its first solver object is
    made, which would corrupt the JSON these commands print: make that first one with stdout
    pointed at /dev/null."""
    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def _run_allocate(args: argparse.Namespace) -> int:
    from slurm_hetsched.allocate import policy_descriptions, run_allocate

    _quiet_solver_banner()

    if args.list_classes:
        from slurm_hetsched import data_files

        for name in data_files.shipped_throughputs().classes:
            print(name)
        return 0
    if args.list:
        descriptions = policy_descriptions()
        width = max(len(name) for name in descriptions)
        for name, description in descriptions.items():
            print(f"{name.ljust(width)}  {description}")
        return 0
    result = run_allocate(
        _read_json(args.problem), args.policy, options=_options(args.policy_option)
    )
    print(json.dumps(result, indent=None if args.compact else 2))
    return 0


def _read_json(path: Path) -> Any:
    """A JSON document from a file or, for '-', standard input; ConfigError if unreadable."""
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc


def _add_simulate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "simulate",
        help="replay a trace on a simulated cluster with one or several policies",
        description=(
            "Replay a trace of training jobs on a described cluster, round by round, with the "
            "same policy and mechanism code as the live controller, and report average and "
            "99th-percentile job completion time, makespan, utilization, energy, tardiness, "
            "preemptions, moves and the GPU-hours lost to restarts. "
            "docs/simulation.md describes the trace formats and the model."
        ),
    )
    p.add_argument(
        "--trace",
        required=True,
        metavar="FILE|NAME",
        help="trace file (.trace Gavel, .jsonl, .csv) or a shipped Gavel trace: "
        "max_min_fairness, minimize_makespan, artifact_evaluation, small_test",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--policy", default="max_min_fairness_perf", help="policy (default: %(default)s)"
    )
    which.add_argument(
        "--compare", metavar="P1,P2,...", help="run several policies and print one table"
    )
    p.add_argument(
        "--cluster",
        default="v100=36,p100=36,k80=36",
        metavar="COUNTS|FILE.toml",
        help="GPUs per type, e.g. v100=8,p100=16,k80=24, or a node layout file in the format "
        "of etc/devcluster.toml (default: %(default)s)",
    )
    p.add_argument(
        "--gpus-per-server",
        type=int,
        default=4,
        metavar="N",
        help="with counts: GPUs per server (default: %(default)s)",
    )
    p.add_argument(
        "--round", type=float, default=360.0, metavar="S", help="round length (default: 360 s)"
    )
    p.add_argument(
        "--restart-overhead",
        type=float,
        default=10.0,
        metavar="S",
        help="restart cost: seconds a job moved to other GPUs (or restarted after a stop) makes "
        "no progress, for jobs whose cost neither the trace (restart_s) nor --restart-costs "
        "gives (default: 10)",
    )
    p.add_argument(
        "--restart-costs",
        type=Path,
        metavar="FILE",
        help='restart costs per job class, a TOML ("class" = seconds) or JSON ({"class": '
        "seconds}) file; over --restart-overhead, under a trace job's own restart_s",
    )
    p.add_argument(
        "--moves",
        choices=("amortized", "plain"),
        default="amortized",
        help="round mechanism: move or stop a running job only once the move pays for its "
        "restart (amortized; default), or every round as Gavel does (plain); docs/mechanism.md",
    )
    p.add_argument(
        "--restart-share",
        type=float,
        default=0.1,
        metavar="X",
        help="with --moves amortized: the largest share of a job's time on GPUs that its "
        "restarts may take, 0 < X <= 1 (default: 0.1)",
    )
    p.add_argument(
        "--reset-interval",
        type=float,
        default=1920.0,
        metavar="S",
        help="minimum seconds between resets of the received time (default: 1920, Gavel's)",
    )
    p.add_argument(
        "--power-down-idle-nodes",
        action="store_true",
        help="count nodes with no busy GPU as powered off (default: idle power)",
    )
    p.add_argument(
        "--queue",
        choices=("per_type", "global"),
        default="per_type",
        help="round mechanism: one queue per GPU type, fastest type first (Gavel's code; "
        "default), or one global queue by priority (docs/mechanism.md)",
    )
    p.add_argument(
        "--no-work-conservation",
        action="store_true",
        help="leave GPUs the allocation does not use idle instead of filling them with jobs "
        "that can run there (FIFO and cost policies never fill)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of random policies (default: 0)")
    p.add_argument("--throughputs", type=Path, metavar="FILE", help="throughput table file")
    p.add_argument(
        "--policy-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a policy option, e.g. energy_slack=0.1 (repeatable)",
    )
    p.add_argument("--json", metavar="OUT", help="write the results as JSON ('-': stdout only)")
    p.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots into DIR")
    p.add_argument("--format", choices=("gavel", "jsonl", "csv"), help="the trace's format")
    p.add_argument("--no-progress", action="store_true", help="never show a progress bar")


def _run_simulate(args: argparse.Namespace) -> int:
    from slurm_hetsched.core.mechanism import RoundOptions
    from slurm_hetsched.sim.command import SimulateRequest, run_simulate
    from slurm_hetsched.sim.restart_costs import MAX_RESTART_S, is_restart_s, read_restart_costs
    from slurm_hetsched.sim.run import SimSettings

    _quiet_solver_banner()

    if not is_restart_s(args.restart_overhead):
        raise ConfigError(
            f"--restart-overhead {args.restart_overhead}: expected seconds from 0 to "
            f"{MAX_RESTART_S:.0f} (a day)"
        )
    if not 0 < args.restart_share <= 1:
        raise ConfigError(
            f"--restart-share {args.restart_share}: expected a share of the job's time on GPUs, "
            "0 < X <= 1 (e.g. 0.1)"
        )
    by_class = read_restart_costs(args.restart_costs) if args.restart_costs else {}

    policies = (
        tuple(p.strip() for p in args.compare.split(",") if p.strip())
        if args.compare
        else (args.policy,)
    )
    request = SimulateRequest(
        trace=args.trace,
        policies=policies,
        cluster=args.cluster,
        gpus_per_server=args.gpus_per_server,
        settings=SimSettings(
            round_s=_positive(args.round, "--round"),
            restart_overhead_s=args.restart_overhead,
            restart_s_by_class=by_class,
            min_reset_interval_s=_non_negative(args.reset_interval, "--reset-interval"),
            idle_nodes_on=not args.power_down_idle_nodes,
            seed=args.seed,
            round_options=RoundOptions(
                queue=args.queue,
                work_conserving=not args.no_work_conservation,
                moves=args.moves,
                restart_s=args.restart_overhead,
                restart_share=args.restart_share,
            ),
        ),
        throughputs=args.throughputs,
        policy_options=_options(args.policy_option),
        json_out=args.json,
        plots_dir=args.plots,
        trace_format=args.format,
        progress=not args.no_progress,
    )
    run_simulate(request)
    return 0


def _add_trace(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        choices=("andreas1", "andreas2"),
        help="ANDREAS's evaluation instead: N nodes half V100 half T4 (1: 2 x V100 or 1 x T4 per "
        "node; 2: 4 x V100 or 2 x T4), 10 N jobs with due dates; also writes STEM.nodes.toml "
        "and STEM.throughputs.json for `hetsched simulate` (docs/simulation.md)",
    )
    g.add_argument("--nodes", type=int, metavar="N", help="with --scenario: number of nodes")
    g.add_argument(
        "--t4-ratio",
        type=float,
        default=0.35,
        metavar="R",
        help="with --scenario: T4 steps/s = R x V100's (default: 0.35; docs/simulation.md)",
    )


def _run_trace(args: argparse.Namespace) -> int:
    from slurm_hetsched.sim.arrivals import Bursts
    from slurm_hetsched.sim.generate import run_generate
    from slurm_hetsched.sim.restart_costs import check_restart_range
    from slurm_hetsched.sim.scenarios import run_generate_scenario

    if args.scenario:
        if args.nodes is None:
            raise ConfigError("--scenario needs --nodes N")
        given = [
            flag
            for flag, value in (
                ("--jobs", args.jobs),
                ("--rate", args.rate),
                ("--lam", args.lam),
                ("--due-factor", args.due_factor),
                ("--gpu-types", args.gpu_types),
                ("--arrivals", args.arrivals),
                ("--burst-jobs-max", args.burst_jobs_max),
                ("--burst-window", args.burst_window),
                ("--burst-quiet", args.burst_quiet),
                ("--restart-range", args.restart_range),
            )
            if value is not None
        ]
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
            _positive(args.burst_window, "--burst-window")
        if args.burst_quiet is not None:
            _non_negative(args.burst_quiet, "--burst-quiet")
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
        check_restart_range(_pair(args.restart_range, "--restart-range"), "--restart-range")
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
            due_factor=_pair(args.due_factor, "--due-factor") if args.due_factor else None,
            tardiness_weight=_pair(args.tardiness_weight, "--tardiness-weight"),
        )
    )
    return 0


def _pair(text: str, flag: str) -> tuple[float, float]:
    parts = text.split(",")
    try:
        a, b = (float(x) for x in parts)
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected two numbers A,B") from None
    return a, b


def _positive(value: float, flag: str) -> float:
    if not value > 0:
        raise ConfigError(f"{flag} {value}: expected a number of seconds > 0")
    return value


def _non_negative(value: float, flag: str) -> float:
    if not value >= 0:
        raise ConfigError(f"{flag} {value}: expected a number of seconds >= 0")
    return value


def _options(items: Sequence[str]) -> dict[str, str]:
    """KEY=VALUE strings -> {key: value}; the policy checks and converts each value."""
    options: dict[str, str] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"--policy-option {item!r}: expected KEY=VALUE, e.g. energy_slack=0.1"
            )
        options[key.strip()] = raw.strip()
    return options


DEFAULT_CONFIG = Path("/etc/hetsched/hetsched.toml")


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"controller config (TOML; default: $HETSCHED_CONFIG, else {DEFAULT_CONFIG} if it "
        "exists, else built-in defaults; see etc/hetsched.toml)",
    )


def _load_controller_config(args: argparse.Namespace) -> Any:
    from slurm_hetsched.controller.config import load_config

    path = args.config or os.environ.get("HETSCHED_CONFIG")
    if path is None and DEFAULT_CONFIG.exists():
        path = DEFAULT_CONFIG
    return load_config(path)


def _add_controller(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "controller",
        help="run the scheduler service on a Slurm cluster (admins; runs as root)",
        description=(
            "Round after round: read the Slurm queue and the nodes' GPU types, compute a "
            "heterogeneity-aware allocation, and move managed jobs (checkpoint signal, "
            "requeue-hold, retarget, release). Logs one key=value line per round on stderr. "
            "One controller at a time; after a crash the next start settles what was under way. "
            "SIGTERM or SIGINT stops it after the round under way. See docs/admin.md."
        ),
    )
    _add_config(p)
    p.add_argument("--once", action="store_true", help="run a single round, then exit")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="observe and plan one round, print the actions it would take; change no job, "
        "record nothing, take no lock (safe beside the running service)",
    )
    p.add_argument(
        "--round",
        type=float,
        metavar="S",
        help="round length in seconds (overrides controller.round_s)",
    )
    p.add_argument(
        "--policy",
        metavar="NAME",
        help="policy (overrides controller.policy; `hetsched allocate --list` lists them)",
    )
    p.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        help="overrides controller.log_level",
    )


def _run_controller(args: argparse.Namespace) -> int:
    from slurm_hetsched.controller.commands import run_controller
    from slurm_hetsched.controller.config import check_policy
    from slurm_hetsched.controller.logline import setup_logging

    config = _load_controller_config(args)
    if args.round is not None:
        config = config.replace(round_s=_positive(args.round, "--round"))
    if args.policy is not None:
        config = config.replace(policy=args.policy)
        check_policy(config)
    setup_logging(args.log_level or config.log_level)
    _quiet_solver_banner()
    return run_controller(config, once=args.once, dry_run=args.dry_run)


def _add_rounds(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "rounds",
        help="print the controller's round history",
        description=(
            "The rounds the controller recorded in its store (controller.store): what it "
            "decided and did. Read-only: safe beside the running service."
        ),
    )
    _add_config(p)
    p.add_argument("--last", type=int, metavar="N", help="only the last N rounds")
    p.add_argument(
        "--job",
        metavar="KEY",
        help="one job's rounds: target, share, priority and every action with its outcome "
        "(KEY: the job key, i.e. its first Slurm job id or the key= of its spec)",
    )


def _run_rounds(args: argparse.Namespace) -> int:
    from slurm_hetsched.controller.commands import show_rounds

    if args.last is not None and args.last < 1:
        raise ConfigError(f"--last must be >= 1, got {args.last}")
    return show_rounds(_load_controller_config(args), last=args.last, job=args.job, out=sys.stdout)


def _add_status(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "status",
        help="print nodes, GPU types, managed jobs and their shares, and jobs not managed",
        description=(
            "What the controller sees now: nodes and the GPUs busy with jobs it does not "
            "manage, the managed jobs with the last round's target and share, and the jobs with "
            "a hetsched spec it refuses, with why. Read-only: reads Slurm and the store."
        ),
    )
    _add_config(p)


def _run_status(args: argparse.Namespace) -> int:
    from slurm_hetsched.controller.commands import show_status

    return show_status(_load_controller_config(args), out=sys.stdout)


def _add_handback(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "handback",
        help="give every managed job back to Slurm as a plain job (controller stopped)",
        description=(
            "Release every managed job to Slurm: the target the controller set is removed "
            "(pending jobs), its hold lifted, and the admin comment says why. Running jobs run "
            "on. Takes the controller's lock: stop the controller first. One line per job and "
            "a summary; exits 1 if any job failed. See docs/handback.md."
        ),
    )
    _add_config(p)
    p.add_argument(
        "--reason",
        metavar="TEXT",
        help="why, in each job's admin comment `hetsched handed-back: TEXT` (default: "
        "'an admin ran hetsched handback')",
    )
    p.add_argument("--dry-run", action="store_true", help="print what it would do; change nothing")


def _run_handback(args: argparse.Namespace) -> int:
    from slurm_hetsched.controller.handback import DEFAULT_REASON
    from slurm_hetsched.controller.handback_command import run_handback

    reason = DEFAULT_REASON if args.reason is None else args.reason
    if not reason.strip():
        raise ConfigError("--reason must not be empty")
    config = _load_controller_config(args)
    return run_handback(config, reason=reason, dry_run=args.dry_run, out=sys.stdout)


def _add_watchdog(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "watchdog",
        help="hand the managed jobs back if the controller is gone (systemd timer)",
        description=(
            "If no controller holds the lock and its last heartbeat is older than the limit, "
            "run `hetsched handback` with the reason 'controller silent since <time>'; else "
            "print that the controller is alive. See docs/handback.md."
        ),
    )
    _add_config(p)
    p.add_argument(
        "--after",
        type=float,
        metavar="SECONDS",
        help="silence that counts as gone (overrides watchdog.after_s; default: 900 s or 3 "
        "rounds, whichever is longer)",
    )


def _run_watchdog(args: argparse.Namespace) -> int:
    from slurm_hetsched.controller.watchdog import run_watchdog

    config = _load_controller_config(args)
    after = config.watchdog_after() if args.after is None else _non_negative(args.after, "--after")
    return run_watchdog(config, after_s=after, out=sys.stdout)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hetsched",
        description=(
            "Heterogeneity-aware GPU scheduling for Slurm: moves training jobs between GPU "
            "types so they finish sooner and fairer."
        ),
        epilog="Log level: HETSCHED_LOG_LEVEL (DEBUG, INFO, WARNING; default WARNING).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_allocate(sub)
    _add_simulate(sub)
    _add_trace(sub)
    _add_controller(sub)
    _add_rounds(sub)
    _add_status(sub)
    _add_handback(sub)
    _add_watchdog(sub)
    _add_devcluster(sub)
    return parser


_RUNNERS = {
    "allocate": _run_allocate,
    "simulate": _run_simulate,
    "trace": _run_trace,
    "devcluster": _run_devcluster,
    "controller": _run_controller,
    "rounds": _run_rounds,
    "status": _run_status,
    "handback": _run_handback,
    "watchdog": _run_watchdog,
}


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def main(argv: Sequence[str] | None = None) -> int:
    level = (os.environ.get("HETSCHED_LOG_LEVEL") or "WARNING").strip().upper()
    if level not in _LOG_LEVELS:
        print(
            f"hetsched: error: HETSCHED_LOG_LEVEL={os.environ['HETSCHED_LOG_LEVEL']!r} is not a "
            f"log level; use one of {', '.join(_LOG_LEVELS)} (any case)",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return _RUNNERS[args.command](args)
    except HetschedError as exc:
        print(f"hetsched: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
