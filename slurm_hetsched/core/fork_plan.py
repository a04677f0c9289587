"""HadarE's job tracker, the decisions (Sultana et al., section V; docs/policies.md "Forked
jobs"): how many copies a job gets, what each copy did in a round, and each running copy's
work for the next round. Pure: the controller (controller/fork_tracker.py) reads Slurm and the
state folders, runs the averaging and keeps the state in its store.

A forked job's copies train at the same time from the same consolidated checkpoint; each round
every copy placed gets a step budget in proportion to its node's throughput for the job (so
they finish together, `core/fork_budget.py`), and the copies' data ranges are laid end to end
after the consolidated checkpoint's position (`data_offset`), so together they read the data an
unforked run would have read. At the round's end the steps the copies made are added up and
their parameters averaged (weighted by those steps) into the next consolidated checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from slurm_hetsched.core.fork_budget import step_budgets


@dataclass(frozen=True, slots=True)
class CopyRound:
    """One copy's work in one round.

    Attributes:
        job_id: the Slurm job the copy ran as when the work was given.
        start_step: the job's step the copy starts at (the consolidated checkpoint's).
        data_offset: batches past the consolidated checkpoint's data position where the copy's
            data range starts (the budgets of the copies before it).
        budget: steps it is to train this round.
    """

    job_id: str
    start_step: int
    data_offset: int
    budget: int


@dataclass(frozen=True, slots=True)
class ForkState:
    """What the tracker knows of one forked job (kept in the store between rounds).

    Attributes:
        key: the job key.
        uid / gid: the job's user and group (the averaging runs with their rights).
        copies: how many copies the job has (indexes 0 to copies - 1).
        total_steps: the job's steps.
        merged_step: steps done, as of the last consolidated checkpoint.
        merged: that checkpoint, relative to the key folder (None before the first merge).
        round: the tracker's round of the job (0: no work given yet).
        work: copy index -> its work in `round`.
        resubmitted: copy index -> how often a lost copy was submitted again.
        done: the steps are done; the copies are being wound up.
    """

    key: str
    uid: int
    gid: int | None
    copies: int
    total_steps: int
    merged_step: int = 0
    merged: str | None = None
    round: int = 0
    work: Mapping[int, CopyRound] = field(default_factory=dict)
    resubmitted: Mapping[int, int] = field(default_factory=dict)
    done: bool = False

    @property
    def remaining(self) -> int:
        return max(0, self.total_steps - self.merged_step)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "uid": self.uid,
            "gid": self.gid,
            "copies": self.copies,
            "total_steps": self.total_steps,
            "merged_step": self.merged_step,
            "merged": self.merged,
            "round": self.round,
            "work": {
                str(c): [w.job_id, w.start_step, w.data_offset, w.budget]
                for c, w in self.work.items()
            },
            "resubmitted": {str(c): n for c, n in self.resubmitted.items()},
            "done": self.done,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ForkState:
        """Raises KeyError, TypeError or ValueError on a row this version did not write."""
        work = {
            int(c): CopyRound(str(w[0]), int(w[1]), int(w[2]), int(w[3]))
            for c, w in dict(data["work"]).items()
        }
        return cls(
            key=str(data["key"]),
            uid=int(data["uid"]),
            gid=None if data["gid"] is None else int(data["gid"]),
            copies=int(data["copies"]),
            total_steps=int(data["total_steps"]),
            merged_step=int(data["merged_step"]),
            merged=None if data["merged"] is None else str(data["merged"]),
            round=int(data["round"]),
            work=work,
            resubmitted={int(c): int(n) for c, n in dict(data["resubmitted"]).items()},
            done=bool(data["done"]),
        )


def copies_wanted(asked: int | None, default: int, cap: int, nodes_that_fit: int) -> int:
    """How many copies a job gets: its `fork=` (else the site's default), at most the site's
    cap and never more than the nodes that can run it (a second copy on one node gains
    nothing: Theorem 3's case IV)."""
    wanted = default if asked is None else asked
    return max(1, min(wanted, cap, nodes_that_fit))


def steps_done(work: CopyRound, acked_step: int | None) -> int:
    """Steps a copy made this round by its ack: none without one (a copy that failed or was
    killed loses only its own round), never more than its budget."""
    if acked_step is None:
        return 0
    return max(0, min(work.budget, acked_step - work.start_step))


def fastest_enough(remaining: int, rates: Mapping[int, float], round_s: float) -> dict[int, float]:
    """The copies that run the next round: all of them while the work left fills a round, else
    only the fastest ones whose round together covers it (the paper's last round: the beta
    fastest nodes finish the job; a slow copy would only delay the end)."""
    ranked = sorted((c for c in rates if rates[c] > 0), key=lambda c: (-rates[c], c))
    chosen: dict[int, float] = {}
    covered = 0.0
    for copy in ranked:
        if covered >= remaining:
            break
        chosen[copy] = rates[copy]
        covered += rates[copy] * round_s
    return chosen


def plan_round(
    state: ForkState, rates: Mapping[int, float], job_ids: Mapping[int, str], round_s: float
) -> ForkState:
    """The next round's work: the steps a round of the chosen copies can do (at most those
    left), split in proportion to their rates; data ranges laid end to end in copy order.

    Args:
        state: the job after its last merge.
        rates: copy placed this round -> its steps/s on its node (0: cannot run there).
        job_ids: copy -> its Slurm job id.
        round_s: the round's length.
    """
    chosen = fastest_enough(state.remaining, rates, round_s)
    capacity = math.floor(sum(chosen.values()) * round_s)
    total = min(state.remaining, max(capacity, len(chosen)))
    budgets = step_budgets(total, {str(c): r for c, r in sorted(chosen.items())}) if chosen else {}
    work: dict[int, CopyRound] = {}
    offset = 0
    for copy in sorted(chosen):
        budget = budgets[str(copy)]
        if budget <= 0:
            continue
        work[copy] = CopyRound(job_ids[copy], state.merged_step, offset, budget)
        offset += budget
    return replace(state, round=state.round + 1, work=work)


def fork_section(state: ForkState, copy: int) -> dict[str, Any] | None:
    """The `fork` object of a copy's placement.json (docs/interfaces.md), or None when the
    copy has no work this round. A finished job's copy 0 gets budget 0 at the total: it loads
    the final consolidated checkpoint and ends."""
    work = state.work.get(copy)
    if work is None:
        return None
    return {
        "round": state.round,
        "copy": copy,
        "from": state.merged,
        "start_step": work.start_step,
        "data_offset": work.data_offset,
        "budget": work.budget,
        "total_steps": state.total_steps,
    }


def finish(state: ForkState, copy: int, job_id: str) -> ForkState:
    """The job is done: `copy` loads the final checkpoint and ends; the others are cancelled."""
    work = {copy: CopyRound(job_id, state.merged_step, 0, 0)}
    return replace(state, round=state.round + 1, work=work, done=True)
