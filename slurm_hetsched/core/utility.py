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
# The bounds of a utility's fields, in every input that gives one (the job spec, traces,
# what-if problems); core/jobspec.py re-exports them beside its other bounds.
UMAX_MAX = 1e6  # the most a job's utility may be worth (`umax=`)
TARGET_MAX_S = 10 * 365.25 * 86400.0  # a utility's target: at most ten years from arrival
SHARP_MAX = 3600.0  # a sigmoid's steepness per hour: a step within a second
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


class UtilityFieldError(ValueError):
    """Fields that make no utility (`utility_from_fields`); the message names the field at
    fault as the caller spells it and says what was expected. `field` is "kind", "umax",
    "target" or "sharp"."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def utility_from_fields(
    kind: object,
    umax: float | None,
    target_s: float | None,
    sharp: float | None,
    due_s: float | None,
    tardiness_weight: float,
    *,
    kind_key: str = "utility",
) -> Utility:
    """The utility given by flat optional fields (a trace's record, a what-if job), by the
    job spec's rules (core/jobspec.py `_utility`): `kind` (sigmoid, linear or deadline) with
    its `target_s` (seconds from arrival; a deadline may have the due date instead) and, for a
    sigmoid, `sharp` (per hour, default 1); without a kind, the due date and tardiness weight
    read as a utility (`default_utility`), and only `umax` may be given. `umax` defaults to
    DEFAULT_MAX_UTILITY. None means not given; numbers are parsed by the caller.

    Raises:
        UtilityFieldError: a value out of its bounds (UMAX_MAX, TARGET_MAX_S, SHARP_MAX) or
            fields that do not go together; the kind's field is named `kind_key`.
    """
    top = DEFAULT_MAX_UTILITY if umax is None else umax
    if not 0 < top <= UMAX_MAX:  # NaN and inf fail here too
        raise UtilityFieldError(
            "umax", f"umax is {umax!r}; expected a number above 0 up to {UMAX_MAX:g}"
        )
    if kind is None:
        for key, value in (("target_s", target_s), ("sharp", sharp)):
            if value is not None:
                raise UtilityFieldError(
                    key.removesuffix("_s"),
                    f"{key} is {value!r} without {kind_key}; expected it only with {kind_key} "
                    "sigmoid, linear or deadline",
                )
        return default_utility(due_s, tardiness_weight, top)
    if not isinstance(kind, str) or kind not in UTILITY_KINDS:
        raise UtilityFieldError(
            "kind",
            f"{kind_key} is {kind!r}; expected one of {', '.join(UTILITY_KINDS)} (or none: the "
            "due date and tardiness weight read as a utility)",
        )
    if target_s is not None and not 0 < target_s <= TARGET_MAX_S:
        raise UtilityFieldError(
            "target",
            f"target_s is {target_s!r}; expected seconds from arrival above 0 up to "
            f"{TARGET_MAX_S:.0f} (10 years)",
        )
    if target_s is None and not (kind == "deadline" and due_s is not None):
        needs = "target_s" if kind != "deadline" else "target_s or a due date"
        raise UtilityFieldError(
            "target",
            f"{kind_key} is {kind!r} without target_s; expected {needs} (seconds from arrival)",
        )
    if sharp is not None and kind != "sigmoid":
        raise UtilityFieldError(
            "sharp",
            f"sharp is {sharp!r} with {kind_key} {kind}; expected it only with sigmoid (the "
            "steepness per hour)",
        )
    if sharp is not None and not 0 <= sharp <= SHARP_MAX:
        raise UtilityFieldError(
            "sharp", f"sharp is {sharp!r}; expected a number from 0 to {SHARP_MAX:g} per hour"
        )
    return Utility(kind, top, target_s, 1.0 if sharp is None else sharp, due_s=due_s)


def utility_fields(utility: Utility) -> tuple[str | None, float, float | None, float | None]:
    """(kind, umax, target_s, sharp) that give `utility` back through `utility_from_fields`
    with the job's due date and tardiness weight: kind None for the default shapes
    (tardiness, flat), sharp only for a sigmoid."""
    if utility.kind not in UTILITY_KINDS:
        return None, utility.max_utility, None, None
    sharp = utility.sharpness_per_h if utility.kind == "sigmoid" else None
    return utility.kind, utility.max_utility, utility.target_s, sharp
