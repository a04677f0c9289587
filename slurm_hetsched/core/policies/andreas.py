"""ANDREAS (Filippini et al., FCloud'21): energy- and tardiness-aware placement of training jobs
on heterogeneous GPU nodes by a randomized greedy, each job on one node with g GPUs of that
node's type, or postponed.

At the problem's time T_c each job j (queued or running: everything is re-planned) has, for
every configuration (n, g) it may use, an execution time t_jng = steps_j / rate at g GPUs of
n's type (`Problem.rates_at`) and an energy cost t_jng * c_ng, c_ng the power attributed to a
job on g GPUs of n (core/costs.py: its GPUs' busy power plus their share of the node's base
power) at the site's price and PUE. Then (paper section IV-B, Algorithm 1):

1. pressure Delta_j = T_c + min t_jng - d_j; jobs in descending pressure (most likely late
   first); D*_j = {(n, g): T_c + t_jng < d_j} (a job without a due date: every configuration);
2. the preferred configuration is the cheapest of D*_j, or the fastest if D*_j is empty;
3. the job goes on a node of that configuration with room (best fit: the node with the fewest
   free GPUs that still has g, so open nodes fill before new ones are opened), else on the first
   configuration of its candidate list that has room (D*_j by cost, then the configurations
   missing the due date by time), else it is postponed;
4. MaxIt constructions (default 1000), the first the plain greedy of steps 1-3, the others
   randomized: adjacent jobs swapped with probability inversely proportional to the first
   one's tardiness weight (R1), and the preferred configuration drawn from the cheapest
   `candidates` of the job's list with probability inversely proportional to their cost (R2);
5. the construction with the lowest proxy objective (eq. 1) wins:
   sum_j w_j tau_j  +  rho sum_{postponed j} w_j tau^_j  +  sum_{open n} pi_{first-ending job on n},
   tau_j = max(0, T_c + t_j - d_j), tau^_j = max(0, T_c + H + M_j - d_j) (M_j: the job's
   slowest configuration, H: `interval_s`), pi = t * c of the job that ends first on the node.

Where the paper is ambiguous or inconsistent the choices are documented in docs/policies.md
("ANDREAS"). The constructions run side by side: every array has a leading (MaxIt,) axis and
the loop is over job positions only, so one call costs J vectorized steps (fewer once every
construction is out of GPUs).

The configurations with their times and costs, the proxy objective and the Allocation of a
placement are in configurations.py (shared with the exclusive baselines; its names are
importable from here too).

Deterministic for a given seed (constructor). No I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, GpuSlice, InvalidProblemError, Placement, Problem
from slurm_hetsched.core.policies.configurations import (
    Configurations,
    build_configurations,
    due_and_weight,
    placement_allocation,
    postpone_cost,
    proxy_objective,
)
from slurm_hetsched.core.policies.options import (
    PolicyOption,
    parse_count,
    parse_non_negative,
    parse_seed,
)

__all__ = [
    "Andreas",
    "Configurations",
    "build_configurations",
    "due_and_weight",
    "placement_allocation",
    "postpone_cost",
    "proxy_objective",
]

logger = logging.getLogger(__name__)


class Andreas:
    """ANDREAS's randomized greedy: energy- and tardiness-aware placement on nodes."""

    name: ClassVar[str] = "andreas"
    description: ClassVar[str] = (
        "ANDREAS: randomized greedy placement on nodes, cheapest deadline-meeting configuration "
        "else fastest, minimizing tardiness + postponement + energy cost (needs nodes, steps)"
    )
    options: ClassVar[Mapping[str, PolicyOption]] = MappingProxyType(
        {
            "max_it": PolicyOption(
                "randomized greedy constructions per call (MaxIt; default 1000)", 1000, parse_count
            ),
            "rho": PolicyOption(
                "penalty coefficient of postponed jobs (default 100)", 100.0, parse_non_negative
            ),
            "seed": PolicyOption(
                "seed of the random construction (hetsched simulate: --seed)", 0, parse_seed
            ),
        }
    )
    # Places jobs on nodes: needs a `nodes` problem (generic tests on `gpus` problems skip it).
    needs_nodes: ClassVar[bool] = True

    def __init__(
        self,
        max_it: int = 1000,
        rho: float = 100.0,
        interval_s: float = 0.0,
        candidates: int = 3,
        swap_prob: float = 0.5,
        seed: int = 0,
    ) -> None:
        """Args:
        max_it: constructions per call (MaxIt_RG; the first is the plain greedy).
        rho: penalty coefficient for postponed jobs (paper: 100).
        interval_s: H, the time to the next rescheduling point, in the postponed jobs'
            worst-case tardiness (0: event-driven, as the public code).
        candidates: R2 draws the preferred configuration among this many of the cheapest.
        swap_prob: R1 swaps adjacent jobs with this probability times the smallest
            tardiness weight over the first job's weight.
        seed: of the random generator; the same seed gives the same schedule.
        """
        if max_it < 1 or candidates < 1 or not 0.0 <= swap_prob <= 1.0 or rho < 0:
            raise InvalidProblemError(
                f"andreas: max_it {max_it} and candidates {candidates} must be >= 1, swap_prob "
                f"{swap_prob} in [0, 1], rho {rho} >= 0"
            )
        self.max_it = max_it
        self.rho = rho
        self.interval_s = interval_s
        self.candidates = candidates
        self.swap_prob = swap_prob
        self.seed = seed

    def allocate(self, problem: Problem) -> Allocation:
        """Place the jobs (see the module docstring).

        Returns:
            An Allocation with `placements` (job -> one node's GPUs; absent = postponed), x 1
            on the placed type, and the proxy objective (eq. 1) of the chosen solution.

        Raises:
            InvalidProblemError: no `nodes`, no `steps`, or no power data for a GPU type.
        """
        n_jobs = problem.n_jobs
        if n_jobs == 0:
            return placement_allocation(problem, {}, 0.0, self.name, 0)
        cfg = build_configurations(problem, self.name)
        rng = np.random.default_rng(self.seed)
        due, tw = due_and_weight(problem)
        valid = cfg.valid
        now = problem.now_s
        feasible = valid & ~(now + cfg.time_s >= due[:, None])  # NaN due: every valid conf
        cand = _candidate_lists(cfg, valid, feasible)  # (n_jobs, n_confs), -1 padded
        order = _base_order(problem, cfg, due)
        orders = _orders(order, tw, self.max_it, self.swap_prob, rng)  # (I, J) job indices
        pref = _preferred(cfg, cand, feasible, self.max_it, self.candidates, rng)  # (I, J)
        with np.errstate(invalid="ignore"):
            late = np.where(
                valid & ~np.isnan(due)[:, None],
                tw[:, None] * np.maximum(now + cfg.time_s - due[:, None], 0.0),
                0.0,
            )
        conf, unit, value = _construct(cfg, orders, pref, cand, late, cfg.job_cost)
        value += ((conf < 0) * postpone_cost(problem, cfg, self.rho, self.interval_s)).sum(1)
        best = int(np.argmin(value))  # ties: the earliest, so the plain greedy wins them
        placements = {}
        for m in np.flatnonzero(conf[best] >= 0):
            c, u = conf[best, m], unit[best, m]
            node = problem.nodes[cfg.unit_node[u]]
            gpu_type = problem.gpu_types[cfg.unit_type[u]]
            job = problem.job_ids[m]
            placements[job] = Placement(
                job, (GpuSlice(node.name, gpu_type, int(cfg.conf_gpus[c])),)
            )
        logger.debug(
            "andreas jobs=%d placed=%d objective=%.6g best_it=%d",
            n_jobs,
            len(placements),
            value[best],
            best,
        )
        return placement_allocation(problem, placements, float(value[best]), self.name, self.max_it)


