"""A paper-faithful reference of Astraea's batch, round and one-round pricing (Wang et al.,
"Online Scheduling of Distributed Machine Learning Jobs for Incentivizing Sharing in
Multi-Tenant Systems", IEEE Trans. Computers 2022, Alg. 1-5, eq. (2), (7), (8)): the oracle for
the paper's worked example and for the product's policy (astraea.py), which shares its prices,
durations and payment split (astraea_pricing.py). Placement is in astraea_reference_place.py.

- Alg. 1 (run_astraea): tau_l = 2^l (errata 1); J_l = the jobs carried over plus those with
  r_j in [tau_{l-1}, tau_l], a job on a boundary going to the first such interval (r = 3 -> J_2;
  r <= 2 -> J_1); J_l keeps the input order. J_l runs in (lambda tau_l, lambda tau_{l+1}]; what
  no round admits is carried to l + 1. It stops when nothing is left to schedule or after
  `max_interval` intervals.
- Alg. 2 (astraea_round / astraea_batch): round i covers ((lambda+i-1) tau_l, (lambda+i) tau_l]
  (errata 5). Own-quota pass with a = 0; then a_w(t), a_p(t) = sum_u (q^u - u's reserved
  units) per slot, fixed for the sharing pass (as the paper sets them once, line 4); then the
  sharing pass over the jobs left. A sharing-pass job pays its whole posted cost c_jw + c_jp,
  split per slot and class among the owners of that slot's idle units (the same snapshot) in
  proportion to them (eq. (2)); its own tenant may be one of them ("pays itself").
  Own-quota jobs pay nothing (their posted cost only decides their schedule).
- Alg. 3 (max_ideal_revenue): jobs one at a time in J_l order; every start slot of the round
  and every worker count D_w in 1..D_j (or the job's fixed `workers`), MINCOSTC and MINCOSTD;
  payoff mu = f(t^+ - (lambda+i-1) tau_l) - cost ("ideal" utility, measured from the round
  start); the best is committed (prices rise: eq. (8), cluster-wide per class) iff mu > 0.
  d = ceil(E D M / (n D_w)) with n for the placement (Alg. 4/5 line 3); a run starting in slot
  t^- completes in slot t^+ = t^- + d - 1 (the example's reading of line 3).
- Ties (the paper's comparisons, with TIE slack): earliest start, then fewer workers, then
  centralised (Alg. 3 line 6 keeps C on equality; line 10 needs a strict gain); servers as in
  astraea_reference_place.py.
- `workers`: Alg. 3 enumerates D_w from 1, but the example's outcome needs j12 to take its 3
  workers: on 2 centralised workers (d = 3) it fits u1's own quota (payoff 89 in (9, 12]),
  which the example rules out ("not adequate"). A job may therefore fix D_w (the evaluation's
  "GPUs requested = demand for workers"); None enumerates 1..D_j as Alg. 3 prints.
- Tenant revenue g_u (section 3) counts every income, the self-paid part included, so the
  payments cancel and sum_u g_u = sum_j f_j(t_j^+ - r_j) (the paper's stated identity).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurm_hetsched.core.policies.astraea_pricing import (
    duration_slots,
    fairness_ratio,
    split_payment,
)
from slurm_hetsched.core.policies.astraea_reference_place import (
    Ask,
    Cluster,
    Ledger,
    Placement,
    Pool,
    RefJob,
    mincost_c,
    mincost_d,
)

# Per tenant, per slot: its idle (workers, PSs).
Idle = dict[str, dict[int, tuple[int, int]]]

# Payoffs closer than this are equal (prices are powers; sums pick up float noise).
TIE = 1e-9


@dataclass(frozen=True, slots=True)
class Schedule:
    """An admitted job: slots start (t^-) .. end (t^+), its placement (y, z per server,
    centralised or not, posted cost), f at the round-relative completion, and its pass."""

    job: str
    tenant: str
    interval: int
    round_index: int
    start: int
    end: int
    placement: Placement
    ideal_utility: float
    shared: bool

    @property
    def slots(self) -> range:
        return range(self.start, self.end + 1)

    @property
    def during(self) -> tuple[int, int]:
        """The run as the paper writes it: (t^- - 1, t^+]."""
        return self.start - 1, self.end

    @property
    def cost(self) -> float:
        """c_jw + c_jp at the posted prices (eq. (6a))."""
        return self.placement.cost

    @property
    def payoff(self) -> float:
        """mu_j = f - cost (eq. (7))."""
        return self.ideal_utility - self.cost

    @property
    def payment(self) -> float:
        """What u pays for it: the cost for a sharing-pass job, nothing inside its quota."""
        return self.cost if self.shared else 0.0


@dataclass(frozen=True, slots=True)
class Income:
    """rho^owner_job(slot) (eq. (2)): `owner`'s share of `payer`'s job's cost in `slot`."""

    owner: str
    payer: str
    job: str
    slot: int
    amount: float


