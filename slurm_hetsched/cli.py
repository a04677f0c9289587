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
    up = actions.add_parser("up", help="install if needed, start, wait until every node is idle")
    up.add_argument(
        "--spank",
        action="append",
        type=Path,
        metavar="PATH",
        help="register this SPANK plugin .so as `optional` in etc/plugstack.conf (repeatable; "
        "the list replaces the registered one; build ours with `make -C spank`). On a running "
        "cluster new jobs get it at once",
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
    from slurm_hetsched.devcluster.config import load_devcluster_config

    config_path = args.config or default_config_path()
    config = load_devcluster_config(config_path)
    folder = args.dir or (
        Path(os.environ["HETSCHED_DEVCLUSTER_DIR"])
        if os.environ.get("HETSCHED_DEVCLUSTER_DIR")
        else default_dir()
    )
    cluster = DevCluster(config, folder.resolve())
    if args.action == "up":
        print(cluster.up(spank_plugins=args.spank))
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
    p.add_argument(
        "--policy",
        default="max_min_fairness_perf",
        help="policy name (default: %(default)s; see --list)",
    )
    p.add_argument("--compact", action="store_true", help="print JSON on one line")


def _run_allocate(args: argparse.Namespace) -> int:
    from slurm_hetsched.allocate import policy_descriptions, run_allocate

    if args.list:
        descriptions = policy_descriptions()
        width = max(len(name) for name in descriptions)
        for name, description in descriptions.items():
            print(f"{name.ljust(width)}  {description}")
        return 0
    result = run_allocate(_read_json(args.problem), args.policy)
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
    _add_devcluster(sub)
    return parser


_RUNNERS = {
    "allocate": _run_allocate,
    "devcluster": _run_devcluster,
}


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=os.environ.get("HETSCHED_LOG_LEVEL", "WARNING").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
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
