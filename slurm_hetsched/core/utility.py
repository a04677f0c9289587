"""A job's utility: what finishing at a given time is worth to its user, for the policies that
weigh jobs by it (Hadar here; OASiS and Astraea after it). docs/interfaces.md, "Job spec",
lists the spec keys (`utility=`, `umax=`, `target=`, `sharp=`); docs/policies.md explains the
shapes.

Every utility is non-negative and non-increasing in the completion time (what the pricing
policies' guarantees assume), and at most `max_utility`:

- `sigmoid` (OASiS): umax / (1 + exp(sharp * (elapsed - target))), with elapsed and target in
  hours from arrival and sharp per hour; sharp 0 is time-insensitive (umax / 2 throughout), a
  large sharp a hard deadline at target;
- `linear` (Astraea): umax * max(0, 1 - elapsed / target): all of it at arrival, none at target;
- `deadline`: umax if the job finishes by its deadline (target from arrival, else its due
  date), else 0;
- `tardiness` (the default when a spec names none): umax - tw * max(0, completion - due),
  floored at 0, so ANDREAS's due date and tardiness weight read as a utility; without a due
  date it is umax whenever the job finishes (`flat`).

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The utility of a job whose spec gives no `umax=`: what it is worth when finished in time.
DEFAULT_MAX_UTILITY = 100.0
UTILITY_KINDS = ("sigmoid", "linear", "deadline")
_HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class Utility:
    """What finishing is worth to a job (see the module's shapes).

    Attributes:
        kind: "sigmoid", "linear", "deadline", "tardiness" or "flat".
        max_utility: the most it is worth (> 0).
        target_s: sigmoid: the target completion, linear: when it is worth nothing, deadline:
            the deadline; seconds from the job's arrival (None: deadline at `due_s`).
        sharpness_per_h: the sigmoid's steepness per hour (>= 0).
        due_s: the due date on the snapshot's clock (deadline without target, tardiness).
        tardiness_weight: utility lost per second late (tardiness).
    """

    kind: str
    max_utility: float = DEFAULT_MAX_UTILITY
    target_s: float | None = None
    sharpness_per_h: float = 1.0
    due_s: float | None = None
    tardiness_weight: float = 0.0

    def value(self, completion_s: float, arrival_s: float) -> float:
        """The utility of finishing at `completion_s` for a job that arrived at `arrival_s`
        (both on the same clock); completion before arrival counts as at arrival."""
        elapsed = max(0.0, completion_s - arrival_s)
        top = self.max_utility
        if self.kind == "sigmoid":
            assert self.target_s is not None
            exponent = self.sharpness_per_h * (elapsed - self.target_s) / _HOUR_S
            return 0.0 if exponent > 700 else top / (1.0 + math.exp(exponent))
        if self.kind == "linear":
            assert self.target_s is not None
            return top * max(0.0, 1.0 - elapsed / self.target_s)
        if self.kind == "deadline":
            deadline = self.due_s if self.target_s is None else arrival_s + self.target_s
            return top if deadline is not None and completion_s <= deadline else 0.0
        if self.kind == "tardiness" and self.due_s is not None:
            late_s = max(0.0, completion_s - self.due_s)
            return max(0.0, top - self.tardiness_weight * late_s)
        return top  # flat: finishing is what counts


def default_utility(
    due_s: float | None, tardiness_weight: float, max_utility: float = DEFAULT_MAX_UTILITY
) -> Utility:
    """The utility of a spec that names none: its due date and tardiness weight as a utility
    (`tardiness`), or `flat` without a due date."""
    if due_s is None:
        return Utility("flat", max_utility)
    return Utility("tardiness", max_utility, due_s=due_s, tardiness_weight=tardiness_weight)