@dataclass(frozen=True, slots=True)
class Turn:
    """One call of A_maxIrev: interval l, round i, the round's slots and what may be borrowed."""

    interval: int
    round_index: int
    window: range
    pool: Pool
    shared: bool


@dataclass(frozen=True, slots=True)
class RoundResult:
    """Round i of interval l: admitted schedules in commit order, incomes, jobs left."""

    interval: int
    round_index: int
    window: range
    schedules: tuple[Schedule, ...]
    incomes: tuple[Income, ...]
    carried: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AstraeaRun:
    """Every round run by Alg. 1, and the jobs still unscheduled at the end."""

    rounds: tuple[RoundResult, ...]
    carried: tuple[str, ...]

    @property
    def schedules(self) -> tuple[Schedule, ...]:
        return tuple(s for r in self.rounds for s in r.schedules)

    @property
    def incomes(self) -> tuple[Income, ...]:
        return tuple(i for r in self.rounds for i in r.incomes)


def tau(interval: int) -> int:
    """tau_l = 2^l (errata 1)."""
    return 1 << interval


def interval_of(arrival: int) -> int:
    """The first l >= 1 with r in [tau_{l-1}, tau_l]: r = 3 -> 2, r = 4 -> 2, r <= 2 -> 1."""
    interval = 1
    while tau(interval) < arrival:
        interval += 1
    return interval


def round_window(interval: int, round_index: int, lam: int) -> range:
    """The slots of ((lambda+i-1) tau_l, (lambda+i) tau_l] (Alg. 2)."""
    t = tau(interval)
    return range((lam + round_index - 1) * t + 1, (lam + round_index) * t + 1)


def candidates(ledger: Ledger, job: RefJob, turn: Turn) -> list[Schedule]:
    """Every feasible schedule Alg. 3 weighs, in its order: start slot, then D_w, then
    MINCOSTC before MINCOSTD (lines 3-8)."""
    found = []
    for start in turn.window:
        for d_w in job.worker_counts():
            for rate, place in ((job.rate_central, mincost_c), (job.rate_distributed, mincost_d)):
                end = start + duration_slots(job.work, rate * d_w) - 1
                ask = Ask(job.tenant, range(start, end + 1), d_w, turn.window, turn.pool)
                placement = place(ledger, ask)
                if placement is None:
                    continue
                f = job.utility(end - (turn.window.start - 1))
                where = (turn.interval, turn.round_index, start, end)
                found.append(Schedule(job.id, job.tenant, *where, placement, f, turn.shared))
    return found


def best_schedule(ledger: Ledger, job: RefJob, turn: Turn) -> Schedule | None:
    """argmax of f - cost over the job's candidates, or None unless mu > 0 (eq. (7))."""
    best: Schedule | None = None
    for s in candidates(ledger, job, turn):
        if s.payoff > TIE and (best is None or s.payoff > best.payoff + TIE):
            best = s
    return best


def max_ideal_revenue(ledger: Ledger, jobs: Sequence[RefJob], turn: Turn) -> list[Schedule]:
    """A_maxIrev (Alg. 3): each job in turn gets its best schedule, committed at once so the
    next job sees the risen prices (eq. (8))."""
    admitted = []
    for job in jobs:
        s = best_schedule(ledger, job, turn)
        if s is not None:
            ledger.commit(job.tenant, s.placement, s.slots)
            admitted.append(s)
    return admitted


def idle_units(ledger: Ledger, window: range) -> Idle:
    """Per tenant and slot, its unreserved quota (q_w^u - ..., q_p^u - ...) (eq. (2))."""
    idle: Idle = {}
    for t in ledger.cluster.tenants:
        used = {s: ledger.tenant_used(t.name, s) for s in window}
        idle[t.name] = {s: (t.workers - w, t.ps - p) for s, (w, p) in used.items()}
    return idle


def pool_of(idle: Idle, window: range) -> Pool:
    """a_w(t), a_p(t): the idle units summed over tenants (Alg. 2 line 4)."""
    return Pool(
        {t: sum(per[t][0] for per in idle.values()) for t in window},
        {t: sum(per[t][1] for per in idle.values()) for t in window},
    )


def payments(schedules: Iterable[Schedule], idle: Idle) -> list[Income]:
    """rho^u_j(t) (eq. (2)): each slot's worker cost and PS cost split among the owners in
    proportion to their idle workers / PSs in that slot."""
    incomes: list[Income] = []
    for s in schedules:
        for t, (c_w, c_p) in zip(s.slots, s.placement.slot_costs, strict=True):
            parts: dict[str, float] = {}
            for cls, amount in ((0, c_w), (1, c_p)):
                owners = {u: per[t][cls] for u, per in idle.items()}
                for u, part in split_payment(amount, owners).items():
                    parts[u] = parts.get(u, 0.0) + part
            incomes.extend(Income(u, s.tenant, s.job, t, a) for u, a in sorted(parts.items()))
    return incomes