def _candidate_lists(cfg: Configurations, valid: np.ndarray, feasible: np.ndarray) -> np.ndarray:
    """(n_jobs, n_confs) each job's configurations in preference order, -1 padded.

    D*_j by cost (then time, then index), followed by the configurations that miss the due
    date by time (then cost). With D*_j empty the list starts with the fastest.
    """
    n_confs = cfg.time_s.shape[1]
    tier = np.where(feasible, 0, np.where(valid, 1, 2))
    first = np.where(feasible, cfg.cost, cfg.time_s)
    second = np.where(feasible, cfg.time_s, cfg.cost)
    index = np.broadcast_to(np.arange(n_confs), tier.shape)
    order = np.lexsort((index, second, first, tier), axis=1)
    ranked_tier = np.take_along_axis(tier, order, axis=1)
    return np.where(ranked_tier < 2, order, -1)


def _base_order(problem: Problem, cfg: Configurations, due: np.ndarray) -> np.ndarray:
    """(n_jobs,) job indices by descending pressure Delta_j = T_c + min t - d_j.

    Jobs without a due date, or without any configuration, have pressure -inf (last); ties
    keep the problem's row order.
    """
    fastest = np.where(cfg.valid, cfg.time_s, np.inf).min(axis=1, initial=np.inf)
    with np.errstate(invalid="ignore"):
        pressure = problem.now_s + fastest - due
    pressure = np.where(np.isnan(pressure) | ~np.isfinite(fastest), -np.inf, pressure)
    return np.asarray(np.lexsort((np.arange(problem.n_jobs), -pressure)))


