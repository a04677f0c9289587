"""Builders and fakes shared by the wrapper's unit tests (no Slurm, no real clock)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurm_hetsched.wrapper.env import JobEnvironment


def make_env(state_dir: Path, **overrides: Any) -> JobEnvironment:
    """A job environment as Slurm would give it to job 42 on node n3, first run."""
    env = JobEnvironment(
        job_id="42",
        job_key="42",
        restart_count=0,
        rank=0,
        local_rank=0,
        world_size=1,
        node="n3",
        num_gpus=1,
        state_dir=state_dir,
        checkpoint_every_s=None,
    )
    return dataclasses.replace(env, **overrides)


def no_gpus(node: str) -> dict[str, int] | None:
    return None


class FakeClock:
    """Monotonic and wall clocks that only move when told to (or when `sleep` is called).

    `on_sleep` runs at every sleep, e.g. to deliver a signal after the n-th poll of a pause.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps = 0
        self.on_sleep: Callable[[int], None] | None = None

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1.7e9 + self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(self.sleeps)

    def advance(self, seconds: float) -> None:
        self.now += seconds