def astraea_round(
    ledger: Ledger, jobs: Sequence[RefJob], interval: int, round_index: int, lam: int
) -> RoundResult:
    """One round of A_round (Alg. 2 lines 3-7): own-quota pass, idle pool, sharing pass,
    payments; the jobs neither pass admits are carried."""
    window = round_window(interval, round_index, lam)
    own = max_ideal_revenue(ledger, jobs, Turn(interval, round_index, window, Pool(), False))
    taken = {s.job for s in own}
    idle = idle_units(ledger, window)
    rest = [j for j in jobs if j.id not in taken]
    turn = Turn(interval, round_index, window, pool_of(idle, window), True)
    shared = max_ideal_revenue(ledger, rest, turn)
    taken |= {s.job for s in shared}
    left = tuple(j.id for j in jobs if j.id not in taken)
    return RoundResult(
        interval, round_index, window, (*own, *shared), tuple(payments(shared, idle)), left
    )


def astraea_batch(
    ledger: Ledger, jobs: Sequence[RefJob], interval: int, lam: int
) -> list[RoundResult]:
    """A_round (Alg. 2): rounds 1..lambda of interval l over J_l, each on what is left."""
    rounds = []
    left = list(jobs)
    for i in range(1, lam + 1):
        result = astraea_round(ledger, left, interval, i, lam)
        rounds.append(result)
        left = [j for j in left if j.id in result.carried]
    return rounds


def run_astraea(
    cluster: Cluster, jobs: Sequence[RefJob], lam: int, max_interval: int = 12
) -> AstraeaRun:
    """Astraea (Alg. 1): interval by interval, J_l = carried + new arrivals, A_round on it,
    until no job is left or `max_interval` intervals have run."""
    if lam < 1 or len({j.id for j in jobs}) != len(jobs):
        raise ValueError("lambda must be >= 1 and job ids unique")
    ledger = Ledger(cluster)
    rounds: list[RoundResult] = []
    carried: set[str] = set()
    last = max((interval_of(j.arrival) for j in jobs), default=0)
    for interval in range(1, max_interval + 1):
        batch = [j for j in jobs if j.id in carried or interval_of(j.arrival) == interval]
        if not batch and interval > last:
            break
        results = astraea_batch(ledger, batch, interval, lam) if batch else []
        rounds.extend(results)
        carried = set(results[-1].carried) if results else set()
    left = tuple(j.id for j in jobs if j.id in carried or interval_of(j.arrival) > max_interval)
    return AstraeaRun(tuple(rounds), left)


def income_by_owner(incomes: Iterable[Income]) -> dict[str, float]:
    """Each owner's total income, the self-paid part included."""
    total: dict[str, float] = {}
    for i in incomes:
        total[i.owner] = total.get(i.owner, 0.0) + i.amount
    return total


def tenant_revenue(run: AstraeaRun, jobs: Sequence[RefJob], cluster: Cluster) -> dict[str, float]:
    """g_u (section 3): u's jobs' utility f(t^+ - r), plus its incomes, minus its payments."""
    arrival = {j.id: j for j in jobs}
    g = {t.name: 0.0 for t in cluster.tenants}
    for s in run.schedules:
        job = arrival[s.job]
        g[s.tenant] += job.utility(s.end - job.arrival) - s.payment
    for u, amount in income_by_owner(run.incomes).items():
        g[u] += amount
    return g


def fairness_ratios(run: AstraeaRun, jobs: Sequence[RefJob], cluster: Cluster) -> dict[str, float]:
    """alpha_u = (g_u / sum_u g_u) / ((q_w^u / sum q_w + q_p^u / sum q_p) / 2) (section 8.2)."""
    g = tenant_revenue(run, jobs, cluster)
    total = sum(g.values())
    return {
        t.name: fairness_ratio(
            g[t.name], total, (t.workers / cluster.total_workers + t.ps / cluster.total_ps) / 2
        )
        for t in cluster.tenants
    }


__all__ = [
    "TIE",
    "AstraeaRun",
    "Idle",
    "Income",
    "RoundResult",
    "Schedule",
    "Turn",
    "astraea_batch",
    "astraea_round",
    "best_schedule",
    "candidates",
    "fairness_ratios",
    "income_by_owner",
    "interval_of",
    "max_ideal_revenue",
    "payments",
    "pool_of",
    "round_window",
    "run_astraea",
    "tau",
    "tenant_revenue",
]
