"""Keeping the solver's start-up banner off stdout, where the commands print JSON and tables."""

from __future__ import annotations

import os
import sys


def quiet_solver_banner() -> None:
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
