"""Throughput tables: training steps/s per (job class, GPU count, GPU type), and their updates.

- `table`: `ThroughputTable`, its lookups (a problem's throughput matrix) and merges;
- `formats`: its file formats, read strictly: our own, documented in docs/throughput.md
  (`ThroughputTable.from_dict` / `to_dict`), and Gavel's `simulation_throughputs.json`
  (`ThroughputTable.from_gavel`);
- `rescale`: `rescale_row`, the online-update hook of docs/interfaces.md: a job's measured
  steps/s rescale its profile row.

Import them from here: `from slurm_hetsched.core.throughput import ThroughputTable`. Loaders take
already-parsed data (dicts from JSON), never paths: this package does no I/O;
`slurm_hetsched.data_files` reads the files.
"""

from __future__ import annotations

from slurm_hetsched.core.throughput.formats import (
    FORMAT,
    ClassKey,
    PairKey,
    ThroughputFormatError,
)
from slurm_hetsched.core.throughput.rescale import (
    MAX_FACTOR,
    MIN_FACTOR,
    RescaledRow,
    rescale_row,
)
from slurm_hetsched.core.throughput.table import ThroughputTable, UnknownJobClassError

__all__ = [
    "FORMAT",
    "MAX_FACTOR",
    "MIN_FACTOR",
    "ClassKey",
    "PairKey",
    "RescaledRow",
    "ThroughputFormatError",
    "ThroughputTable",
    "UnknownJobClassError",
    "rescale_row",
]
