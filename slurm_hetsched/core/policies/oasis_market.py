"""What OASiS's dual subroutine sees of the cluster: the slots' free GPUs and posted prices
(`Market`), and one configuration's placement in one slot (`Option`). Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from slurm_hetsched.core.policies.hadar_alloc import Units

Take = tuple[tuple[int, int], ...]  # (unit index, GPUs), as hadar_alloc's offers


@dataclass(frozen=True, slots=True)
class Market:
    """The slots as one job sees them: the horizon planned slot by slot, then rows held by
    other jobs' tails, then only the GPUs outside our control.

    Attributes:
        units: the cluster's (node, GPU type) units.
        free: (rows, units) GPUs free for this job in each slot, rows >= horizon.
        price: (rows, units) price of one GPU for one slot.
        usable_s: (horizon,) seconds of each slot to run (the book's are whole: its first slot
            starts at the round).
        slot_ends: (horizon,) when each slot ends, on the problem's clock.
        slot_s: the slot length (the tail beyond the horizon is counted in whole slots).
        horizon: the slots the dynamic programme plans one by one.
        base_free, base_price: (units,) free GPUs and price past the last row.
        free_now: the first slot's free GPUs cost nothing (`Book.market`); `price` still
            ranks them, so a job there takes the GPUs it would have paid least for.
        offer, base_offer: (rows, units) and (units,) what one GPU of a whole-node
            placement pays, when not its node's `price`: its type's price were the GPUs held
            spread evenly over the type's nodes (`Book.market`; placements pack,
            oasis_schedule._kept_whole, and the cheapest node's price would be L while any
            node is empty). None: the node's price.
    """

    units: Units
    free: np.ndarray
    price: np.ndarray
    usable_s: np.ndarray
    slot_ends: np.ndarray
    slot_s: float
    horizon: int
    base_free: np.ndarray
    base_price: np.ndarray
    free_now: bool = False
    offer: np.ndarray | None = None
    base_offer: np.ndarray | None = None

    @property
    def slots(self) -> int:
        return self.horizon

    def tail_costs(self, take: Take, extras: np.ndarray | int, offered: bool = False) -> np.ndarray:
        """The price of `take` for each number of slots in `extras` after the horizon; inf
        from the first of them where its GPUs are not free. At `offer` when `offered` (and
        there is one). Past the rows held by other schedules every slot costs the base
        price, so a tail of any length costs O(rows)."""
        wanted = np.atleast_1d(np.asarray(extras, dtype=np.int64))
        inside = max(self.free.shape[0] - self.horizon, 0)
        block = slice(self.horizon, self.horizon + inside)
        units = [u for u, _ in take]
        counts = np.array([n for _, n in take])
        fits = (self.free[block][:, units] >= counts).all(axis=1)
        at_offer = offered and self.offer is not None and self.base_offer is not None
        price = self.offer if at_offer else self.price
        base_price = self.base_offer if at_offer else self.base_price
        # Never below the last slot's prices: past the horizon nobody has reserved yet, and
        # prices at L there would have every long job wait for the horizon's end.
        last = price[self.horizon - 1, units]  # type: ignore[index]
        per_slot = np.maximum(price[block][:, units], last[None, :]) @ counts  # type: ignore[index]
        prefix = np.concatenate([[0.0], np.cumsum(per_slot)])
        broken = np.flatnonzero(~fits)
        if broken.size:
            prefix[broken[0] + 1 :] = math.inf
        beyond_price = float(np.maximum(base_price[units], last) @ counts)  # type: ignore[index]
        beyond_fits = bool((self.base_free[units] >= counts).all())
        cost = prefix[np.minimum(wanted, inside)]
        past = np.maximum(wanted - inside, 0)
        extra = np.where(past > 0, past * beyond_price if beyond_fits else math.inf, 0.0)
        return np.asarray(cost + extra, dtype=float)


@dataclass(frozen=True, slots=True)
class Option:
    """One configuration's GPUs in one slot, their price and the job's rate there;
    `offered`: priced at the market's `offer` (a whole-node placement), its tail too."""

    take: Take
    cost: float
    rate: float
    offered: bool = False
