"""OASiS's reservation book over the horizon: the GPUs admitted schedules hold in each slot
per (node, GPU type) unit, the posted prices that follow, and the conversion of a job's best
schedule (oasis_schedule.py) into the `Reservation` the policy hands back. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from slurm_hetsched.core.model import GpuSlice, Placement, Reservation, Stretch
from slurm_hetsched.core.policies.hadar_alloc import Units
from slurm_hetsched.core.policies.oasis_market import Market, Take
from slurm_hetsched.core.policies.oasis_prices import PriceBounds
from slurm_hetsched.core.policies.oasis_schedule import Schedule

# Rows kept past the horizon for schedules' tails, in horizons: beyond them nothing is held
# (a job of months must not cost memory in proportion), and two tails that meet there are
# sorted out when they come within reach (a schedule that no longer fits is planned again).
ROWS_PER_HORIZON = 8


class Book:
    """The slots from `first_slot` on: GPUs reserved per unit and slot (`held`) out of those
    we may use (`capacity`), and their prices. The first `slots` are the horizon the dynamic
    programme plans slot by slot; the rows after it hold the reservations that run past it
    (a long job's tail), and past the last row nothing is held."""

    def __init__(
        self,
        units: Units,
        gpu_types: tuple[str, ...],
        bounds: PriceBounds,
        first_slot: int,
        slots: int,
        slot_s: float,
        now_s: float,
    ) -> None:
        self.units, self.gpu_types, self.bounds = units, gpu_types, bounds
        self.first_slot, self.slot_s, self.slots = first_slot, slot_s, slots
        self.unit_of = {(units.nodes[u], gpu_types[c]): u for u, c in enumerate(units.columns)}
        # The market is the GPUs we may use: those of jobs outside our control (or of a node
        # not available) are neither sold nor priced, so they do not make the rest dearer.
        self.capacity = np.array(units.free, dtype=np.int64)
        self.base_held = np.zeros_like(self.capacity)
        self.base_price = np.array([bounds.lower[c] for c in units.columns])
        self.held = np.tile(self.base_held, (slots, 1))
        self.price = np.tile(self.base_price, (slots, 1))
        # The current slot starts now (current_slot): this round's placement holds until
        # the next round, a slot later when the slot is the round.
        self.slot_ends = now_s + (1 + np.arange(slots)) * slot_s
        self.usable_s = np.full(slots, slot_s)
        self._least: dict[tuple[int, int], np.ndarray] = {}
        self._offers: tuple[np.ndarray, np.ndarray] | None = None

    def _ensure(self, rows: int) -> None:
        """At least `rows` rows (base rows appended)."""
        more = rows - self.held.shape[0]
        if more > 0:
            self.held = np.vstack([self.held, np.tile(self.base_held, (more, 1))])
            self.price = np.vstack([self.price, np.tile(self.base_price, (more, 1))])
            self._offers = None

    def take_of(self, placement: Placement) -> Take | None:
        """The placement as (unit, GPUs) pairs, or None if a node or type is not there."""
        found = [(self.unit_of.get((s.node, s.gpu_type)), s.count) for s in placement.slices]
        if any(u is None for u, _ in found):
            return None
        return tuple(sorted((int(u), n) for u, n in found if u is not None))

    def fits(self, reservation: Reservation) -> bool:
        """Whether every slot of `reservation` from the first on has its GPUs free."""
        for low, high, take in self._runs(reservation):
            if take is None:
                return False
            for u, n in take:
                if (self.held[low : high + 1, u] + n > self.capacity[u]).any():
                    return False
        return True

    def hold(self, reservation: Reservation) -> None:
        """Add `reservation`'s GPUs in its slots and raise those prices."""
        self._add(reservation, 1)

    def release(self, reservation: Reservation) -> None:
        """Take back what `hold(reservation)` added."""
        self._add(reservation, -1)

    def price_of(self, reservation: Reservation) -> float:
        """What `reservation`'s slots from the first on cost at the prices now (itself not
        held), as a schedule is priced: a whole-node placement at the offers (`market`)."""
        runs = self._runs(reservation)  # first: it may add rows
        offer = self.offers()[0]
        return sum(
            float((offer if len(take) == 1 else self.price)[low : high + 1, u].sum()) * n
            for low, high, take in runs
            if take
            for u, n in take
        )

    def _add(self, reservation: Reservation, sign: int) -> None:
        touched = set()
        for low, high, take in self._runs(reservation):
            for u, n in take or ():
                self.held[low : high + 1, u] += sign * n
                touched.add(u)
        for u in touched:
            self._reprice(u)
        self._least.clear()
        self._offers = None

    def busy_now(self) -> bool:
        """Whether any schedule holds a GPU in this slot."""
        return bool(self.held[0].sum() > 0)

    def idle_now(self) -> dict[int, int]:
        """GPU type column -> the most GPUs of it free on one node in this slot."""
        idle: dict[int, int] = {}
        for u, column in enumerate(self.units.columns):
            free = int(self.capacity[u] - self.held[0, u])
            idle[column] = max(idle.get(column, 0), free)
        return idle

    def least_prices(self, column: int, size: int) -> np.ndarray:
        """(slots,) the least price of `size` GPUs of type `column` in each slot (inf where
        they are not free), as a schedule pays (oasis_schedule._options): the type's offer
        where a node has them all free, else the cheapest free GPUs over nodes; this slot's
        cost nothing where they are free, as in `market(idle_now_free=True)`. For the bound
        oasis_bound.payoff_bound."""
        key = (column, size)
        if key not in self._least:
            mine = [u for u, c in enumerate(self.units.columns) if c == column]
            cheapest = np.full(self.slots, math.inf)
            if mine:
                free = self.capacity[mine][None, :] - self.held[: self.slots, mine]
                whole = (free >= size).any(axis=1)
                cheapest[whole] = self.offers()[0][: self.slots, mine[0]][whole] * size
                for t in np.flatnonzero(~whole & (free.sum(axis=1) >= size)):
                    cheapest[t] = self._cheapest(int(t), mine, size)
            if math.isfinite(cheapest[0]):
                cheapest[0] = 0.0
            self._least[key] = cheapest
        return self._least[key]

    def _cheapest(self, t: int, mine: list[int], size: int) -> float:
        """The least price of `size` free GPUs among units `mine` in slot t, over nodes if
        need be (a lower bound on both a whole node and a spread gang)."""
        free = self.capacity[mine] - self.held[t, mine]
        price = self.price[t, mine]
        need, total = size, 0.0
        for i in np.argsort(price, kind="stable"):
            count = min(need, int(free[i]))
            total += count * float(price[i])
            need -= count
            if need == 0:
                return total
        return math.inf

    def market(self, idle_now_free: bool = False) -> Market:
        """The slots as a job sees them (its own GPUs not yet held); with `idle_now_free`
        (the policy's), this slot's GPUs nobody reserved cost nothing: unused they are lost,
        and no job arriving later can take them before the next round."""
        free = np.maximum(self.capacity[None, :] - self.held, 0)
        base_free = np.maximum(self.capacity - self.base_held, 0)
        offer, base_offer = self.offers()
        return Market(
            self.units, free, self.price.copy(), self.usable_s, self.slot_ends, self.slot_s,
            horizon=self.slots, base_free=base_free, base_price=self.base_price,
            free_now=idle_now_free, offer=offer, base_offer=base_offer,
        )  # fmt: skip

    def reservation(self, job_id: str, schedule: Schedule) -> Reservation:
        """`schedule` as a reservation from the horizon's first slot."""
        stretches: list[Stretch] = []
        takes = list(schedule.takes)
        for t, take in enumerate(takes):
            placement = None if take is None else self._placement(job_id, take)
            slot = self.first_slot + t
            if stretches and stretches[-1].placement == placement:
                last = stretches[-1]
                stretches[-1] = Stretch(last.first_slot, slot, placement)
            else:
                stretches.append(Stretch(slot, slot, placement))
        if schedule.tail_slots:
            last = stretches[-1]
            stretches[-1] = Stretch(last.first_slot, last.last_slot + schedule.tail_slots,
                                    last.placement)  # fmt: skip
        return Reservation(job_id, self.slot_s, tuple(stretches), schedule.utility, schedule.price)

    def _placement(self, job_id: str, take: Take) -> Placement:
        return Placement(
            job_id,
            tuple(
                GpuSlice(self.units.nodes[u], self.gpu_types[self.units.columns[u]], n)
                for u, n in take
            ),
        )

    def _runs(self, reservation: Reservation) -> list[tuple[int, int, Take | None]]:
        """(first row, last row, take) of its running stretches from the first slot on, rows
        added as needed; a placement on GPUs the cluster no longer has reads as None."""
        found = []
        for stretch in reservation.stretches:
            if stretch.placement is None or stretch.last_slot < self.first_slot:
                continue
            low = max(stretch.first_slot, self.first_slot) - self.first_slot
            high = min(stretch.last_slot - self.first_slot, self.slots * ROWS_PER_HORIZON - 1)
            if high < low:
                continue
            self._ensure(high + 1)
            found.append((low, high, self.take_of(stretch.placement)))
        return found

    def offers(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows, units) and (units,): `Market.offer` and `Market.base_offer`, cached until
        the next hold or release."""
        if self._offers is None:
            base = self._spread_prices(self.base_held[None, :])[0]
            self._offers = (self._spread_prices(self.held), base)
        return self._offers

    def _spread_prices(self, held: np.ndarray) -> np.ndarray:
        """(rows, units): per row, each unit's type's price were its GPUs held (`held`, rows
        x units) spread as evenly as whole GPUs allow over the type's nodes: the least price
        of a node of the type then (`Market.offer`). Packed or spread, the same load costs
        the same, and the price rises with the type's load as per-node prices do when
        spread."""
        columns = np.array(self.units.columns, dtype=np.int64)
        capacity = self.capacity.astype(float)
        out = np.empty(held.shape)
        for column in np.unique(columns):
            mine = np.flatnonzero((columns == column) & (capacity > 0))
            if mine.size == 0:
                out[:, columns == column] = self.bounds.upper[column]
                continue
            share = held[:, mine].sum(axis=1) / capacity[mine].sum()  # (rows,)
            even = np.floor(share[:, None] * capacity[mine][None, :] + 1e-9) / capacity[mine]
            low, high = self.bounds.lower[column], self.bounds.upper[column]
            least = (low * (high / low) ** np.clip(even, 0.0, 1.0)).min(axis=1)
            out[:, columns == column] = least[:, None]
        return out

    def _reprice(self, u: int) -> None:
        column, capacity = self.units.columns[u], int(self.capacity[u])
        share = np.clip(self.held[:, u] / capacity, 0.0, 1.0) if capacity else 1.0
        low, high = self.bounds.lower[column], self.bounds.upper[column]
        self.price[:, u] = low * (high / low) ** share


def current_slot(now_s: float, slot_s: float) -> int:
    """The slot whose start on the grid of `slot_s` is nearest `now_s`; the book takes it to
    start now. Rounds come a round apart at a phase of their own (the controller's start, the
    simulator's jump over an idle gap): a slot taken to start at its grid time would give the
    round's decision a sliver of the slot and the next slot's work to a placement it no
    longer holds. Re-anchored at each round, a slot of one round is exactly the round; a
    phase that drifts (rounds that overran) past half a slot skips one slot (those schedules
    fall behind and are planned again)."""
    return math.floor(now_s / slot_s + 0.5)


def kept_reservations(
    reservations: Mapping[str, Reservation], job_ids: tuple[str, ...], slot: int, slot_s: float
) -> tuple[dict[str, Reservation], list[str]]:
    """The reservations still in force from `slot` on: of jobs still there, made with this
    slot length; and the jobs whose schedule ran out before they were done (they are planned
    again)."""
    kept, overran = {}, []
    present = set(job_ids)
    for job_id, reservation in sorted(reservations.items()):
        if job_id not in present or reservation.slot_s != slot_s:
            continue
        rest = reservation.from_slot(slot)
        if rest is None:
            overran.append(job_id)
        else:
            kept[job_id] = rest
    return kept, overran
