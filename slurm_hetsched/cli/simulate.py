"""`hetsched simulate`: its arguments, checked into a SimulateRequest for the simulator."""

from __future__ import annotations

import argparse
from pathlib import Path

from slurm_hetsched.cli.banner import quiet_solver_banner
from slurm_hetsched.cli.values import (
    non_negative_seconds,
    parse_policy_options,
    positive_seconds,
)
from slurm_hetsched.core.fork_rounds import DEFAULT_ROUND_OVERHEAD_S, DEFAULT_STEP_EFFICIENCY
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.faithful.choices import CHOICES, FaithfulChoices


def add_simulate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    p.add_argument(
        "--gavel-faithful",
        action="store_true",
        help="replay the trace as Gavel's own simulator does (its rounds, resets, queues and "
        "policy formulations; no restart costs, no nodes); docs/simulation.md, "
        '"Gavel-faithful mode"',
    )
    p.add_argument(
        "--faithful-solver",
        choices=("auto", "ECOS", "CLARABEL"),
        default="auto",
        help="with --gavel-faithful: the interior-point solver; auto (default): ECOS, "
        "Gavel's own, where installed (GPL, `pip install ecos`), else CLARABEL (bundled "
        "with cvxpy)",
    )
    p.add_argument(
        "--faithful-except",
        metavar="NAME,...",
        default="",
        help="with --gavel-faithful: turn these of Gavel's behaviours back to ours, to measure "
        "what each does: " + ", ".join(CHOICES),
    )
    p.add_argument(
        "--unprofiled",
        metavar="TYPE,...|all",
        default="",
        help="what-if for a site without profiles: the policy's table lacks these GPU types "
        "(or every figure: all) and decides on estimates from datasheet figures and the "
        "neutral prior, learning each job's rates as it runs (jobs still run at the true "
        "table's rates)",
    )
    p.add_argument(
        "--no-explore",
        action="store_true",
        help="give a class in no table no stints on the types it could use: it is learned "
        "only where it happens to run",
    )
    p.add_argument(
        "--fork",
        type=int,
        default=1,
        metavar="N",
        help="HadarE: every job runs as up to N copies, one per node able to run it, averaged "
        "every round (default: 1, no forking; docs/simulation.md, HadarE)",
    )
    p.add_argument(
        "--fork-overhead",
        type=float,
        default=DEFAULT_ROUND_OVERHEAD_S,
        metavar="S",
        help="with --fork: seconds per copy and averaged round without training "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--fork-efficiency",
        type=float,
        default=DEFAULT_STEP_EFFICIENCY,
        metavar="X",
        help="with --fork: what a step of an averaged round counts, 0 < X <= 1 "
        "(default: %(default)s)",
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


def simulate_command(args: argparse.Namespace) -> int:
    from slurm_hetsched.core.explore import ExploreSettings
    from slurm_hetsched.core.fork_rounds import ForkSettings
    from slurm_hetsched.core.mechanism import RoundOptions
    from slurm_hetsched.sim.command import SimulateRequest, run_simulate
    from slurm_hetsched.sim.restart_costs import MAX_RESTART_S, is_restart_s, read_restart_costs
    from slurm_hetsched.sim.run import SimSettings

    quiet_solver_banner()

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
    if args.faithful_except and not args.gavel_faithful:
        raise ConfigError("--faithful-except: only with --gavel-faithful")

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
            round_s=positive_seconds(args.round, "--round"),
            restart_overhead_s=args.restart_overhead,
            restart_s_by_class=by_class,
            min_reset_interval_s=non_negative_seconds(args.reset_interval, "--reset-interval"),
            idle_nodes_on=not args.power_down_idle_nodes,
            seed=args.seed,
            explore=ExploreSettings(enabled=not args.no_explore),
            round_options=RoundOptions(
                queue=args.queue,
                work_conserving=not args.no_work_conservation,
                moves=args.moves,
                restart_s=args.restart_overhead,
                restart_share=args.restart_share,
            ),
        ),
        throughputs=args.throughputs,
        policy_options=parse_policy_options(args.policy_option),
        json_out=args.json,
        plots_dir=args.plots,
        trace_format=args.format,
        progress=not args.no_progress,
        faithful_solver=args.faithful_solver if args.gavel_faithful else None,
        faithful_choices=FaithfulChoices.except_for(args.faithful_except),
        unprofiled=tuple(t.strip() for t in args.unprofiled.split(",") if t.strip()),
        fork=ForkSettings(args.fork, args.fork_overhead, args.fork_efficiency),
    )
    run_simulate(request)
    return 0
