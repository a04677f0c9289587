"""The two clocks behind the `Clock` port (core/ports.py): the system's, for the live
controller, and a simulated one that jumps, for the simulator. The drivers and what they build
read the time of day only through these."""

from __future__ import annotations

import time
from collections.abc import Callable

from slurm_hetsched.core.ports import Clock


def sleeper(clock: Clock) -> Callable[[float], None]:
    """`sleep(seconds)` on `clock` (the enactor's polls between its looks at Slurm)."""

    def sleep(seconds: float) -> None:
        clock.sleep_until(clock.now() + seconds)

    return sleep


class SystemClock:
    """Unix seconds of this host; `sleep_until` really waits."""

    def now(self) -> float:
        return time.time()

    def sleep_until(self, t_s: float) -> None:
        # Waits on the monotonic clock: a wall clock stepped meanwhile neither stretches
        # nor cuts the wait.
        deadline = time.monotonic() + (t_s - time.time())
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(left)


SYSTEM_CLOCK = SystemClock()
SYSTEM_SLEEP = sleeper(SYSTEM_CLOCK)


class SimClock:
    """A `Clock` that jumps: `sleep_until` sets the time, never goes back."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = start_s

    def now(self) -> float:
        return self._now

    def sleep_until(self, t_s: float) -> None:
        self._now = max(self._now, t_s)
