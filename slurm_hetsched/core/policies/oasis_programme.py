"""The dynamic programme of OASiS's dual subroutine (notes/astraea-oasis.md section 11,
DP_COST), with the configuration of the last slot and the changes made so far in the state
(oasis_schedule.py says why). Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from slurm_hetsched.core.policies.hadar_alloc import JobView
from slurm_hetsched.core.policies.oasis_market import Market, Option
from slurm_hetsched.core.utility_values import utility_values

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
    rate: np.ndarray  # (slots, configs) steps/s, 0 where infeasible

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
        return Tables(cost, full, cut, rate)


@dataclass(frozen=True, slots=True)
class _End:
    """A way to finish in one slot: its payoff, the slot, the configuration run in it, the
    state before it (layer, state, work units) and the completion time."""

    payoff: float
    slot: int
    config: int
    source_layer: int
    source_state: int
    w0: int
    completion_s: float


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
        self, job: JobView, market: Market, options: list[list[Option | None]], tails: bool = True
    ) -> tuple[list[int], int, float] | None:
        """The states of every slot up to the best end slot, the slots past the horizon (0 if
        it ends inside) and the completion time, or None if it cannot end."""
        best: _End | None = None
        for t in range(market.slots):
            before = self.history[-1]
            new = self._step(t)
            self.history.append(new)
            done = float(new[:, :, self.total].min())
            # Worth at most its utility at the slot's start, for the least price of being done.
            begin = float(market.slot_ends[t] - market.usable_s[t])
            if math.isfinite(done) and (
                best is None
                or job.utility.value(begin, job.arrival_s) - done
                > best.payoff + _TIE * max(1.0, abs(best.payoff))
            ):
                found = self._finish(t, before, new, job, market)
                if found is not None and (
                    best is None or found.payoff > best.payoff + _TIE * max(1.0, abs(best.payoff))
                ):
                    best = found
            # Stop when no later end can do better: any later completion is worth at most the
            # utility at this slot's end (it never rises) and costs at least the cheapest
            # state still running (prices are never negative).
            live = float(np.min(new[:, :, : self.total]))
            if best is not None and value_at_end(job, market, t) - live <= best.payoff:
                return self._path(best), 0, best.completion_s
            if not math.isfinite(live):
                break
        tail = self._tail(job, market, options) if tails else None
        if tail is not None and (
            best is None or tail[0] > best.payoff + _TIE * max(1.0, abs(best.payoff))
        ):
            _payoff, tail_layer, tail_state, w, extra, completion = tail
            return self._trace(market.slots - 1, tail_layer, tail_state, w), extra, completion
        if best is None:
            return None
        return self._path(best), 0, best.completion_s

    def _finish(
        self, t: int, before: np.ndarray, after: np.ndarray, job: JobView, market: Market
    ) -> _End | None:
        """The best way to finish in slot t, at the moment the work is done within it (a
        completion counts then, as on the cluster, not at the slot's end: a faster
        configuration's last slot is worth more): over every configuration and every state
        before the slot it can finish from, utility then minus the price so far. At once
        over configurations (c), sources and the work done before the slot (w)."""
        usable = float(market.usable_s[t])
        begin = float(market.slot_ends[t]) - usable
        total, layers = self.total, before.shape[0]
        configs = np.flatnonzero(np.isfinite(after[:, 2:, total]).any(axis=0))
        if configs.size == 0:
            return None
        full, cut = self.tables.full[t, configs], self.tables.cut[t, configs]
        price, rate = self.tables.cost[t, configs], self.tables.rate[t, configs]
        low = max(total - int(max(full.max(), cut.max())), 0)
        w = np.arange(low, total)
        left = np.maximum(job.steps - w * self.unit, 0.0)
        restart = min(job.restart_s, usable)
        # (2, c, w): staying (no restart), starting or changing (after a restart).
        run = left[None, None, :] / rate[None, :, None] + np.array([0.0, restart])[:, None, None]
        when = begin + np.minimum(run, usable)
        worth = utility_values(job.utility, when, job.arrival_s) - price[None, :, None]
        gains = np.stack([full, cut])[:, :, None]
        worth = np.where(w[None, None, :] >= total - gains, worth, -math.inf)
        window = before[:, :, low:total]  # (layers, states, w)
        stay = worth[0][None] - window[:, 2 + configs]  # (layers, c, w)
        start = worth[1][None] - window[:, NOT_STARTED][:, None]
        change = np.full(start.shape, -math.inf)
        which = np.zeros((layers, w.size), dtype=np.int64)
        if layers > 1:
            others = window[:-1, PAUSED:]
            which[1:] = PAUSED + others.argmin(axis=1)
            change[1:] = worth[1][None] - others.min(axis=1)[:, None]
        payoff = np.stack([stay, start, change])  # (kind, layers, c, w)
        kind, layer, c, at = (
            int(k) for k in np.unravel_index(int(np.argmax(payoff)), payoff.shape)
        )
        value = float(payoff[kind, layer, c, at])
        if not math.isfinite(value):
            return None
        config = int(configs[c])
        source = (
            (layer, 2 + config) if kind == 0
            else (layer, NOT_STARTED) if kind == 1
            else (layer - 1, int(which[layer, at]))
        )  # fmt: skip
        return _End(value, t, config, *source, low + at, float(when[min(kind, 1), c, at]))

    def _path(self, end: _End) -> list[int]:
        """The states of every slot up to `end`'s slot."""
        return [*self._trace(end.slot - 1, end.source_layer, end.source_state, end.w0),
                2 + end.config]  # fmt: skip

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
    ) -> tuple[float, int, int, int, int, float] | None:
        """The best schedule still running at the horizon's end, going on with its last
        slot's GPUs at the prices of the slots after it, where they are free: (payoff,
        layer, state, w, extra slots, completion). It pays for whole slots and completes
        when its work is done."""
        cost = self.history[-1][:, :, : self.total]
        best = None
        for i, option in enumerate(options[-1]):
            per_slot = 0.0 if option is None else option.rate * market.slot_s
            if option is None or per_slot <= 0:
                continue
            rows = cost[:, 2 + i]  # (layers, total)
            if not np.isfinite(rows).any():
                continue
            left = np.maximum(job.steps - np.arange(self.total) * self.unit, 0.0)
            extra = np.ceil(left / per_slot - 1e-9).astype(np.int64)
            costs = market.tail_costs(option.take, extra, option.offered)
            ends = float(market.slot_ends[-1]) + left / option.rate
            worth = utility_values(job.utility, ends, job.arrival_s) - costs
            payoff = worth[None, :] - rows
            # Ties (to rounding): the most work done in the horizon, the earliest completion.
            top = float(np.max(payoff))
            near = np.argwhere(payoff >= top - 1e-9 * max(1.0, abs(top)))
            layer, at = max(near.tolist(), key=lambda e: (e[1], -e[0]))
            if np.isfinite(payoff[layer, at]) and (best is None or payoff[layer, at] > best[0]):
                best = (float(payoff[layer, at]), int(layer), 2 + i, int(at), int(extra[at]),
                        float(ends[at]))  # fmt: skip
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
