"""The dynamic programme of OASiS's dual subroutine (notes/astraea-oasis.md section 11,
DP_COST), with the configuration of the last slot and the changes made so far in the state
(oasis_schedule.py says why). Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from slurm_hetsched.core.policies.hadar_alloc import JobView
from slurm_hetsched.core.policies.oasis_market import Market, Option

NOT_STARTED, PAUSED = 0, 1  # the two states without GPUs; configurations follow
# Payoffs this close (relative) are a tie, which goes to the earlier end: a job worth the same
# whenever it finishes must not wait for a rounding error's worth of price.
_TIE = 1e-6


@dataclass(frozen=True, slots=True)
class Tables:
    """Per slot and configuration: price, work units of a slot run through (`full`) and of a
    slot that begins with a restart (`cut`); infeasible configurations cost inf."""

    cost: np.ndarray  # (slots, configs)
    full: np.ndarray  # (slots, configs) int
    cut: np.ndarray  # (slots, configs) int

    @staticmethod
    def of(job: JobView, market: Market, options: list[list[Option | None]], unit: float) -> Tables:
        slots, n = market.slots, len(options[0])
        cost = np.full((slots, n), math.inf)
        rate = np.zeros((slots, n))
        for t, row in enumerate(options):
            for i, option in enumerate(row):
                if option is not None:
                    cost[t, i], rate[t, i] = option.cost, option.rate
        usable = market.usable_s[:, None]
        restart = np.minimum(job.restart_s, usable)
        # To the nearest unit: flooring would bias every slot against the work it does (up to
        # a unit a slot), and a long job against the horizon (its tail is counted exactly).
        full = np.floor(rate * usable / unit + 0.5).astype(np.int64)
        cut = np.floor(rate * (usable - restart) / unit + 0.5).astype(np.int64)
        return Tables(cost, full, cut)


class Programme:
    """The dynamic programme over slots: cost[k, state, w], the least price of reaching the
    end of a slot in `state` (NOT_STARTED, PAUSED, or configuration i at 2 + i) with w work
    units done (w = total: done) after k changes. Done states leave the programme the slot they
    finish (their end slot is tried then); the costs of every slot are kept so the path is
    found again by looking for the source each value came from."""

    def __init__(
        self, tables: Tables, total: int, max_changes: int, start: int | None, unit: float
    ) -> None:
        # States past what the horizon can reach are never reached: a long job's arrays stop
        # one past that (its "done" then unreachable) and its tail counts the rest exactly.
        reach = int(tables.full.max(axis=1, initial=0).sum())
        self.total = min(total, reach + 1)
        self.tables, self.layers, self.unit = tables, max_changes + 1, unit
        n = tables.cost.shape[1]
        self.n_states = n + 2
        cost = np.full((self.layers, self.n_states, self.total + 1), math.inf)
        cost[0, NOT_STARTED if start is None else 2 + start, 0] = 0.0
        self.history = [cost]

    def best(
        self, job: JobView, market: Market, options: list[list[Option | None]]
    ) -> tuple[list[int], int] | None:
        """The states of every slot up to the best end slot and the slots past the horizon
        (0 if it ends inside), or None if it cannot end."""
        best: tuple[float, int, int, int, int] | None = None  # payoff, slot, layer, state, tail
        for t in range(market.slots):
            new = self._step(t)
            done = new[:, :, self.total]
            if np.isfinite(done).any():
                layer, state = (int(i) for i in np.unravel_index(int(np.argmin(done)), done.shape))
                value = job.utility.value(float(market.slot_ends[t]), job.arrival_s)
                payoff = value - float(done[layer, state])
                if best is None or payoff > best[0] + _TIE * max(1.0, abs(best[0])):
                    best = (payoff, t, layer, state, 0)
            self.history.append(new)
            # Stop when no later end can do better: any later completion is worth at most the
            # utility at this slot's end (it never rises) and costs at least the cheapest
            # state still running (prices are never negative).
            live = float(np.min(new[:, :, : self.total]))
            if best is not None and value_at_end(job, market, t) - live <= best[0]:
                return self._trace(best[1], best[2], best[3], self.total), 0
            if not math.isfinite(live):
                break
        tail = self._tail(job, market, options)
        if tail is not None and (best is None or tail[0] > best[0] + _TIE * max(1.0, abs(best[0]))):
            _payoff, tail_layer, tail_state, w, extra = tail
            return self._trace(market.slots - 1, tail_layer, tail_state, w), extra
        if best is None:
            return None
        return self._trace(best[1], best[2], best[3], self.total), 0

    def _step(self, t: int) -> np.ndarray:
        cost = self.history[-1]
        price, full, cut = self.tables.cost[t], self.tables.full[t], self.tables.cut[t]
        new = np.empty_like(cost)
        new[:, NOT_STARTED] = cost[:, NOT_STARTED]
        new[:, PAUSED] = cost[:, PAUSED:].min(axis=1)
        running = cost[:, 2:]
        stay = _shifted(running, full, self.total)
        start = _shifted(np.broadcast_to(cost[:, NOT_STARTED : NOT_STARTED + 1], running.shape),
                         cut, self.total)  # fmt: skip
        best = np.minimum(stay, start)
        if self.layers > 1:
            # From any other state; a "change" to the same configuration is a stay that did
            # less and counted a change: never better, so it needs no excluding.
            others = np.broadcast_to(cost[:-1, PAUSED:].min(axis=1, keepdims=True),
                                     (self.layers - 1, *running.shape[1:]))  # fmt: skip
            change = _shifted(others, cut, self.total)
            best[1:] = np.minimum(best[1:], change)
        new[:, 2:] = best + price[None, :, None]
        new[:, :2, self.total] = math.inf  # only a slot that runs finishes the work
        return new

    def _tail(
        self, job: JobView, market: Market, options: list[list[Option | None]]
    ) -> tuple[float, int, int, int, int] | None:
        """The best schedule still running at the horizon's end, going on with its last
        slot's GPUs at the prices of the slots after it, where they are free: (payoff,
        layer, state, w, extra slots)."""
        cost = self.history[-1][:, :, : self.total]
        best = None
        values: dict[int, float] = {}
        for i, option in enumerate(options[-1]):
            per_slot = 0.0 if option is None else option.rate * market.slot_s
            if option is None or per_slot <= 0:
                continue
            rows = cost[:, 2 + i]  # (layers, total)
            if not np.isfinite(rows).any():
                continue
            left = np.maximum(job.steps - np.arange(self.total) * self.unit, 0.0)
            extra = np.ceil(left / per_slot - 1e-9).astype(np.int64)
            costs = market.tail_costs(option.take, extra)
            for e in np.unique(extra):
                if int(e) not in values:
                    end = float(market.slot_ends[-1]) + int(e) * market.slot_s
                    values[int(e)] = job.utility.value(end, job.arrival_s)
            worth = np.array([values[int(e)] for e in extra]) - costs
            payoff = worth[None, :] - rows
            # Ties (to rounding): the most work done in the horizon, the earliest completion.
            top = float(np.max(payoff))
            near = np.argwhere(payoff >= top - 1e-9 * max(1.0, abs(top)))
            layer, at = max(near.tolist(), key=lambda e: (e[1], -e[0]))
            if np.isfinite(payoff[layer, at]) and (best is None or payoff[layer, at] > best[0]):
                best = (float(payoff[layer, at]), int(layer), 2 + i, int(at), int(extra[at]))
        return best

    def _trace(self, end: int, layer: int, state: int, w: int) -> list[int]:
        """The state of every slot 0..end on a cheapest path to (end, layer, state, w)."""
        states = [0] * (end + 1)
        for t in range(end, -1, -1):
            states[t] = state
            layer, state, w = self._source(t, layer, state, w)
        return states

    def _source(self, t: int, layer: int, state: int, w: int) -> tuple[int, int, int]:
        """Where the value of (layer, state, w) after slot t came from, before it."""
        before = self.history[t]
        target = self.history[t + 1][layer, state, w]
        if state == NOT_STARTED:
            return layer, NOT_STARTED, w
        if state == PAUSED:
            s = PAUSED + int(np.argmin(before[layer, PAUSED:, w]))
            return layer, s, w
        i = state - 2
        price = self.tables.cost[t, i]
        candidates = [(layer, state, int(self.tables.full[t, i]))]
        candidates.append((layer, NOT_STARTED, int(self.tables.cut[t, i])))
        if layer > 0:
            candidates += [
                (layer - 1, s, int(self.tables.cut[t, i])) for s in range(PAUSED, self.n_states)
            ]
        for source_layer, source, gain in candidates:
            for w0 in _sources_of(w, gain, self.total):
                if before[source_layer, source, w0] + price == target:
                    return source_layer, source, w0
        raise AssertionError("no source found")  # the forward pass made every value


def value_at_end(job: JobView, market: Market, t: int) -> float:
    """The job's utility at the end of slot t."""
    return job.utility.value(float(market.slot_ends[t]), job.arrival_s)


def _sources_of(w: int, gain: int, total: int) -> range:
    """The w before a slot of `gain` units that lead to w after it (done absorbs)."""
    if w < total:
        return range(w - gain, w - gain + 1) if w >= gain else range(0)
    return range(max(total - gain, 0), total) if gain > 0 else range(0)


def _shifted(values: np.ndarray, gains: np.ndarray, total: int) -> np.ndarray:
    """values[:, i, w] moved up by gains[i] work units along w, clipped at `total` (done: the
    least of the values that reach it; a slot of no work finishes nothing)."""
    out = np.full(values.shape, math.inf)
    for i, gain in enumerate(int(g) for g in gains):
        if gain == 0:
            out[:, i, :total] = values[:, i, :total]
            continue
        if gain < total:
            out[:, i, gain:total] = values[:, i, : total - gain]
        out[:, i, total] = values[:, i, max(total - gain, 0) : total].min(axis=1)
    return out
