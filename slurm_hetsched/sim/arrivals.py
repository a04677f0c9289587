"""Arrival times of generated traces: a Poisson process (Gavel's generator) or bursts.

Bursty arrivals follow the shape of the bursty workload Sia (SOSP'23) evaluates on ("newTrace"):
bursts of up to 100 jobs submitted within an hour, separated by quiet periods; the parameters
(`Bursts`) are ours and documented in docs/simulation.md, "Generated traces". Both functions
are pure: the caller passes the random generator, so a seed gives the same arrivals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from slurm_hetsched.errors import ConfigError

_DECIMALS = 3  # arrival times are rounded to milliseconds


@dataclass(frozen=True, slots=True)
class Bursts:
    """How bursty arrivals are drawn.

    Attributes:
        jobs_max: the most jobs in one burst; each burst's size is uniform in 1..jobs_max
            (the last burst takes what is left of the trace's jobs).
        window_s: the window a burst's jobs are submitted in: its first job at the burst's
            start, the others uniform over [start, start + window_s).
        quiet_s: mean quiet period from the end of one burst's window to the next burst's
            start (exponential, so quiet periods vary; 0 puts the bursts back to back).
    """

    jobs_max: int = 100
    window_s: float = 3600.0
    quiet_s: float = 4 * 3600.0

    def __post_init__(self) -> None:
        if isinstance(self.jobs_max, bool) or not isinstance(self.jobs_max, int):
            raise ConfigError(f"burst jobs max {self.jobs_max!r}: expected a whole number >= 1")
        if self.jobs_max < 1:
            raise ConfigError(f"burst jobs max {self.jobs_max}: expected a whole number >= 1")
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ConfigError(f"burst window {self.window_s!r} s: expected seconds > 0")
        if not (math.isfinite(self.quiet_s) and self.quiet_s >= 0):
            raise ConfigError(f"burst quiet period {self.quiet_s!r} s: expected seconds >= 0")


def poisson_arrivals(n_jobs: int, mean_gap_s: float, rng: np.random.Generator) -> np.ndarray:
    """(n_jobs,) seconds: the first job at 0, then exponential gaps of mean `mean_gap_s`
    (Gavel's `lam`); 0 puts every job at 0."""
    if mean_gap_s <= 0:
        return np.zeros(n_jobs)
    gaps = rng.exponential(mean_gap_s, n_jobs - 1)
    return np.round(np.concatenate(([0.0], np.cumsum(gaps))), _DECIMALS)


def bursty_arrivals(
    n_jobs: int, bursts: Bursts, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Arrival times in bursts, ascending, the first job at 0.

    Returns:
        (arrival_s, burst): each (n_jobs,); arrival_s in seconds, burst the 0-based burst
        each job belongs to.
    """
    arrivals: list[np.ndarray] = []
    burst_of: list[np.ndarray] = []
    start_s, left = 0.0, n_jobs
    while left > 0:
        size = min(left, int(rng.integers(1, bursts.jobs_max + 1)))
        offsets = np.sort(rng.uniform(0.0, bursts.window_s, size - 1))
        times = np.round(start_s + np.concatenate(([0.0], offsets)), _DECIMALS)
        # Rounding to milliseconds must not carry a job out of its window.
        arrivals.append(np.minimum(times, start_s + bursts.window_s))
        burst_of.append(np.full(size, len(arrivals) - 1))
        left -= size
        start_s = round(start_s + bursts.window_s + rng.exponential(bursts.quiet_s), _DECIMALS)
    return np.concatenate(arrivals), np.concatenate(burst_of)
