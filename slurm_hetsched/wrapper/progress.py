"""`progress.json` and `ack.json`: what the job tells the controller (docs/interfaces.md).

progress.json (rewritten atomically every few seconds by rank 0):
    job_key, job_id, step, total_steps, steps_per_s (over a sliding window; null until
    measured), gpu_type, num_gpus, node, updated_at (Unix seconds); also restart_count and
    status ("running", "paused", "done", "stopped"); and peak_mem_gib, the most GPU memory
    PyTorch allocated on this process's current device so far (GiB; null without CUDA).
ack.json (atomic, after the checkpoint the signal asked for is committed):
    job_id, restart_count, step, checkpoint (the folder name, e.g. "ckpt-120"), written_at;
    a forked copy (HadarE) adds fork_round, the round of placement.json's `fork` it acks.
The controller accepts an ack only if job_id and restart_count match and written_at is after
its signal.
checkpoint_request.json (written by the controller just before its checkpoint signal):
    job_id, restart_count, requested_at. A signal that arrives while the job is still starting
    (before the wrapper's handler is installed, the template ignores it) is not lost: the
    wrapper looks for a request of its own run once its handlers are in place.
resume_request.json (written by the controller when it calls a move off after the ack):
    job_id, restart_count, requested_at. A job paused after its ack trains on at once instead
    of waiting out its lease.

Usable from any Python program; no PyTorch needed (it is read only when the program loaded it).
"""

from __future__ import annotations

import logging
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hetsched.statefolder import ACK_FILE, PROGRESS_FILE, REQUEST_FILE, RESUME_FILE
from slurm_hetsched.wrapper.env import JobEnvironment
from slurm_hetsched.wrapper.files import read_json, write_json_atomic

# The file names are the state folder format's (statefolder.py), re-exported.
__all__ = [
    "ACK_FILE",
    "DEFAULT_WINDOW_S",
    "PROGRESS_FILE",
    "REQUEST_FILE",
    "RESUME_FILE",
    "Ack",
    "ProgressReporter",
    "checkpoint_requested",
    "peak_mem_gib",
    "read_ack",
    "read_progress",
    "resume_requested",
    "write_ack",
]

logger = logging.getLogger(__name__)

DEFAULT_WINDOW_S = 60.0
# A rate needs samples at least this far apart, so the first seconds do not report noise.
_MIN_SPAN_S = 1.0
# Whether reading the peak GPU memory failed already: said once, not every few seconds.
_peak_failed = [False]


@dataclass(frozen=True, slots=True)
class Ack:
    """The content of ack.json."""

    job_id: str | None
    restart_count: int
    step: int
    checkpoint: str
    written_at: float
    fork_round: int | None = None

    def to_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "job_id": self.job_id,
            "restart_count": self.restart_count,
            "step": self.step,
            "checkpoint": self.checkpoint,
            "written_at": self.written_at,
        }
        if self.fork_round is not None:
            payload["fork_round"] = self.fork_round
        return payload


def write_ack(state_dir: Path, ack: Ack) -> None:
    """Write ack.json atomically."""
    write_json_atomic(state_dir / ACK_FILE, ack.to_dict())


