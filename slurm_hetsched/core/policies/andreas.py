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

`build_configurations` and `proxy_objective` are shared with the exclusive baselines.

Deterministic for a given seed (constructor). No I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import (
    Allocation,
    GpuSlice,
    InvalidProblemError,
    Placement,
    Problem,
)
from slurm_hetsched.core.policies.options import (
    PolicyOption,
    parse_count,
    parse_non_negative,
    parse_seed,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Configurations:
    """The configurations of a nodes problem, and every job's time and cost on each.

    A unit is one GPU type of one node (a node with one type is one unit); units whose GPU
    type, free GPUs and node size agree form a group, and a configuration is (group, g): the
    nodes of a group are interchangeable, so the choice among them is a matter of fit.

    Attributes:
        unit_node: (n_units,) index into `problem.nodes`; units sorted by group, then node.
        unit_type: (n_units,) index into `problem.gpu_types`.
        unit_free: (n_units,) free GPUs of that type on the node.
        unit_group: (n_units,) group of each unit.
        unit_total: (n_units,) all GPUs of the node (for its base-power share).
        group_free: (n_groups,) free GPUs of each unit of the group.
        conf_group: (n_confs,) group of each configuration.
        conf_gpus: (n_confs,) GPUs of each configuration.
        conf_type: (n_confs,) GPU type index of each configuration.
        time_s: (n_jobs, n_confs) execution time; inf where the job cannot use it (GPU count
            not allowed, or steps/s 0).
        cost: (n_jobs, n_confs) energy cost of the whole run there; inf where time_s is.
        job_cost: (n_jobs, n_confs) the same with the job-attributed power (proxy objective);
            equal to `cost` unless the exclusive baselines price whole nodes.
    """

    unit_node: np.ndarray
    unit_type: np.ndarray
    unit_free: np.ndarray
    unit_group: np.ndarray
    unit_total: np.ndarray
    group_free: np.ndarray
    conf_group: np.ndarray
    conf_gpus: np.ndarray
    conf_type: np.ndarray
    time_s: np.ndarray
    cost: np.ndarray
    job_cost: np.ndarray

    @property
    def valid(self) -> np.ndarray:
        """(n_jobs, n_confs) bool: the job can use the configuration."""
        return np.asarray(np.isfinite(self.time_s))


def build_configurations(problem: Problem, policy: str, whole_node: bool = False) -> Configurations:
    """The configurations, times and costs of a nodes problem.

    Args:
        problem: needs `nodes`, `steps` and `energy` for every GPU type of the nodes.
        policy: named in errors.
        whole_node: price a configuration by the whole node's cost c(n, g) (busy GPUs, idle
            GPUs and base power: the job holds the node alone) instead of the job's share.

    Raises:
        InvalidProblemError: a field is missing.
    """
    if not problem.nodes:
        raise InvalidProblemError(
            f"policy {policy!r} places jobs on nodes: give `nodes` instead of `gpus`"
        )
    steps = problem.require("steps", policy)
    energy = problem.energy
    if energy is None or not energy.has(problem.gpu_types):
        known = [] if energy is None else sorted(energy.busy_w)
        raise InvalidProblemError(
            f"policy {policy!r} needs busy_w and idle_w for every GPU type of the nodes "
            f"{list(problem.gpu_types)} (gpu_types.toml or the problem's `gpu_types`); it has "
            f"them for {known}"
        )
    keys: dict[tuple[int, int, int], int] = {}  # (type, free, node total) -> group
    units = []  # (group, node, type, free, node total)
    for n, node in enumerate(problem.nodes):
        total = sum(node.gpus.values())
        for t in node.gpus:
            free = node.free_gpus(t)
            if free > 0:
                j = problem.gpu_types.index(t)
                units.append((keys.setdefault((j, free, total), len(keys)), n, j, free, total))
    units.sort()
    table = np.array(units, dtype=np.int64).reshape(len(units), 5)
    unit_group, unit_node, unit_type, unit_free, unit_total = table.T
    group_keys = sorted(keys, key=keys.__getitem__)
    group_free = np.array([free for _j, free, _total in group_keys], dtype=np.int64)
    conf = [(grp, g) for grp, (_j, free, _t) in enumerate(group_keys) for g in range(1, free + 1)]
    conf_group = np.array([c[0] for c in conf], dtype=np.int64)
    conf_gpus = np.array([c[1] for c in conf], dtype=np.int64)
    conf_type = np.array([group_keys[grp][0] for grp in conf_group], dtype=np.int64)
    conf_total = np.array([group_keys[grp][2] for grp in conf_group], dtype=np.int64)
    n_jobs, n_confs = problem.n_jobs, len(conf)
    rate = np.zeros((n_jobs, n_confs))
    allowed = np.zeros((n_jobs, n_confs), dtype=bool)
    for g in np.unique(conf_gpus):
        cols = np.flatnonzero(conf_gpus == g)
        rate[:, cols] = problem.rates_at(int(g))[:, conf_type[cols]]
        allowed[:, cols] = np.array([int(g) in problem.gpu_options(m) for m in range(n_jobs)])[
            :, None
        ]
    valid = allowed & (rate > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        time_s = np.where(valid, steps[:, None] / np.where(valid, rate, 1.0), np.inf)
    types_ = [problem.gpu_types[j] for j in conf_type]
    job_rate = np.array(
        [
            energy.job_cost_per_s(t, tot, g)
            for t, tot, g in zip(types_, conf_total, conf_gpus, strict=True)
        ]
    ).reshape(n_confs)
    if whole_node:
        node_rate = np.array(
            [
                energy.node_cost_per_h(t, tot, g) / 3600.0
                for t, tot, g in zip(types_, conf_total, conf_gpus, strict=True)
            ]
        ).reshape(n_confs)
    else:
        node_rate = job_rate
    job_cost = np.where(valid, np.where(valid, time_s, 0.0) * job_rate, np.inf)
    cost = np.where(valid, np.where(valid, time_s, 0.0) * node_rate, np.inf)
    return Configurations(
        unit_node=unit_node,
        unit_type=unit_type,
        unit_free=unit_free,
        unit_group=unit_group,
        unit_total=unit_total,
        group_free=group_free,
        conf_group=conf_group,
        conf_gpus=conf_gpus,
        conf_type=conf_type,
        time_s=time_s,
        cost=cost,
        job_cost=job_cost,
    )


def due_and_weight(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """(n_jobs,) due dates (NaN = none) and tardiness weights (0 if not given)."""
    due = problem.due_s if problem.due_s is not None else np.full(problem.n_jobs, np.nan)
    tw = problem.tardiness_weight
    return due, (tw if tw is not None else np.zeros(problem.n_jobs))


def postpone_cost(
    problem: Problem, cfg: Configurations, rho: float, interval_s: float
) -> np.ndarray:
    """(n_jobs,) rho * w_j * tau^_j: the worst-case tardiness cost if j is postponed.

    tau^_j = max(0, T_c + H + M_j - d_j), M_j the job's slowest configuration. A job with no
    configuration at all is never placed by anyone, so its term is 0 (the same in every
    solution).
    """
    due, tw = due_and_weight(problem)
    slowest = np.where(cfg.valid, cfg.time_s, -np.inf).max(axis=1, initial=-np.inf)
    late = np.maximum(problem.now_s + interval_s + slowest - due, 0.0)
    late = np.where(np.isfinite(slowest) & ~np.isnan(due), late, 0.0)
    return np.asarray(rho * tw * late)


def proxy_objective(
    problem: Problem,
    placements: Mapping[str, Placement],
    rho: float,
    interval_s: float = 0.0,
) -> float:
    """ANDREAS's proxy objective (eq. 1) of any decision on a nodes problem.

    Weighted tardiness of the placed jobs if they run to the end where they are placed, plus
    rho times the weighted worst-case tardiness of the others (postponed), plus, per node
    with a job, the energy cost (job-attributed power x time) of its first-ending job.

    Args:
        problem: a nodes problem with `steps` and `energy`.
        placements: job -> its GPUs (one node, one type); absent = postponed.
        rho: the postponement penalty coefficient.
        interval_s: H, the time to the next rescheduling point.
    """
    energy = problem.energy
    if energy is None:
        raise InvalidProblemError("proxy objective: the problem has no energy model")
    cfg = build_configurations(problem, "andreas")
    due, tw = due_and_weight(problem)
    steps = problem.require("steps", "andreas")
    post = postpone_cost(problem, cfg, rho, interval_s)
    totals = {node.name: sum(node.gpus.values()) for node in problem.nodes}
    index = {job: m for m, job in enumerate(problem.job_ids)}
    value = 0.0
    first: dict[str, tuple[float, float]] = {}
    for m, job in enumerate(problem.job_ids):
        placement = placements.get(job)
        if placement is None:
            value += float(post[m])
            continue
        piece = placement.slices[0]
        g = placement.num_gpus
        rate = problem.rates_at(g)[index[job], problem.gpu_types.index(piece.gpu_type)]
        t = float(steps[m] / rate) if rate > 0 else np.inf
        if not np.isnan(due[m]):
            value += float(tw[m] * max(0.0, problem.now_s + t - due[m]))
        pi = t * float(energy.job_cost_per_s(piece.gpu_type, totals[piece.node], g))
        if piece.node not in first or t < first[piece.node][0]:
            first[piece.node] = (t, pi)
    return value + sum(pi for _t, pi in first.values())


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


def placement_allocation(
    problem: Problem,
    placements: Mapping[str, Placement],
    objective: float,
    policy: str,
    solves: int,
) -> Allocation:
    """An Allocation with `placements` and x 1 on each placed job's type (shared with the
    exclusive baselines)."""
    x = np.zeros((problem.n_jobs, problem.n_types))
    for m, job in enumerate(problem.job_ids):
        if job in placements:
            x[m, problem.gpu_types.index(placements[job].slices[0].gpu_type)] = 1.0
    return Allocation(
        job_ids=problem.job_ids,
        gpu_types=problem.gpu_types,
        x=x,
        objective=objective,
        solve_s=0.0,
        policy=policy,
        solves=solves,
        placements=dict(placements),
    )


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
