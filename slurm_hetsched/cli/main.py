"""`hetsched` itself: the top-level parser made of the command modules' parsers, logging set
from HETSCHED_LOG_LEVEL, and dispatch to the chosen command with its errors as exit codes."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from slurm_hetsched import __version__
from slurm_hetsched.cli.allocate import add_allocate, allocate_command
from slurm_hetsched.cli.controller import (
    add_controller,
    add_handback,
    add_rounds,
    add_status,
    add_tenants,
    add_watchdog,
    controller_command,
    handback_command,
    rounds_command,
    status_command,
    tenants_command,
    watchdog_command,
)
from slurm_hetsched.cli.devcluster import add_devcluster, devcluster_command
from slurm_hetsched.cli.profile import add_profile, profile_command
from slurm_hetsched.cli.simulate import add_simulate, simulate_command
from slurm_hetsched.cli.trace import add_trace, trace_command
from slurm_hetsched.errors import HetschedError


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
    add_allocate(sub)
    add_simulate(sub)
    add_trace(sub)
    add_controller(sub)
    add_rounds(sub)
    add_status(sub)
    add_tenants(sub)
    add_handback(sub)
    add_watchdog(sub)
    add_devcluster(sub)
    add_profile(sub)
    return parser


_RUNNERS = {
    "allocate": allocate_command,
    "simulate": simulate_command,
    "trace": trace_command,
    "devcluster": devcluster_command,
    "controller": controller_command,
    "rounds": rounds_command,
    "status": status_command,
    "tenants": tenants_command,
    "handback": handback_command,
    "watchdog": watchdog_command,
    "profile": profile_command,
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