def read_ack(state_dir: Path) -> Ack | None:
    """ack.json, or None if missing or malformed."""
    payload = read_json(state_dir / ACK_FILE)
    if payload is None:
        return None
    try:
        return Ack(
            job_id=None if payload["job_id"] is None else str(payload["job_id"]),
            restart_count=int(payload["restart_count"]),
            step=int(payload["step"]),
            checkpoint=str(payload["checkpoint"]),
            written_at=float(payload["written_at"]),
            fork_round=None if payload.get("fork_round") is None else int(payload["fork_round"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def checkpoint_requested(state_dir: Path, job_id: str | None, restart_count: int) -> bool:
    """Whether checkpoint_request.json asks this very run (job id and restart) to checkpoint."""
    payload = read_json(state_dir / REQUEST_FILE)
    if payload is None or job_id is None:
        return False
    return str(payload.get("job_id")) == job_id and payload.get("restart_count") == restart_count


def resume_requested(state_dir: Path, job_id: str | None, restart_count: int, since: float) -> bool:
    """Whether resume_request.json calls off the move of this very run, asked at or after
    `since` (Unix seconds; the ack the pause follows), so an old request is not obeyed."""
    payload = read_json(state_dir / RESUME_FILE)
    if payload is None or job_id is None:
        return False
    at = payload.get("requested_at")
    return (
        str(payload.get("job_id")) == job_id
        and payload.get("restart_count") == restart_count
        and isinstance(at, int | float)
        and at >= since
    )


def peak_mem_gib() -> float | None:
    """The most GPU memory PyTorch allocated on this process's current CUDA device so far, in
    GiB; None when the program has not loaded torch (it then allocated nothing through it),
    CUDA is unused, or anything fails: a memory figure must never stop training.

    torch is only looked up, never imported: importing it takes seconds, and a program that
    trains with it has loaded it long before its first progress report.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        # Only an initialised device has a peak; asking an uninitialised one would create a
        # CUDA context for nothing.
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return None
        peak = float(torch.cuda.max_memory_allocated()) / 2**30
    except Exception as exc:  # any failure of torch or the driver: no figure this time
        if not _peak_failed[0]:
            _peak_failed[0] = True
            logger.warning("cannot read the peak GPU memory (reported as null): %s", exc)
        return None
    return round(peak, 6) if peak > 0 else None


def read_progress(state_dir: Path) -> dict[str, Any] | None:
    """progress.json as a dict, or None if missing or malformed."""
    return read_json(state_dir / PROGRESS_FILE)


class ProgressReporter:
    """Keeps progress.json up to date; call `update` after every step (it is cheap).

    Args:
        env: the job's environment (key, id, node, GPUs, state folder).
        total_steps: the job's planned steps (None if open-ended).
        gpu_type: the GPU type this process runs on.
        num_gpus: the job's GPUs over all its nodes.
        every_s: minimum seconds between two writes (forced writes excepted).
        window_s: the sliding window steps_per_s is measured over.
        clock: monotonic seconds (rates); wall: Unix seconds (updated_at). Injected by tests.
    """

    def __init__(
        self,
        env: JobEnvironment,
        *,
        total_steps: int | None,
        gpu_type: str,
        num_gpus: int,
        every_s: float = 5.0,
        window_s: float = DEFAULT_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.env = env
        self.total_steps = total_steps
        self.gpu_type = gpu_type
        self.num_gpus = num_gpus
        self.every_s = every_s
        self.window_s = window_s
        self._clock = clock
        self._wall = wall
        self._samples: deque[tuple[float, int]] = deque()
        self._last_write: float | None = None
        self.path = env.state_dir / PROGRESS_FILE

    def reset_window(self) -> None:
        """Forget the rate samples (after a pause, whose time is not training time)."""
        self._samples.clear()

    def steps_per_s(self) -> float | None:
        """Steps per second over the window, or None until samples span a second."""
        if len(self._samples) < 2:
            return None
        (t0, s0), (t1, s1) = self._samples[0], self._samples[-1]
        if t1 - t0 < _MIN_SPAN_S:
            return None
        return (s1 - s0) / (t1 - t0)

    def update(self, step: int, *, status: str = "running", force: bool = False) -> bool:
        """Record that `step` steps are done; rewrite progress.json if due (or `force`).

        Returns:
            whether the file was written. A failed write is logged, never raised: progress
            is advisory and must not stop training.
        """
        now = self._clock()
        self._samples.append((now, step))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        if not force and self._last_write is not None and now - self._last_write < self.every_s:
            return False
        self._last_write = now
        rate = self.steps_per_s()
        payload = {
            "job_key": self.env.job_key,
            "job_id": self.env.job_id,
            "restart_count": self.env.restart_count,
            "step": step,
            "total_steps": self.total_steps,
            "steps_per_s": None if rate is None else round(rate, 6),
            "gpu_type": self.gpu_type,
            "num_gpus": self.num_gpus,
            "node": self.env.node,
            "status": status,
            "updated_at": self._wall(),
            "peak_mem_gib": peak_mem_gib(),
        }
        try:
            write_json_atomic(self.path, payload)
        except OSError as exc:
            logger.warning("cannot write %s: %s", self.path, exc)
            return False
        return True
