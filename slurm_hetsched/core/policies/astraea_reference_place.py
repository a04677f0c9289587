"""Values and placement of the paper-faithful Astraea reference (Wang et al., "Online
Scheduling of Distributed Machine Learning Jobs for Incentivizing Sharing in Multi-Tenant
Systems", IEEE Trans. Computers 2022): servers, tenants and jobs (section 2), the slot ledger
(h_sw(t), h_sp(t) and each tenant's use), the cluster-wide posted prices (eq. (8)) and the two
min-cost placements of one (start, D_w) candidate, MINCOSTD (Alg. 4, distributed) and MINCOSTC
(Alg. 5, centralised). The rounds and batches are in astraea_reference.py.

Reading choices (the round logic and the full list are in astraea_reference.py):

- Slot t is the time span (t - 1, t]; a run occupies the slots start..end, both included, so
  "during (8, 10]" is slots 9 and 10 (the paper's example: t^- = 9 with 4 slots completes at 12).
- Availability (Alg. 4/5 lines 3-6): in every slot of the run the job's tenant must have
  max{q_w^u - its jobs' workers, a_w(t)} >= D_w; PSs the same with q_p, its PSs and a_p(t)
  (errata 4: the printed PS test reuses the worker quota).
- MINCOSTD keeps only PS hosts whose free PSs cover the bandwidth of the workers placed
  elsewhere, z b_p >= remote workers x b_w ((3i), errata 9), and sums the prices over the run's
  slots, as MINCOSTC does too (errata 8; the printed MINCOSTC charges d x the start slot's price).
- Ties: MINCOSTD's PS host is the one needing the fewest PSs, then the lowest index; the
  remaining workers go to servers by fewest free workers first (the paper's "most fragmented
  first"), then the lowest index. MINCOSTC may pick "any" fitting server: it takes the one with
  the least reserved over the whole round (worker-slots, then PS-slots), then the lowest index.
  Prices are cluster-wide, so the choice never changes a cost; this rule is the one that puts
  the example's j21 on s2 (the lowest index alone would put it on s1, free again in (10, 12]).

Pure: no I/O, no clock; the ledger is the only mutable state and belongs to its caller.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from slurm_hetsched.core.policies.astraea_pricing import posted_price

# Float slack for bandwidth ratios (a need of 2.0000000001 PSs is 2).
EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Server:
    """One server: C_sw worker slots and C_sp PS slots."""

    workers: int
    ps: int


@dataclass(frozen=True, slots=True)
class Tenant:
    """A user and its bought quota (fair share): q_w workers and q_p PSs."""

    name: str
    workers: int
    ps: int


@dataclass(frozen=True, slots=True)
class Cluster:
    """Servers, tenants, bandwidth per worker / PS (b_w, b_p) and price bases (theta_w,
    theta_p). The quotas partition the cluster (sum_u q = sum_s C, section 2)."""

    servers: tuple[Server, ...]
    tenants: tuple[Tenant, ...]
    theta_w: float
    theta_p: float
    b_w: float = 1.0
    b_p: float = 1.0

    def __post_init__(self) -> None:
        if sum(t.workers for t in self.tenants) != self.total_workers:
            raise ValueError("worker quotas must add up to the servers' worker slots")
        if sum(t.ps for t in self.tenants) != self.total_ps:
            raise ValueError("PS quotas must add up to the servers' PS slots")
        if len({t.name for t in self.tenants}) != len(self.tenants):
            raise ValueError("tenant names must be unique")
        if self.theta_w <= 1 or self.theta_p <= 1 or self.b_w <= 0 or self.b_p <= 0:
            raise ValueError("theta must be > 1 and bandwidths > 0")

    @property
    def total_workers(self) -> int:
        return sum(s.workers for s in self.servers)

    @property
    def total_ps(self) -> int:
        return sum(s.ps for s in self.servers)

    def tenant(self, name: str) -> Tenant:
        for t in self.tenants:
            if t.name == name:
                return t
        raise ValueError(f"unknown tenant {name!r}")


@dataclass(frozen=True, slots=True)
class LinearUtility:
    """f(x) = k x + g of the slots x elapsed (Theorem 1(i); the example: k = -2, g = 100)."""

    k: float
    g: float

    def __call__(self, elapsed: int) -> float:
        return self.k * elapsed + self.g


@dataclass(frozen=True, slots=True)
class RefJob:
    """A PS job (section 2): arrival slot r, E epochs, D chunks, M mini-batches per chunk,
    mini-batches one worker trains per slot centralised / distributed (n_j of eq. (1)),
    utility of the elapsed slots, and optionally a fixed worker count (see the module doc)."""

    id: str
    tenant: str
    arrival: int
    epochs: int
    chunks: int
    minibatches: int
    rate_central: float
    rate_distributed: float
    utility: Callable[[int], float]
    workers: int | None = None

    def __post_init__(self) -> None:
        if min(self.epochs, self.chunks, self.minibatches) < 1:
            raise ValueError(f"{self.id}: E, D and M must be >= 1")
        if self.workers is not None and not 1 <= self.workers <= self.chunks:
            raise ValueError(f"{self.id}: workers must be in 1..D ((3e))")

    @property
    def work(self) -> int:
        """E D M mini-batches ((3k))."""
        return self.epochs * self.chunks * self.minibatches

    def worker_counts(self) -> range:
        """The D_w Alg. 3 tries: 1..D_j, or the fixed count."""
        return (
            range(1, self.chunks + 1)
            if self.workers is None
            else range(self.workers, self.workers + 1)
        )


@dataclass(frozen=True, slots=True)
class Pool:
    """a_w(t), a_p(t): idle units any tenant may borrow in slot t (Alg. 2 line 4). Empty in
    the own-quota pass (a = 0: only the tenant's own remaining quota counts)."""

    workers: Mapping[int, int] = field(default_factory=dict)
    ps: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Ask:
    """One candidate of Alg. 3 line 3: a tenant's job on `slots` (t^-..t^+) with D_w
    workers, inside the round's `window`, drawing on `pool`."""

    tenant: str
    slots: range
    workers: int
    window: range
    pool: Pool


@dataclass(frozen=True, slots=True)
class Placement:
    """y_js and z_js per server, fixed over the run ((3f), (3h)), and the posted cost of each
    slot of the run as (eta_w(t) x workers, eta_p(t) x PSs), at the prices before commit."""

    workers: tuple[int, ...]
    ps: tuple[int, ...]
    centralised: bool
    slot_costs: tuple[tuple[float, float], ...]

    @property
    def worker_cost(self) -> float:
        """c_jw: the workers' posted price summed over the run."""
        return sum(w for w, _ in self.slot_costs)

    @property
    def ps_cost(self) -> float:
        """c_jp: the PSs' posted price summed over the run."""
        return sum(p for _, p in self.slot_costs)

    @property
    def cost(self) -> float:
        return self.worker_cost + self.ps_cost


class Ledger:
    """What is reserved per slot: h_sw(t), h_sp(t) per server and each tenant's jobs' workers
    and PSs (sum_{j^u} sum_s y, z). One per run; windows never overlap, so it only grows."""

    __slots__ = ("_server", "_tenant", "cluster")

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._server: dict[tuple[int, int], tuple[int, int]] = {}  # (slot, server) -> (w, p)
        self._tenant: dict[tuple[str, int], tuple[int, int]] = {}  # (tenant, slot) -> (w, p)

    def server_used(self, server: int, slot: int) -> tuple[int, int]:
        return self._server.get((slot, server), (0, 0))

    def server_free(self, server: int, slots: range) -> tuple[int, int]:
        """min over `slots` of (C_sw - h_sw(t), C_sp - h_sp(t))."""
        cap = self.cluster.servers[server]
        used = [self.server_used(server, t) for t in slots]
        return cap.workers - max(w for w, _ in used), cap.ps - max(p for _, p in used)

    def cluster_used(self, slot: int) -> tuple[int, int]:
        """(h_w(t), h_p(t)): the cluster totals that set the prices."""
        used = [self.server_used(s, slot) for s in range(len(self.cluster.servers))]
        return sum(w for w, _ in used), sum(p for _, p in used)

    def tenant_used(self, tenant: str, slot: int) -> tuple[int, int]:
        return self._tenant.get((tenant, slot), (0, 0))

    def load(self, server: int, slots: range) -> tuple[int, int]:
        """Worker-slots and PS-slots reserved on `server` over `slots`."""
        used = [self.server_used(server, t) for t in slots]
        return sum(w for w, _ in used), sum(p for _, p in used)

    def prices(self, slot: int) -> tuple[float, float]:
        """(eta_w(t), eta_p(t)) = theta ** (h(t) / sum_s C) - 1 per class (eq. (8))."""
        c = self.cluster
        h_w, h_p = self.cluster_used(slot)
        return (
            posted_price(c.theta_w, h_w, c.total_workers),
            posted_price(c.theta_p, h_p, c.total_ps),
        )

    def commit(self, tenant: str, placement: Placement, slots: range) -> None:
        """Reserve `placement` in every slot of `slots` (prices rise with it)."""
        for t in slots:
            w, p = self.tenant_used(tenant, t)
            self._tenant[tenant, t] = (w + sum(placement.workers), p + sum(placement.ps))
            for s, (y, z) in enumerate(zip(placement.workers, placement.ps, strict=True)):
                if y or z:
                    hw, hp = self.server_used(s, t)
                    self._server[t, s] = (hw + y, hp + z)


def worker_room(ledger: Ledger, ask: Ask, slot: int) -> int:
    """max{q_w^u - sum_{j^u} sum_s y(t), a_w(t)}: the workers u may still take (Alg. 4 line 4)."""
    quota = ledger.cluster.tenant(ask.tenant).workers - ledger.tenant_used(ask.tenant, slot)[0]
    return max(quota, ask.pool.workers.get(slot, 0))


def ps_room(ledger: Ledger, ask: Ask, slot: int) -> int:
    """max{q_p^u - sum_{j^u} sum_s z(t), a_p(t)} (Alg. 4 line 8 with errata 4)."""
    quota = ledger.cluster.tenant(ask.tenant).ps - ledger.tenant_used(ask.tenant, slot)[1]
    return max(quota, ask.pool.ps.get(slot, 0))


def quota_fits(ledger: Ledger, ask: Ask) -> bool:
    """Alg. 4/5 lines 4-6: the run stays in the round and u may take D_w workers throughout."""
    inside = ask.slots.start >= ask.window.start and ask.slots.stop <= ask.window.stop
    return inside and min(worker_room(ledger, ask, t) for t in ask.slots) >= ask.workers


def priced(
    ledger: Ledger, y: Sequence[int], z: Sequence[int], ask: Ask, central: bool
) -> Placement:
    """The placement with the posted cost of each slot: sum_t eta_w(t) y + eta_p(t) z (errata 8:
    summed over the slots for both placements)."""
    costs = []
    for t in ask.slots:
        eta_w, eta_p = ledger.prices(t)
        costs.append((eta_w * sum(y), eta_p * sum(z)))
    return Placement(tuple(y), tuple(z), central, tuple(costs))


def ps_host(ledger: Ledger, ask: Ask) -> tuple[int, int, int] | None:
    """Alg. 4 lines 7-13: the PS server s_1 as (D_sp, s, D_sw), or None.

    D_sw = min(D_w - 1, free workers) stays local (at least one remote worker keeps it
    distributed); D_sp = ceil((D_w - D_sw) b_w / b_p) PSs carry the remote workers' traffic and
    must all fit in the free PSs and u's PS room (errata 9). Fewest PSs first (it hosts the
    most workers locally), then the lowest index."""
    c = ledger.cluster
    room = min(ps_room(ledger, ask, t) for t in ask.slots)
    hosts = []
    for s in range(len(c.servers)):
        free_w, free_p = ledger.server_free(s, ask.slots)
        local = min(ask.workers - 1, free_w)
        need = math.ceil((ask.workers - local) * c.b_w / c.b_p - EPS)
        if min(free_p, room) >= need:
            hosts.append((need, s, local))
    return min(hosts, default=None)


def mincost_d(ledger: Ledger, ask: Ask) -> Placement | None:
    """MINCOSTD (Alg. 4): the distributed placement of D_w workers on `ask.slots`, or None.

    PSs and D_sw workers on the host from ps_host; the remaining workers fill the other servers
    with the fewest free workers first (lines 16-20: keep whole servers for centralised jobs)."""
    if not quota_fits(ledger, ask):
        return None
    host = ps_host(ledger, ask)
    if host is None:
        return None
    need, s1, local = host
    n = len(ledger.cluster.servers)
    y, z = [0] * n, [0] * n
    y[s1], z[s1] = local, need
    left = ask.workers - local
    others = sorted((ledger.server_free(s, ask.slots)[0], s) for s in range(n) if s != s1)
    for free, s in others:
        y[s] = min(max(free, 0), left)
        left -= y[s]
    return None if left > 0 else priced(ledger, y, z, ask, central=False)


def mincost_c(ledger: Ledger, ask: Ask) -> Placement | None:
    """MINCOSTC (Alg. 5): D_w workers and exactly one PS on one server, or None.

    A server fits with D_w free workers and a free PS throughout, and u needs PS room (line 7
    with errata 4); among those, the least reserved over the round, then the lowest index."""
    if not quota_fits(ledger, ask) or min(ps_room(ledger, ask, t) for t in ask.slots) < 1:
        return None
    n = len(ledger.cluster.servers)
    fits = [
        s
        for s in range(n)
        if (free := ledger.server_free(s, ask.slots))[0] >= ask.workers and free[1] >= 1
    ]
    if not fits:
        return None
    s1 = min(fits, key=lambda s: (*ledger.load(s, ask.window), s))
    y, z = [0] * n, [0] * n
    y[s1], z[s1] = ask.workers, 1
    return priced(ledger, y, z, ask, central=True)


__all__ = [
    "Ask",
    "Cluster",
    "Ledger",
    "LinearUtility",
    "Placement",
    "Pool",
    "RefJob",
    "Server",
    "Tenant",
    "mincost_c",
    "mincost_d",
    "ps_host",
    "ps_room",
    "quota_fits",
    "worker_room",
]
