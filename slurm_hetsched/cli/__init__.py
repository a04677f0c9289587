"""Command line entry point `hetsched`: argv and environment -> a driver call.

This package is the only place that parses arguments or configures logging; the drivers and
adapters it calls take plain values. `main.py` builds the parser and dispatches; each command
group has its module (allocate, simulate, trace, controller, devcluster) with its arguments and
what it runs; `values.py` checks flag values and `banner.py` keeps the solver's banner off
stdout.
"""

from __future__ import annotations

from slurm_hetsched.cli.banner import quiet_solver_banner as _quiet_solver_banner
from slurm_hetsched.cli.controller import DEFAULT_CONFIG
from slurm_hetsched.cli.main import build_parser, main

__all__ = ["DEFAULT_CONFIG", "_quiet_solver_banner", "build_parser", "main"]
