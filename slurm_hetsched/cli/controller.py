"""The commands around the live controller: `controller`, `rounds`, `status`, `tenants`,
`handback` and `watchdog`, their arguments and the controller config they all read."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from slurm_hetsched.cli.banner import quiet_solver_banner
from slurm_hetsched.cli.values import non_negative_seconds, positive_count, positive_seconds
from slurm_hetsched.errors import ConfigError

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


def add_controller(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def controller_command(args: argparse.Namespace) -> int:
    from slurm_hetsched.controller.commands import run_controller
    from slurm_hetsched.controller.config import check_policy
    from slurm_hetsched.controller.logline import setup_logging

    config = _load_controller_config(args)
    if args.round is not None:
        config = config.replace(round_s=positive_seconds(args.round, "--round"))
    if args.policy is not None:
        config = config.replace(policy=args.policy)
        check_policy(config)
    setup_logging(args.log_level or config.log_level)
    quiet_solver_banner()
    return run_controller(config, once=args.once, dry_run=args.dry_run)


def add_rounds(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def rounds_command(args: argparse.Namespace) -> int:
    from slurm_hetsched.controller.commands import show_rounds

    last = positive_count(args.last, "--last")
    return show_rounds(_load_controller_config(args), last=last, job=args.job, out=sys.stdout)


def add_status(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def status_command(args: argparse.Namespace) -> int:
    from slurm_hetsched.controller.commands import show_status

    return show_status(_load_controller_config(args), out=sys.stdout)


def add_tenants(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "tenants",
        help="print each account's GPU quota, borrowing, lending, payments and fairness",
        description=(
            "Tenant policies (astraea): per Slurm account, its GPU quota per type, the GPUs "
            "its jobs hold now, GPU-hours borrowed from and lent to other accounts, what it "
            "paid and received (credits), and its revenue fairness ratio alpha. Read-only: "
            'reads the controller\'s store (docs/admin.md, "Tenants and quotas").'
        ),
    )
    p.add_argument(
        "--last",
        type=int,
        metavar="N",
        help="only the last N rounds: their payments and the jobs that finished in them "
        "(default: every recorded round)",
    )
    _add_config(p)


def tenants_command(args: argparse.Namespace) -> int:
    from slurm_hetsched.controller.commands import show_tenants

    last = positive_count(args.last, "--last")
    return show_tenants(_load_controller_config(args), out=sys.stdout, last=last)


def add_handback(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def handback_command(args: argparse.Namespace) -> int:
    from slurm_hetsched.controller.handback import DEFAULT_REASON
    from slurm_hetsched.controller.handback_command import run_handback

    reason = DEFAULT_REASON if args.reason is None else args.reason
    if not reason.strip():
        raise ConfigError("--reason must not be empty")
    config = _load_controller_config(args)
    return run_handback(config, reason=reason, dry_run=args.dry_run, out=sys.stdout)


def add_watchdog(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def watchdog_command(args: argparse.Namespace) -> int:
    from slurm_hetsched.controller.watchdog import run_watchdog

    config = _load_controller_config(args)
    after = (
        config.watchdog_after()
        if args.after is None
        else non_negative_seconds(args.after, "--after")
    )
    return run_watchdog(config, after_s=after, out=sys.stdout)