def _orders(
    order: np.ndarray, tw: np.ndarray, max_it: int, swap_prob: float, rng: np.random.Generator
) -> np.ndarray:
    """(max_it, n_jobs) the job order of every construction; row 0 is `order` itself.

    R1: the other rows swap adjacent jobs, first the pairs at even positions, then at odd
    ones, each with probability swap_prob * w_min / w of the pair's first job (inversely
    proportional to its tardiness weight; w_min the smallest positive weight; a job of
    weight 0 swaps with swap_prob).
    """
    n = len(order)
    orders = np.tile(order.astype(np.int32), (max_it, 1))
    if max_it == 1 or n < 2:
        return orders
    positive = tw[tw > 0]
    w_min = positive.min() if positive.size else 1.0
    p = np.where(tw > 0, swap_prob * w_min / np.where(tw > 0, tw, 1.0), swap_prob)
    p32 = p.astype(np.float32)
    rest = orders[1:]
    for start in (0, 1):
        end = start + 2 * ((n - start) // 2)
        a, b = rest[:, start:end:2], rest[:, start + 1 : end : 2]  # views: pairs (k, k + 1)
        swap = rng.random(a.shape, dtype=np.float32) < p32[a]
        a_new, b_new = np.where(swap, b, a), np.where(swap, a, b)
        a[...], b[...] = a_new, b_new
    return orders


def _preferred(
    cfg: Configurations,
    cand: np.ndarray,
    feasible: np.ndarray,
    max_it: int,
    candidates: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """(max_it, n_jobs) the preferred configuration of each job in each construction (-1: none).

    Row 0: the first of the job's list (cheapest of D*_j, else fastest). R2, other rows: one
    of the first `candidates` configurations of the list's first tier (D*_j, or all if D*_j is
    empty), drawn with probability inversely proportional to its cost (its time when D*_j is
    empty; uniformly among zero costs).
    """
    n_jobs = cand.shape[0]
    width = min(candidates, cand.shape[1])
    head = cand[:, :width]  # (n_jobs, width)
    has_feasible = np.asarray(feasible.any(axis=1))
    safe = np.maximum(head, 0)
    rows = np.arange(n_jobs)[:, None]
    score = np.where(has_feasible[:, None], cfg.cost[rows, safe], cfg.time_s[rows, safe])
    same_tier = (head >= 0) & (feasible[rows, safe] == has_feasible[:, None])
    zero = same_tier & (score <= 0)
    positive = same_tier & (score > 0)
    # 1 / score, scaled by the row's smallest score so that tiny costs cannot overflow.
    smallest = np.where(positive, score, np.inf).min(axis=1, keepdims=True)
    weight = np.where(positive, smallest / np.where(positive, score, 1.0), 0.0)
    weight = np.where(zero.any(axis=1, keepdims=True), zero.astype(float), weight)
    total = weight.sum(axis=1, keepdims=True)
    cum = np.cumsum(weight / np.where(total > 0, total, 1.0), axis=1)  # (n_jobs, width)
    draws = rng.random((max_it - 1, n_jobs), dtype=np.float32)
    pick = np.zeros((max_it - 1, n_jobs), dtype=np.int64)
    for w in range(width - 1):  # the last cumulative probability is 1
        pick += draws >= cum[None, :, w].astype(np.float32)
    pick = np.minimum(pick, np.maximum(same_tier.sum(axis=1) - 1, 0)[None, :])
    pref = np.empty((max_it, n_jobs), dtype=np.int32)
    pref[0] = cand[:, 0]
    if max_it > 1:
        pref[1:] = head[np.arange(n_jobs)[None, :], pick]
    return pref


def _construct(
    cfg: Configurations,
    orders: np.ndarray,
    pref: np.ndarray,
    cand: np.ndarray,
    late: np.ndarray,
    job_cost: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run every construction side by side.

    Args:
        cfg: the configurations.
        orders: (I, J) job order per construction.
        pref: (I, J) preferred configuration per construction and job.
        cand: (J, C) candidate lists (fallbacks), -1 padded.
        late: (J, C) w_j * tardiness of the job in each configuration.
        job_cost: (J, C) the job-attributed energy cost (pi) in each configuration.

    Returns:
        conf (I, J) configuration per job (-1: postponed), unit (I, J) its unit, and value
        (I,): weighted tardiness of the placed jobs plus the first-ending jobs' energy costs.
    """
    n_it, n_jobs = orders.shape
    n_units = len(cfg.unit_free)
    dtype = np.int16 if cfg.unit_free.max(initial=0) < 2**14 else np.int64
    unsigned = np.uint16 if dtype is np.int16 else np.uint64
    big = np.iinfo(dtype).max
    free = np.tile(cfg.unit_free.astype(dtype), (n_it, 1))  # (I, U)
    max_free = np.tile(cfg.group_free.astype(dtype), (n_it, 1))  # (I, n_groups)
    # Units are sorted by group: group k's units are starts[k]:starts[k + 1].
    starts = np.searchsorted(cfg.unit_group, np.arange(len(cfg.group_free) + 1))
    first_end = np.full((n_it, n_units), np.inf)
    first_pi = np.zeros((n_it, n_units))
    conf = np.full((n_it, n_jobs), -1, dtype=np.int32)
    unit = np.full((n_it, n_jobs), -1, dtype=np.int32)
    tardy = np.zeros(n_it)
    rows = np.arange(n_it)
    conf_group = np.append(cfg.conf_group, 0)  # index -1 (no configuration) reads a dummy
    conf_gpus = np.append(cfg.conf_gpus, big)  # ... that never fits
    for k in range(n_jobs):
        if n_units == 0 or not max_free.any():
            break  # every construction is out of GPUs: the rest are postponed
        jobs = orders[:, k]
        chosen = pref[rows, jobs]
        fits = max_free[rows, conf_group[chosen]] >= conf_gpus[chosen]
        retry = ~fits & (cand[jobs, 0] >= 0)
        chosen = np.where(fits, chosen, -1)
        if retry.any():
            r = rows[retry]
            lists = cand[jobs[retry]]  # (n, C)
            room = max_free[r[:, None], conf_group[lists]] >= conf_gpus[lists]
            found = room.any(axis=1)
            first = room.argmax(axis=1)
            chosen[retry] = np.where(found, lists[np.arange(len(r)), first], -1)
        placed = chosen >= 0
        if not placed.any():
            continue
        r, c, j = rows[placed], chosen[placed], jobs[placed]
        group, g = cfg.conf_group[c], cfg.conf_gpus[c].astype(free.dtype)
        u = np.empty(len(r), dtype=np.int64)
        every = len(r) == n_it
        for grp in np.unique(group) if group.min() != group.max() else group[:1]:
            sel = group == grp
            rr, gg, lo, hi = r[sel], g[sel], starts[grp], starts[grp + 1]
            whole = every and len(rr) == n_it
            left = free[:, lo:hi] if whole else free[rr, lo:hi]  # (n, units of the group)
            # Best fit: the unit with the fewest free GPUs that still has g (open nodes fill
            # before closed ones open); ties: the first unit, in node order. A unit without
            # room has a negative leftover, which is huge read as unsigned.
            pick = (left - gg[:, None]).view(unsigned).argmin(axis=1)
            at = np.arange(len(rr))
            left[at, pick] -= gg
            if not whole:  # a copy: write the changed entries back
                free[rr, lo + pick] = left[at, pick]
            max_free[rr, grp] = left.max(axis=1)
            u[sel] = lo + pick
        conf[r, j] = c
        unit[r, j] = u
        tardy[r] += late[j, c]
        t = cfg.time_s[j, c]
        earlier = t < first_end[r, u]
        first_end[r[earlier], u[earlier]] = t[earlier]
        first_pi[r[earlier], u[earlier]] = job_cost[j[earlier], c[earlier]]
    return conf, unit, tardy + first_pi.sum(axis=1)
