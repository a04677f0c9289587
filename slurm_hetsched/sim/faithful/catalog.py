"""The faithful mode's forms by policy name, and the solver they use
(`hetsched simulate --gavel-faithful --faithful-solver`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import cvxpy as cp

from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.faithful.choices import FaithfulChoices
from slurm_hetsched.sim.faithful.fifo import Fifo, FifoPerf
from slurm_hetsched.sim.faithful.forms import (
    FAITHFUL_POLICIES,
    FAITHFUL_SOLVERS,
    FinishTimeFairnessPerf,
    Form,
    MaxMinFairness,
    MaxMinFairnessPerf,
    MaxSumThroughputPerf,
    MinTotalDurationPerf,
)
from slurm_hetsched.sim.faithful.ours import OurPolicyForm
from slurm_hetsched.sim.traces import TraceJob

_FORMS: dict[str, type[Form]] = {
    form.name: form
    for form in (
        MaxMinFairnessPerf,
        MaxMinFairness,
        MaxSumThroughputPerf,
        MinTotalDurationPerf,
        FinishTimeFairnessPerf,
        FifoPerf,
        Fifo,
    )
}


def resolve_solver(solver: str) -> str:
    """The solver "auto" stands for: ECOS (Gavel's, so the same points) where installed."""
    if solver != "auto":
        return solver
    return "ECOS" if "ECOS" in cp.installed_solvers() else "CLARABEL"


def for_choices(
    form: Form, choices: FaithfulChoices, site: SiteData, trace: Mapping[str, TraceJob]
) -> Form:
    """`form` with the choices "solver" and "forms" applied: HiGHS for its linear programs,
    or our own policy of that name."""
    if not choices.forms:
        return OurPolicyForm(form, site, trace)
    if not choices.solver:
        form = copy.copy(form)
        form.solver = "HIGHS"
    return form


def faithful_form(policy: str, solver: str = "auto", seed: int = 0) -> Form:
    """The Gavel form of `policy`, ready for a run.

    Raises:
        ConfigError: a policy the faithful mode does not have, or an unknown solver.
    """
    if policy not in _FORMS:
        raise ConfigError(
            f"--gavel-faithful: policy {policy!r} has no Gavel-faithful form; use one of "
            f"{', '.join(FAITHFUL_POLICIES)}"
        )
    if solver not in FAITHFUL_SOLVERS:
        raise ConfigError(
            f"--faithful-solver {solver!r}: expected one of {', '.join(FAITHFUL_SOLVERS)}"
        )
    solver = resolve_solver(solver)
    if solver not in cp.installed_solvers():
        raise ConfigError(
            f"--faithful-solver {solver}: not installed; `pip install ecos` (GPL) adds it, "
            "or use CLARABEL"
        )
    return _FORMS[policy](solver, seed)
