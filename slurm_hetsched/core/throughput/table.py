"""The throughput table: steps/s per (job class, GPU count, GPU type), and its lookups.

`ThroughputTable` answers "how fast does a job of this class run on `num_gpus` GPUs of this
type?"; 0 or a missing entry means it cannot run there. It also holds Gavel's unconsolidated
variant (the job's GPUs spread over nodes) and pair throughputs for space sharing, turns them
into a problem's (n_jobs, n_types) matrix, and merges a site's profile over the defaults. Its
file formats are `core.throughput.formats`.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from slurm_hetsched.core.model import InvalidProblemError
from slurm_hetsched.core.throughput.formats import (
    ClassKey,
    PairKey,
    TableEntries,
    dump_own,
    parse_gavel,
    parse_own,
)
from slurm_hetsched.errors import HetschedError


class UnknownJobClassError(HetschedError, LookupError):
    """A job class (or class at a GPU count) is not in the throughput table."""


class RowPrior(Protocol):
    """The row of a class the table does not know (core.throughput.prior.NeutralPrior)."""

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """The columns of its rows."""
        ...

    def row(self, num_gpus: int) -> np.ndarray:
        """Steps/s on each of `gpu_types` at `num_gpus`."""
        ...


@dataclass(frozen=True, slots=True)
class ThroughputTable:
    """Steps/s per (job class, num_gpus, GPU type). Build it with `from_dict` or `from_gavel`.

    Attributes:
        gpu_types: every GPU type the table has a column for.
        rows: (job class, num_gpus) -> (n_types,) steps/s with the job's GPUs on as few nodes
            as possible (consolidated); 0 = cannot run on that type.
        unconsolidated: same keys and shape, for the job's GPUs spread over nodes; NaN (or a
            key absent here) = not measured, and `rows` is used instead.
        packed: (class a, class b, num_gpus) -> (n_types, 2) steps/s of a and of b while they
            share one set of GPUs of that type; 0 = they cannot share it.
        source: free text naming where the numbers come from.
        estimated_types: the columns that are estimates from datasheet figures, not
            measurements (core.throughput.prior.with_estimates); () for a measured table.
        prior: answers for a class the table does not know (its row is an estimate); None:
            such a class raises UnknownJobClassError.
    """

    gpu_types: tuple[str, ...]
    rows: Mapping[ClassKey, np.ndarray]
    unconsolidated: Mapping[ClassKey, np.ndarray]
    packed: Mapping[PairKey, np.ndarray]
    source: str = ""
    estimated_types: tuple[str, ...] = ()
    prior: RowPrior | None = field(default=None, compare=False)
    # Indexes built once (lookups run per job per round in the simulator).
    _classes: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _counts: Mapping[str, tuple[int, ...]] = field(init=False, repr=False, compare=False)
    _column: Mapping[str, int] = field(init=False, repr=False, compare=False)
    # Results of pure lookups on this (immutable) table, keyed by their arguments; see memo.
    _memo: dict[Any, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("rows", "unconsolidated", "packed"):
            frozen = {key: _read_only(value) for key, value in getattr(self, name).items()}
            object.__setattr__(self, name, types.MappingProxyType(frozen))
        counts: dict[str, list[int]] = {}
        for cls, n in self.rows:
            counts.setdefault(cls, []).append(n)
        object.__setattr__(self, "_classes", tuple(sorted(counts)))
        object.__setattr__(self, "_counts", {cls: tuple(sorted(ns)) for cls, ns in counts.items()})
        object.__setattr__(self, "_column", {t: i for i, t in enumerate(self.gpu_types)})
        object.__setattr__(self, "_memo", {})
        if self.prior is not None and tuple(self.prior.gpu_types) != tuple(self.gpu_types):
            raise ValueError("a throughput table's prior must give rows over its own columns")

    @property
    def classes(self) -> tuple[str, ...]:
        """Every job class with at least one entry, sorted."""
        return self._classes

    def is_prior(self, job_class: str) -> bool:
        """Whether `job_class` is answered by the prior (in no table: every figure an estimate)."""
        return self.prior is not None and job_class not in self._counts

    def gpu_counts(self, job_class: str) -> tuple[int, ...]:
        """The GPU counts the table has for `job_class`, ascending."""
        return self._counts.get(job_class, ())

    @property
    def memo(self) -> dict[Any, Any]:
        """A cache for pure functions of this table (the table never changes), such as
        core.problem.table_rate, keyed by the function and its arguments."""
        return self._memo

    def steps_per_s(
        self, job_class: str, gpu_type: str, num_gpus: int = 1, *, consolidated: bool = True
    ) -> float:
        """Steps/s of one job class on `num_gpus` GPUs of `gpu_type`; 0.0 = cannot run.

        Raises:
            UnknownJobClassError: the class is not in the table at all.
            InvalidProblemError: the GPU type is not a column of the table.
        """
        column = self._column.get(gpu_type)
        row = self.rows.get((job_class, num_gpus))
        if column is None or row is None or not consolidated:  # the general path
            return float(self.row(job_class, num_gpus, (gpu_type,), consolidated=consolidated)[0])
        return float(row[column])

    def row(
        self,
        job_class: str,
        num_gpus: int,
        gpu_types: Sequence[str],
        *,
        consolidated: bool = True,
    ) -> np.ndarray:
        """Steps/s of one (class, num_gpus) on each of `gpu_types`, shape (len(gpu_types),).

        A class the table knows at other GPU counts only gives zeros (cannot run).
        """
        return np.asarray(
            self.matrix([(job_class, num_gpus)], gpu_types, consolidated=consolidated)[0]
        )

    def matrix(
        self,
        jobs: Sequence[ClassKey],
        gpu_types: Sequence[str],
        *,
        consolidated: bool = True,
    ) -> np.ndarray:
        """The throughput matrix of a problem.

        Args:
            jobs: (job class, num_gpus) per job, in the problem's row order.
            gpu_types: the problem's column order.
            consolidated: False to read the unconsolidated variant where the table has one.

        Returns:
            (len(jobs), len(gpu_types)) steps/s at each job's own num_gpus; 0 = cannot run.

        Raises:
            UnknownJobClassError: naming the first class the table has no entry for.
            InvalidProblemError: naming a GPU type the table has no column for.
        """
        columns = self._columns(gpu_types)
        known = self.classes
        keys = list(dict.fromkeys(jobs))  # unique keys, first-seen order
        stacked = np.zeros((len(keys), len(self.gpu_types)))  # (n_unique, n_table_types)
        where = {}
        for i, key in enumerate(keys):
            row = self.rows.get(key)
            spread = None if consolidated else self.unconsolidated.get(key)
            if spread is not None:
                row = np.where(np.isnan(spread), 0.0 if row is None else row, spread)
            if row is None and key[0] not in self._counts and self.prior is not None:
                row = self.prior.row(key[1])
            elif row is None and key[0] not in known:
                raise UnknownJobClassError(
                    f"job class {key[0]!r} is not in the throughput table "
                    f"({self.source or 'no source'}); known classes: {list(known)}"
                )
            where[key] = i
            if row is not None:
                stacked[i] = row
        index = np.fromiter((where[key] for key in jobs), dtype=np.int64, count=len(jobs))
        return stacked[index][:, columns]

    def packed_pair(
        self, class_a: str, class_b: str, num_gpus: int, gpu_types: Sequence[str]
    ) -> np.ndarray | None:
        """Steps/s of a and b sharing GPUs, shape (len(gpu_types), 2), or None if never listed."""
        pair = self.packed.get((class_a, class_b, num_gpus))
        if pair is None:
            swapped = self.packed.get((class_b, class_a, num_gpus))
            if swapped is None:
                return None
            pair = swapped[:, ::-1]
        return np.asarray(pair)[self._columns(gpu_types)]

    def merged(self, other: ThroughputTable) -> ThroughputTable:
        """This table with every entry `other` has replaced by `other`'s (a site's profile).

        Estimates and the prior are not kept: estimate again on the merged table.
        """
        gpu_types = tuple(dict.fromkeys(self.gpu_types + other.gpu_types))

        def widen(
            table: ThroughputTable, entries: Mapping[Any, np.ndarray], fill: float = 0.0
        ) -> dict[Any, Any]:
            cols = [gpu_types.index(t) for t in table.gpu_types]
            out = {}
            for key, value in entries.items():
                wide = np.full((len(gpu_types), *value.shape[1:]), fill)
                wide[cols] = value
                out[key] = wide
            return out

        return ThroughputTable(
            gpu_types=gpu_types,
            rows=widen(self, self.rows) | widen(other, other.rows),
            unconsolidated=widen(self, self.unconsolidated, math.nan)
            | widen(other, other.unconsolidated, math.nan),
            packed=widen(self, self.packed) | widen(other, other.packed),
            source=" + ".join(s for s in (self.source, other.source) if s),
        )

    def _columns(self, gpu_types: Sequence[str]) -> list[int]:
        unknown = [t for t in gpu_types if t not in self.gpu_types]
        if unknown:
            raise InvalidProblemError(
                f"GPU type {unknown[0]!r} has no column in the throughput table "
                f"({self.source or 'no source'}; columns: {list(self.gpu_types)}); profile it "
                "in a site throughput file or check its spelling"
            )
        return [self._column[t] for t in gpu_types]

    # ------------------------------------------------------------------------------------------
    # File formats (core.throughput.formats)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ThroughputTable:
        """Parse our own format (docs/throughput.md), strictly.

        Raises:
            ThroughputFormatError: naming the offending key or value.
        """
        return cls._from_entries(parse_own(data))

    def to_dict(self) -> dict[str, Any]:
        """This table in our own format; `from_dict(to_dict())` gives it back."""
        return dump_own(
            TableEntries(
                gpu_types=self.gpu_types,
                rows=self.rows,
                unconsolidated=self.unconsolidated,
                packed=self.packed,
                source=self.source,
            )
        )

    @classmethod
    def from_gavel(cls, data: Mapping[str, Any], source: str = "") -> ThroughputTable:
        """Import Gavel's `simulation_throughputs.json` (already parsed; layout: `parse_gavel`).

        Raises:
            ThroughputFormatError: naming a key or value that does not fit that layout.
        """
        return cls._from_entries(parse_gavel(data, source))

    @classmethod
    def _from_entries(cls, entries: TableEntries) -> ThroughputTable:
        return cls(
            gpu_types=entries.gpu_types,
            rows=entries.rows,
            unconsolidated=entries.unconsolidated,
            packed=entries.packed,
            source=entries.source,
        )


def _read_only(value: np.ndarray) -> np.ndarray:
    array = np.array(value, dtype=float, copy=True)
    array.flags.writeable = False
    return array
