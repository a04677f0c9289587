"""HadarE's job tracker, one round of one forked job (Sultana et al., section V; shared notes
hadar.md section 7): how many copies the job wants, which of its placed copies run, and each
one's step budget. Pure arithmetic, shared by the simulator (sim/forking.py) and meant for the
live tracker, so both decide alike.

Forking is periodic model averaging (local SGD), not free speed, and two knobs say what it
costs (both placeholders until the live side measures them; reported beside every result):

- `overhead_s`: seconds each copy of a job spends per averaged round exchanging parameters and
  step counts with the tracker and loading the consolidated model (no training meanwhile).
- `efficiency`: steps made in a round with more than one copy count as `efficiency` x steps
  toward the job's total (averaged copies progress less per step than one training).

A round with a single copy is an ordinary round: no overhead, every step counts.

The rules, from the paper where it says, ours where it is silent (docs/simulation.md, "HadarE"):

- A job has at most `max_copies` copies and never more than the nodes that can run it (one
  node per copy: notes section 9, item 5).
- Copies offered to the policy this round (`copies_offered`): the fewest of the job's fastest
  nodes that can finish its remaining work within the round (the paper's last round: "the beta
  fastest nodes finish the remainder"); if none can, the fewest of its fastest nodes that make
  the most credited progress in the round, net of the overhead (all its copies when forking is
  free; one when its slower nodes' steps x efficiency do not make up for what averaging costs
  the fastest one).
- Room (`offer_copies`, ours): when forking costs something, a copy beyond a job's first takes
  a node that another job's first copy could use at full credit, for steps worth `efficiency`
  and less the overhead, so it never pays there. Copies beyond the first are offered only on
  the GPUs the jobs' first copies leave spare, shared out to the jobs whose copies add most per
  GPU. With efficiency 1 and no overhead a copy is worth a job on its node and nothing limits
  the copies (the paper's rule).
- Copies run (`plan_round`): of the copies the policy placed, fastest first, the fewest that
  make the most progress this round. A copy that adds nothing, because the others finish
  without it (its share would take less than the overhead it costs) or because its steps x
  efficiency do not make up for what averaging costs the others, is not started.
- Budgets: the raw steps needed (remaining / efficiency when averaged) split in proportion to
  the copies' steps/s (`core.fork_budget.step_budgets`, so they finish together), each capped
  at what the copy can do in the round, the excess going to the copies under their cap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_hetsched.core.fork_budget import step_budgets
from slurm_hetsched.errors import ConfigError

# Measured live (tests/e2e/test_hadare_forks.py, docs/job-side.md "What forking costs in
# quality"): seconds from a copy's ack of its round to training the next one (collecting,
# averaging as the job's user, loading the consolidated checkpoint), about 5 s per round.
DEFAULT_ROUND_OVERHEAD_S = 5.0
# Measured live: a step of an averaged round is worth about half a step of one training (the
# forked job's held-out loss after 2400 steps is an unforked run's after about 1300).
DEFAULT_STEP_EFFICIENCY = 0.5
# Progress below this many steps is no progress (floating-point residue).
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class ForkSettings:
    """How jobs fork.

    Attributes:
        max_copies: copies per job at most (the admin's cap); 1 = no forking.
        overhead_s: seconds per copy and averaged round without training (module docstring).
        efficiency: an averaged step's worth, in (0, 1] (module docstring).
    """

    max_copies: int = 1
    overhead_s: float = DEFAULT_ROUND_OVERHEAD_S
    efficiency: float = DEFAULT_STEP_EFFICIENCY

    def __post_init__(self) -> None:
        if isinstance(self.max_copies, bool) or not isinstance(self.max_copies, int):
            raise ConfigError(f"max_copies {self.max_copies!r}: expected a whole number >= 1")
        if self.max_copies < 1:
            raise ConfigError(f"max_copies {self.max_copies}: expected >= 1")
        if not (math.isfinite(self.overhead_s) and self.overhead_s >= 0):
            raise ConfigError(f"overhead_s {self.overhead_s!r}: expected a number of s >= 0")
        if not (math.isfinite(self.efficiency) and 0 < self.efficiency <= 1):
            raise ConfigError(f"efficiency {self.efficiency!r}: expected a number in (0, 1]")

    @property
    def costless(self) -> bool:
        """Whether forking is free: averaged steps count in full and averaging takes no time."""
        return self.efficiency == 1.0 and self.overhead_s == 0.0

    def describe(self) -> str:
        """One line for a report: what forking costs in this run."""
        if self.max_copies == 1:
            return "no forking"
        return (
            f"up to {self.max_copies} copies, {self.overhead_s:g} s overhead per averaged "
            f"round, averaged steps worth {self.efficiency:g}"
        )


@dataclass(frozen=True, slots=True)
class RoundPlanForJob:
    """One forked job's round.

    Attributes:
        budgets: copy -> raw steps it trains this round (0: placed but not started).
        overhead_s: seconds each started copy spends on averaging (0 with one copy).
        credit: what one raw step counts toward the job's total (1, or the efficiency).
    """

    budgets: Mapping[str, float]
    overhead_s: float
    credit: float

    @property
    def running(self) -> tuple[str, ...]:
        """The copies started, in the order given."""
        return tuple(c for c, b in self.budgets.items() if b > 0)


def copies_allowed(max_copies: int, nodes_able: int) -> int:
    """Copies a job gets: at most `max_copies`, at most one per node able to run it, >= 1
    (the same rule as the live side's `core.fork_plan.copies_wanted`)."""
    return max(1, min(max_copies, nodes_able))


def credit_of(copies_run: int, efficiency: float) -> float:
    """What a raw step counts toward the job's total in a round with `copies_run` copies."""
    return 1.0 if copies_run <= 1 else efficiency


def copies_offered(
    remaining: float,
    node_rates: Sequence[float],
    usable_s: float,
    settings: ForkSettings,
    room: int | None = None,
) -> int:
    """How many copies a job offers the policy this round.

    Args:
        remaining: the job's steps left (in unforked steps).
        node_rates: its steps/s on each node able to run it, one per copy allowed (any order).
        usable_s: training seconds in a round (the round less a restart).
        settings: the forking knobs.
        room: copies beyond the first the cluster has spare nodes for (`offer_copies`); None:
            no limit. Ignored when forking is free.

    Returns:
        Of the job's fastest nodes (at most 1 + `room`), the fewest that finish `remaining`
        within the round; else the fewest that make the most credited progress in it (1 when
        nothing is left or no node can run the job).
    """
    rates = sorted((r for r in node_rates if r > 0), reverse=True)
    if not rates or remaining <= _EPS:
        return 1
    if room is not None and not settings.costless:
        rates = rates[: 1 + max(0, room)]
    best_n, best = 1, -1.0
    for n in range(1, len(rates) + 1):
        progress = _progress(remaining, rates[:n], [usable_s] * n, settings)
        if progress >= remaining - _EPS:
            return n
        if progress > best + _EPS:
            best_n, best = n, progress
    return len(rates) if settings.costless else best_n


@dataclass(frozen=True, slots=True)
class Demand:
    """What a job brings to a round's offer (`offer_copies`).

    Attributes:
        remaining: its steps left (in unforked steps).
        node_rates: its steps/s on each node able to run it, one per copy allowed.
        usable_s: its training seconds in a round (the round less a restart).
        gpus: GPUs a copy takes (on one node).
    """

    remaining: float
    node_rates: tuple[float, ...]
    usable_s: float
    gpus: int = 1


def offer_copies(
    demands: Mapping[str, Demand], gpus: int, settings: ForkSettings
) -> dict[str, int]:
    """How many copies each job offers the policy this round (module docstring, "Room").

    Args:
        demands: every active job -> what it brings (one node rate: a job that cannot fork).
        gpus: the cluster's GPUs available to the jobs.
        settings: the forking knobs.

    Returns:
        job -> copies offered: `copies_offered` without a limit when forking is free; else the
        GPUs spare after one copy of every job go, job by job, to the jobs whose extra copies
        add the most credited progress per GPU (then by name), each taking what pays best
        within what is left.
    """
    if settings.costless:
        return {j: copies_offered(d.remaining, d.node_rates, d.usable_s, settings)
                for j, d in demands.items()}  # fmt: skip
    spare = max(0, gpus - sum(d.gpus for d in demands.values()))
    offered = dict.fromkeys(demands, 1)
    gain: dict[str, float] = {}
    for job, d in demands.items():
        n = copies_offered(d.remaining, d.node_rates, d.usable_s, settings, spare // d.gpus)
        if n > 1:
            gain[job] = _gain(d, n, settings) / ((n - 1) * d.gpus)
    for job in sorted(gain, key=lambda j: (-gain[j], j)):
        d = demands[job]
        offered[job] = copies_offered(
            d.remaining, d.node_rates, d.usable_s, settings, spare // d.gpus
        )
        spare -= (offered[job] - 1) * d.gpus
    return offered


def _gain(demand: Demand, n: int, settings: ForkSettings) -> float:
    """Credited steps `n` copies on the job's fastest nodes add in a round over one copy."""
    rates = sorted(demand.node_rates, reverse=True)[:n]
    usable = [demand.usable_s] * n
    one = _progress(demand.remaining, rates[:1], usable[:1], settings)
    return _progress(demand.remaining, rates, usable, settings) - one


def plan_round(
    remaining: float,
    offers: Mapping[str, tuple[float, float]],
    settings: ForkSettings,
) -> RoundPlanForJob:
    """One round of a job whose copies the policy placed (module docstring).

    Args:
        remaining: the job's steps left (in unforked steps), > 0.
        offers: copy placed -> (its steps/s there, its training seconds in the round: the
            round less its restart).
        settings: the forking knobs.

    Returns:
        The copies' budgets: those started add up to what finishes the job when they can
        (remaining / efficiency when averaged, rounded up to whole steps), else each does all it
        can; the overhead and the credit of the round.
    """
    order = sorted(offers, key=lambda c: (-offers[c][0], list(offers).index(c)))
    order = [c for c in order if offers[c][0] > 0 and offers[c][1] > 0]
    best_n, best = 0, 0.0
    for n in range(1, len(order) + 1):
        chosen = order[:n]
        progress = _progress(
            remaining, [offers[c][0] for c in chosen], [offers[c][1] for c in chosen], settings
        )
        if progress > best + _EPS:
            best_n, best = n, progress
        if best >= remaining - _EPS:
            break
    running = order[:best_n]
    budgets: dict[str, float] = dict.fromkeys(offers, 0.0)
    if len(running) == 1:
        (copy,) = running
        rate, usable = offers[copy]
        budgets[copy] = min(remaining, rate * usable)
        return RoundPlanForJob(budgets, 0.0, 1.0)
    if not running:
        return RoundPlanForJob(budgets, 0.0, 1.0)
    overhead = settings.overhead_s
    caps = {c: math.floor(offers[c][0] * (offers[c][1] - overhead) + _EPS) for c in running}
    need = math.ceil(remaining / settings.efficiency - _EPS)
    budgets.update(_fill(need, {c: offers[c][0] for c in running}, caps))
    return RoundPlanForJob(budgets, overhead, settings.efficiency)


def _progress(
    remaining: float, rates: Sequence[float], usable: Sequence[float], settings: ForkSettings
) -> float:
    """Unforked steps a round of these copies adds to the job, at most `remaining`."""
    if len(rates) == 1:
        return min(remaining, rates[0] * usable[0])
    raw = sum(
        math.floor(r * max(0.0, u - settings.overhead_s) + _EPS)
        for r, u in zip(rates, usable, strict=True)
    )
    return min(remaining, settings.efficiency * raw)


def _fill(need: int, rates: Mapping[str, float], caps: Mapping[str, int]) -> dict[str, float]:
    """`need` steps split in proportion to `rates`, no copy over its cap, the excess of a
    capped copy split again among the others (all at their cap when they cannot make it)."""
    budgets: dict[str, float] = {}
    open_ = dict(rates)
    left = need
    while open_:
        split = step_budgets(left, open_)
        over = [c for c in open_ if split[c] > caps[c]]
        if not over:
            budgets.update(split)
            break
        for c in over:
            budgets[c] = caps[c]
            left = max(0, left - caps[c])
            del open_[c]
    return {c: float(budgets.get(c, 0)) for c in rates}
