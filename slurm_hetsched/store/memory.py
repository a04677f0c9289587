"""The round store of the simulator: the last round in memory (no history, bounded memory)."""

from __future__ import annotations

from slurm_hetsched.core.ports import RoundRecord


class MemoryStore:
    """A `StateStore` that keeps the last round only; `rounds` counts every round saved."""

    def __init__(self) -> None:
        self._last: RoundRecord | None = None
        self.rounds = 0

    def load(self) -> RoundRecord | None:
        return self._last

    def save_planned(self, record: RoundRecord) -> None:
        if self._last is None or record.round != self._last.round:
            self.rounds += 1
        self._last = record

    def save_enacted(self, record: RoundRecord) -> None:
        self._last = record
