"""What one move costs a job: its restart-cost estimate, and where the estimate comes from.

A move (checkpoint signal, requeue, restart elsewhere) costs a job seconds without progress;
the round mechanism moves a running job only when the move pays for that (docs/mechanism.md).
The estimate of a job, in order of precedence (docs/admin.md, "Restart cost"):

1. measured: the median of its last restarts the controller timed (controller/restart_watch.py);
2. class: `[moves.restart_s_by_class]` of the config, for the job's class;
3. default: `[moves] restart_s`, which the mechanism applies to a job whose `Job.restart_s`
   is None, so a default estimate is left None in the snapshot.

(A fourth source, from a job's checkpoint size and write speed, waits for the wrapper to
report its checkpoint write time; the manifest has the size only.)

Measured seconds come from reports users write, so each sample and the estimate are held to
[0, `max_s`]: a job can neither make itself unmovable nor free to move. Pure: no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_hetsched.core.mechanism import DEFAULT_RESTART_S

# The largest restart cost a measurement can give a job (15 minutes: a slow restore of a
# large model from a busy shared filesystem; beyond it, a "restart" is queue time).
DEFAULT_MAX_RESTART_S = 900.0
# The estimate is the median of this many last samples: one slow restart (a cold filesystem,
# a wait in Slurm's queue after the release) does not make a job sticky.
KEPT_SAMPLES = 5


@dataclass(frozen=True, slots=True)
class RestartSettings:
    """The config's `[moves]` restart-cost keys.

    Attributes:
        default_s: `restart_s`, the cost of a job with neither measurement nor class value.
        by_class: `restart_s_by_class`, job class -> seconds.
        max_s: `max_restart_s`, the cap of every measured sample and estimate.
    """

    default_s: float = DEFAULT_RESTART_S
    by_class: Mapping[str, float] = field(default_factory=dict)
    max_s: float = DEFAULT_MAX_RESTART_S


@dataclass(frozen=True, slots=True)
class Samples:
    """A job's measured restarts.

    Attributes:
        recent: the last KEPT_SAMPLES restarts, seconds, oldest first.
        measured: how many restarts were measured in all.
    """

    recent: tuple[float, ...] = ()
    measured: int = 0

    def add(self, seconds: float) -> Samples:
        return Samples((*self.recent, seconds)[-KEPT_SAMPLES:], self.measured + 1)


@dataclass(frozen=True, slots=True)
class RestartEstimate:
    """A job's restart cost and its source.

    Attributes:
        seconds: the estimate; None for the default (the mechanism's `restart_s`).
        source: "measured", "class" or "default".
        measured: restarts measured in all (only for "measured").
    """

    seconds: float | None
    source: str
    measured: int = 0


def clamp_sample(seconds: float, max_s: float) -> float:
    """A measured restart held to [0, max_s] (NaN counts as the cap: it proves nothing)."""
    if math.isnan(seconds):
        return max_s
    return min(max(seconds, 0.0), max_s)


def estimate(job_class: str, samples: Samples | None, settings: RestartSettings) -> RestartEstimate:
    """The restart cost of a job of `job_class` with `samples` measured (precedence above)."""
    if samples is not None and samples.recent:
        median = statistics.median(clamp_sample(s, settings.max_s) for s in samples.recent)
        return RestartEstimate(float(median), "measured", samples.measured)
    if job_class in settings.by_class:
        return RestartEstimate(float(settings.by_class[job_class]), "class")
    return RestartEstimate(None, "default")


def describe_seconds(seconds: float) -> str:
    """'8.1s', '240s'."""
    return f"{seconds:.1f}s" if seconds < 100 else f"{seconds:.0f}s"


def describe_estimate(estimate: RestartEstimate, default_s: float) -> str:
    """'8.1s measured 3x', '60.0s class default', '30.0s default'."""
    seconds = default_s if estimate.seconds is None else estimate.seconds
    source = {
        "measured": f"measured {estimate.measured}x",
        "class": "class default",
    }.get(estimate.source, "default")
    return f"{describe_seconds(seconds)} {source}"


def job_key_of(identity: str) -> str:
    """The job key of a job identity (`key` or `key#copy`)."""
    return identity.partition("#")[0]
