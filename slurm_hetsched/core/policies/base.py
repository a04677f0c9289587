"""What every policy shares: the policy interface, and the start every solver policy makes.

- `Policy`: a name, a description, its options and a pure `allocate`; `round_options_for`:
  what a policy asks of the round mechanism (shuffled types, no filling of idle GPUs).
- `SolverPolicy`: the constructor of the policies that solve an LP or a convex program
  (`backend` "highs" or "cvxpy", checked by `check_backend`; `solver`, cvxpy's, defaulting
  to the class's `default_solver`) and the prologue of their `allocate` (`_prologue`: the
  empty allocation when there are no jobs). `EnergySlackPolicy` adds the `energy_slack`
  option: its prologue also checks the problem has power data, and `_least_power` runs the
  energy stage (energy.py) with the policy's backend and solver.

The shared math lives in constraints.py (the base constraints, the feasibility check),
rates.py (normalized and steps/s rates) and value_lp.py (the linear "maximize value" LP); its
names are also importable from here, where they were first defined.

No I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar, Protocol

import numpy as np

from slurm_hetsched.core.model import Allocation, InvalidProblemError, Problem
from slurm_hetsched.core.policies.constraints import (
    FEASIBILITY_TOL,
    NOISE,
    base_constraints,
    base_rows,
    clean_solution,
    solve_cvxpy,
)
from slurm_hetsched.core.policies.energy import Floors, least_power, require_energy
from slurm_hetsched.core.policies.options import (
    ENERGY_OPTIONS,
    NO_OPTIONS,
    PolicyOption,
    checked,
)
from slurm_hetsched.core.policies.rates import (
    best_rate,
    effective_throughput,
    equal_share_rate,
    equal_split,
    fifo_order,
    normalized_rate_matrix,
    normalized_rates,
    rate_matrix,
    rates,
)
from slurm_hetsched.core.policies.value_lp import ValueLP, floor_rows, maximize_value, value_lp
from slurm_hetsched.core.round_options import RoundOptions

__all__ = [
    "BACKENDS",
    "FEASIBILITY_TOL",
    "NOISE",
    "EnergySlackPolicy",
    "Policy",
    "SolverPolicy",
    "ValueLP",
    "base_constraints",
    "base_rows",
    "best_rate",
    "check_backend",
    "clean_solution",
    "effective_throughput",
    "empty_allocation",
    "equal_share_rate",
    "equal_split",
    "fifo_order",
    "floor_rows",
    "maximize_value",
    "normalized_rate_matrix",
    "normalized_rates",
    "rate_matrix",
    "rates",
    "round_options_for",
    "solve_cvxpy",
    "value_lp",
]

# "highs": the LP built as sparse matrices and solved by HiGHS directly (fast); "cvxpy": the
# plain formulation, solved by the cvxpy solver the policy is given.
BACKENDS = ("highs", "cvxpy")


class Policy(Protocol):
    """A policy: a name, a one-line description, the options it accepts (options.py; each
    is also a keyword argument of its constructor), and a pure `allocate`."""

    name: ClassVar[str]
    description: ClassVar[str]
    options: ClassVar[Mapping[str, PolicyOption]]

    def allocate(self, problem: Problem) -> Allocation:
        """The allocation for `problem`.

        Raises:
            InvalidProblemError: the problem lacks a field this policy needs.
            SolverError: the solver did not reach an optimal solution.
        """
        ...


def round_options_for(policy: Policy, options: RoundOptions) -> RoundOptions:
    """The round mechanism's options under `policy` (docs/mechanism.md), from the site's.

    - A heterogeneity-agnostic policy (`agnostic = True`) walks the per-type queues in a
      random order each round (Gavel: such a policy must not favour a type by walking it
      first).
    - Work conservation stays on unless the policy leaves GPUs idle on purpose: FIFO (Gavel
      never fills under FIFO), the cost policies (an idle GPU costs nothing) and any policy
      with `energy_slack` > 0 (an idle GPU draws less power). They say so with
      `fills_idle_gpus = False` (or their `energy_slack`).
    """
    agnostic = bool(getattr(policy, "agnostic", False))
    fills = bool(getattr(policy, "fills_idle_gpus", True))
    if float(getattr(policy, "energy_slack", 0.0) or 0.0) > 0:
        fills = False
    return dataclasses.replace(
        options,
        shuffle=options.shuffle or agnostic,
        work_conserving=options.work_conserving and fills,
    )


def check_backend(backend: str) -> None:
    """Raise InvalidProblemError unless `backend` is one of BACKENDS."""
    if backend not in BACKENDS:
        raise InvalidProblemError(f"backend {backend!r}: expected one of {list(BACKENDS)}")


def empty_allocation(problem: Problem, policy: str) -> Allocation:
    """The allocation of a problem without jobs (no solver call)."""
    return Allocation(
        job_ids=(),
        gpu_types=problem.gpu_types,
        x=np.zeros((0, problem.n_types)),
        objective=0.0,
        solve_s=0.0,
        policy=policy,
        solves=0,
    )


class SolverPolicy:
    """The constructor and the prologue of `allocate` that every solver policy shares."""

    name: ClassVar[str]
    description: ClassVar[str]
    options: ClassVar[Mapping[str, PolicyOption]] = NO_OPTIONS
    # The cvxpy solver when none is given: CLARABEL (bundled with cvxpy) for the convex
    # programs, HIGHS where an LP's exact simplex answer (or its duals) matters.
    default_solver: ClassVar[str] = "CLARABEL"

    def __init__(self, backend: str = "highs", solver: str | None = None) -> None:
        """Args: backend "highs" (fast) or "cvxpy"; solver: the cvxpy solver name (None: the
        class's `default_solver`).

        Raises:
            InvalidProblemError: an unknown backend.
        """
        check_backend(backend)
        self.backend = backend
        self.solver = self.default_solver if solver is None else solver

    def _prologue(self, problem: Problem) -> Allocation | None:
        """The start of `allocate`: the empty allocation if the problem has no jobs (nothing
        to solve), else None (go on)."""
        if problem.n_jobs == 0:
            return empty_allocation(problem, self.name)
        return None


class EnergySlackPolicy(SolverPolicy):
    """A solver policy with the `energy_slack` option (energy.py): give up that fraction of
    the objective for the allocation that draws the least power."""

    options: ClassVar[Mapping[str, PolicyOption]] = ENERGY_OPTIONS

    def __init__(
        self, backend: str = "highs", solver: str | None = None, energy_slack: float = 0.0
    ) -> None:
        """Args: backend and solver as `SolverPolicy`; energy_slack: the fraction of the
        objective to give up for less power (energy.py; 0 = off).

        Raises:
            InvalidProblemError: an unknown backend.
            ConfigError: energy_slack is not a fraction in [0, 1).
        """
        super().__init__(backend, solver)
        self.energy_slack = checked(self.name, self.options, "energy_slack", energy_slack)

    def _prologue(self, problem: Problem) -> Allocation | None:
        """As `SolverPolicy._prologue`, after checking that a problem has the power data
        energy_slack > 0 needs (InvalidProblemError if not)."""
        if self.energy_slack > 0:
            require_energy(problem, self.name)
        return super()._prologue(problem)

    def _least_power(
        self, problem: Problem, floors: Floors, x: np.ndarray
    ) -> tuple[np.ndarray, float]:
        """The energy stage: the least-power x within `floors` (or `x` if that draws no more),
        and its solve seconds (energy.least_power)."""
        return least_power(
            problem, floors, x, policy=self.name, backend=self.backend, solver=self.solver
        )
