"""`hetsched allocate`: its arguments, and the what-if allocation printed as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from slurm_hetsched.cli.banner import quiet_solver_banner
from slurm_hetsched.cli.values import parse_policy_options
from slurm_hetsched.errors import ConfigError


def add_allocate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def allocate_command(args: argparse.Namespace) -> int:
    from slurm_hetsched.allocate import policy_descriptions, run_allocate

    quiet_solver_banner()

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
        _read_json(args.problem), args.policy, options=parse_policy_options(args.policy_option)
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
