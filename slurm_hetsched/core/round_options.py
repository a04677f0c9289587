"""How a site configures the round mechanism: `RoundOptions` and the defaults of its settings.

The choices Gavel's code makes one way and a site may make another (docs/mechanism.md): one
queue per GPU type or one global queue, the per-type walk order, work conservation, plain or
amortized moves and the restart costs those weigh; and the minimum time between resets of the
received time. `core/mechanism.py` re-exports every name here.

Pure: values and their checks only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slurm_hetsched.core.model import InvalidProblemError

# Gavel's `minimum_time_between_allocation_resets` (scheduler.py): a new allocation resets the
# received time at most this often, so the shares keep a long enough history to steer by.
GAVEL_MIN_RESET_INTERVAL_S = 1920.0

QUEUES = ("per_type", "global")
# "amortized": a running job is moved or stopped only when the move pays for its restart
# (docs/mechanism.md, "Moves that pay for themselves"); "plain": Gavel's mechanism as it is.
MOVES = ("amortized", "plain")
# The restart cost of a job that reports none (`Job.restart_s` is None): the dev cluster's
# signal-to-training-again is ~8 s, published checkpoint-restores of real models 25-250 s.
DEFAULT_RESTART_S = 30.0
# The largest share of a job's time on GPUs that restarts may take under "amortized".
DEFAULT_RESTART_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class RoundOptions:
    """How `plan_round` walks the (job, GPU type) entries (docs/mechanism.md).

    Attributes:
        queue: "per_type" (Gavel's code): the types one after the other, each type's entries
            in priority order, so a type's GPUs go to the jobs with the highest priority on
            that type; "global": one queue over every type by priority (the paper's wording).
        type_order: per-type walk order, first type first. Types not listed follow, fastest
            first by the throughput table when `plan_round` gets one, else by name. () (the
            default) lets the table decide: Gavel's v100, p100, k80 for its table.
        shuffle: walk the types in a random order each round instead (Gavel does this for its
            heterogeneity-agnostic policies, which must not prefer a type); drawn from `seed`
            and the round number, so plans stay reproducible.
        seed: seed of the shuffled order.
        work_conserving: after a type's entries with an allocation, hand its GPUs still free to
            jobs that can run there (by the throughput table) but were allocated 0 on it,
            highest deficit first, as Gavel's code does for every policy but FIFO. Needs the
            table (`plan_round(table=...)`): without it the mechanism cannot tell "allocated 0"
            from "cannot run" and fills nothing.
        moves: "amortized" (the default): a job that runs is moved or stopped only once its
            restart cost is paid for (docs/mechanism.md); "plain": every round as Gavel does.
        restart_s: the restart cost of a job whose `Job.restart_s` is None, in seconds.
        restart_share: under "amortized", the largest share of a job's time on GPUs that its
            restarts may take (0 < share <= 1).
    """

    queue: str = "per_type"
    type_order: tuple[str, ...] = ()
    shuffle: bool = False
    seed: int = 0
    work_conserving: bool = True
    moves: str = "amortized"
    restart_s: float = DEFAULT_RESTART_S
    restart_share: float = DEFAULT_RESTART_SHARE

    def __post_init__(self) -> None:
        if self.queue not in QUEUES:
            raise InvalidProblemError(
                f"round options: queue {self.queue!r}; expected one of {list(QUEUES)}"
            )
        if self.moves not in MOVES:
            raise InvalidProblemError(
                f"round options: moves {self.moves!r}; expected one of {list(MOVES)}"
            )
        if not (math.isfinite(self.restart_s) and self.restart_s >= 0):
            raise InvalidProblemError(
                f"round options: restart_s {self.restart_s}; expected seconds >= 0"
            )
        if not 0 < self.restart_share <= 1:
            raise InvalidProblemError(
                f"round options: restart_share {self.restart_share}; expected 0 < share <= 1"
            )
        object.__setattr__(self, "type_order", tuple(self.type_order))
        if len(set(self.type_order)) != len(self.type_order):
            raise InvalidProblemError(
                f"round options: type_order {list(self.type_order)} names a type twice"
            )
