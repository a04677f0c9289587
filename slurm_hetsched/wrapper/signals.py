"""The job's signal handlers: they only set flags; the training loop acts on them.

Doing real work (a checkpoint) inside a handler hangs or fails intermittently (PyTorch
Lightning #21406), so the handlers here set a flag and return. The loop looks at the flags at
each step boundary and, while paused, every fraction of a second.

Two signals are handled:
- the checkpoint signal (default SIGUSR2, configurable, may be off): "checkpoint, acknowledge
  and pause" (docs/interfaces.md, step 2);
- SIGTERM: Slurm's requeue and cancel (SIGCONT + SIGTERM, SIGKILL after KillWait): the loop
  stops at the next step boundary, or at once while paused, without a checkpoint.

Usable from any Python program; no PyTorch needed.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)

_Handler = Any  # what signal.signal returns: a callable, SIG_DFL, SIG_IGN or None


class SignalFlags:
    """Flags set by the job's signal handlers.

    Attributes:
        checkpoint_signal: the signal that requests a checkpoint; None = not handled.
        checkpoint_requested: set by the checkpoint signal; `take_checkpoint_request` clears it.
        terminate_requested: set by SIGTERM; never cleared.
        received: how many checkpoint signals arrived in total.
    """

    def __init__(self, checkpoint_signal: signal.Signals | None = signal.SIGUSR2) -> None:
        self.checkpoint_signal = checkpoint_signal
        self.checkpoint_requested = False
        self.terminate_requested = False
        self.received = 0
        self._previous: dict[signal.Signals, _Handler] = {}

    # The handlers: assignments only (safe at any point of the interrupted code).
    def _on_checkpoint(self, signum: int, frame: FrameType | None) -> None:
        self.checkpoint_requested = True
        self.received += 1

    def _on_terminate(self, signum: int, frame: FrameType | None) -> None:
        self.terminate_requested = True

    def take_checkpoint_request(self) -> bool:
        """True once per checkpoint request: reads and clears the flag."""
        requested = self.checkpoint_requested
        self.checkpoint_requested = False
        return requested

    def install(self, *, handle_terminate: bool = True) -> bool:
        """Install the handlers (remembering the previous ones).

        Returns:
            False when not called from the main thread (Python only delivers signals there);
            the job then runs without them, and a warning says so.
        """
        if threading.current_thread() is not threading.main_thread():
            logger.warning(
                "signal handlers not installed: not in the main thread; the job will not "
                "checkpoint on %s",
                self.checkpoint_signal,
            )
            return False
        wanted: list[tuple[signal.Signals, Any]] = []
        if self.checkpoint_signal is not None:
            wanted.append((self.checkpoint_signal, self._on_checkpoint))
        if handle_terminate:
            wanted.append((signal.SIGTERM, self._on_terminate))
        for signum, handler in wanted:
            self._previous[signum] = signal.signal(signum, handler)
        if self.checkpoint_signal is None:
            logger.info("checkpoint signal handling is off (HETSCHED_SIGNAL=none)")
        return True

    def uninstall(self) -> None:
        """Put the previous handlers back."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()
