"""The Gavel-faithful mode's choices, each of which can be turned back to ours to measure
what it does (`hetsched simulate --gavel-faithful --faithful-except NAME,...`;
docs/simulation.md, "Gavel-faithful mode", measures each).

Each name is one place where Gavel's simulator behaves differently from our simulation; the
faithful mode takes Gavel's side of all of them unless told otherwise.

Pure: values and their parsing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from slurm_hetsched.errors import ConfigError

# name -> what turning it back to ours means (for --help and errors).
CHOICES = {
    "recompute": "compute a new allocation as soon as jobs change, not only with a reset",
    "idle": "plan a round every round length while jobs wait on an idle cluster, not only at "
    "the next arrival",
    "steps": "rounds of exactly the round length with fractional steps, not whole steps with "
    "a round that ends when its slowest job has run them",
    "drops": "never fail a multi-GPU job's round (Gavel fails it with fewer steps than GPUs "
    "left and drops the job after 5 failures)",
    "shares": "a type's share counts only the jobs still there and the seconds each held its "
    "GPUs (Gavel: also jobs that left, and an idle gap before a round)",
    "walk": "a job not yet in the allocation takes no GPUs in the walk",
    "solver": "solve the linear programs with HiGHS (a vertex) instead of an interior point",
    "forms": "our own policies (core/policies) instead of Gavel's formulations",
    "shuffle": "our random type order for the agnostic policies, not Gavel's generator",
}


@dataclass(frozen=True, slots=True)
class FaithfulChoices:
    """True: Gavel's behaviour (the faithful mode's default); False: ours. See CHOICES."""

    recompute: bool = True
    idle: bool = True
    steps: bool = True
    drops: bool = True
    shares: bool = True
    walk: bool = True
    solver: bool = True
    forms: bool = True
    shuffle: bool = True

    @classmethod
    def except_for(cls, names: str) -> FaithfulChoices:
        """Gavel's behaviour but for the comma-separated `names`, which are ours.

        Raises:
            ConfigError: an unknown name (the known ones listed).
        """
        chosen = [n.strip() for n in names.split(",") if n.strip()]
        unknown = [n for n in chosen if n not in CHOICES]
        if unknown:
            raise ConfigError(
                f"--faithful-except {unknown[0]!r}: expected names of {', '.join(CHOICES)}"
            )
        return dataclasses.replace(cls(), **dict.fromkeys(chosen, False))

    @property
    def ours(self) -> tuple[str, ...]:
        """The choices turned back to ours, in CHOICES order."""
        return tuple(name for name in CHOICES if not getattr(self, name))


GAVEL = FaithfulChoices()
