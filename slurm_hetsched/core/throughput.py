"""Throughput tables: training steps/s per (job class, GPU count, GPU type), and their updates.

A table answers "how fast does a job of this class run on `num_gpus` GPUs of this type?";
0 or a missing entry means it cannot run there. It also holds Gavel's unconsolidated variant
(the job's GPUs spread over nodes) and pair throughputs for space sharing.

Loaders take already-parsed data (dicts from JSON), never paths: this module does no I/O.
`slurm_hetsched.data_files` reads the files. Two formats are understood:
- our own, documented in docs/throughput.md (`ThroughputTable.from_dict` / `to_dict`);
- Gavel's `simulation_throughputs.json` (`ThroughputTable.from_gavel`).

`rescale_row` is the online-update hook of docs/interfaces.md: a job's measured steps/s
rescale its profile row.
"""

from __future__ import annotations

import logging
import math
import re
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from slurm_hetsched.core.model import InvalidProblemError
from slurm_hetsched.errors import HetschedError

logger = logging.getLogger(__name__)

FORMAT = "hetsched-throughputs/1"
# Gavel writes its job keys as stringified Python tuples; parse them, never eval them.
_GAVEL_KEY = re.compile(r"""^\(\s*(['"])(?P<cls>.+)\1\s*,\s*(?P<num_gpus>\d+)\s*\)$""")
_GAVEL_UNCONSOLIDATED = "_unconsolidated"
_GAVEL_ISOLATED = "null"
# Online update: one factor per job, clipped so a bad measurement cannot move a job's row by
# more than 5x either way (docs/interfaces.md).
MIN_FACTOR, MAX_FACTOR = 0.2, 5.0

ClassKey = tuple[str, int]  # (job class, num_gpus)
PairKey = tuple[str, str, int]  # (job class a, job class b, num_gpus of each)


class UnknownJobClassError(HetschedError, LookupError):
    """A job class (or class at a GPU count) is not in the throughput table."""


class ThroughputFormatError(HetschedError, ValueError):
    """A throughput file's content does not follow its format."""


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
    """

    gpu_types: tuple[str, ...]
    rows: Mapping[ClassKey, np.ndarray]
    unconsolidated: Mapping[ClassKey, np.ndarray]
    packed: Mapping[PairKey, np.ndarray]
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("rows", "unconsolidated", "packed"):
            frozen = {key: _read_only(value) for key, value in getattr(self, name).items()}
            object.__setattr__(self, name, types.MappingProxyType(frozen))

    @property
    def classes(self) -> tuple[str, ...]:
        """Every job class with at least one entry, sorted."""
        return tuple(sorted({cls for cls, _ in self.rows}))

    def gpu_counts(self, job_class: str) -> tuple[int, ...]:
        """The GPU counts the table has for `job_class`, ascending."""
        return tuple(sorted(n for cls, n in self.rows if cls == job_class))

    def steps_per_s(
        self, job_class: str, gpu_type: str, num_gpus: int = 1, *, consolidated: bool = True
    ) -> float:
        """Steps/s of one job class on `num_gpus` GPUs of `gpu_type`; 0.0 = cannot run.

        Raises:
            UnknownJobClassError: the class is not in the table at all.
            InvalidProblemError: the GPU type is not a column of the table.
        """
        return float(self.row(job_class, num_gpus, (gpu_type,), consolidated=consolidated)[0])

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
            if row is None and key[0] not in known:
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
        """This table with every entry `other` has replaced by `other`'s (a site's profile)."""
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
        return [self.gpu_types.index(t) for t in gpu_types]

    # ------------------------------------------------------------------------------------------
    # Our own format (docs/throughput.md)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ThroughputTable:
        """Parse our own format (docs/throughput.md), strictly.

        Raises:
            ThroughputFormatError: naming the offending key or value.
        """
        valid = {"format", "source", "throughputs", "unconsolidated", "packed"}
        _reject_unknown(data, valid, "top level")
        if data.get("format") != FORMAT:
            raise ThroughputFormatError(
                f"`format` is {data.get('format')!r}; expected {FORMAT!r} (see docs/throughput.md)"
            )
        if "throughputs" not in data:
            raise ThroughputFormatError("missing `throughputs` (see docs/throughput.md)")
        raw_rows = _class_entries(data["throughputs"], "throughputs")
        raw_unc = _class_entries(data.get("unconsolidated", {}), "unconsolidated")
        raw_packed = _packed_entries(data.get("packed", {}))
        gpu_types = tuple(
            dict.fromkeys(
                t
                for entries in (raw_rows, raw_unc, raw_packed)
                for per_type in entries.values()
                for t in per_type
            )
        )
        return cls(
            gpu_types=gpu_types,
            rows=_widen(raw_rows, gpu_types),
            unconsolidated=_widen(raw_unc, gpu_types, fill=math.nan),
            packed=_widen(raw_packed, gpu_types, width=2),
            source=str(data.get("source", "")),
        )

    def to_dict(self) -> dict[str, Any]:
        """This table in our own format; `from_dict(to_dict())` gives it back."""

        def nest(entries: Mapping[ClassKey, np.ndarray], keep_zeros: bool) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for (job_class, num_gpus), row in sorted(entries.items()):
                out.setdefault(job_class, {})[str(num_gpus)] = {
                    t: float(v)
                    for t, v in zip(self.gpu_types, row, strict=True)
                    if v > 0 or (keep_zeros and v == 0)  # NaN (not measured) is left out
                }
            return out

        packed: dict[str, Any] = {}
        for (a, b, num_gpus), pair in sorted(self.packed.items()):
            per_type = {
                t: [float(x), float(y)] for t, (x, y) in zip(self.gpu_types, pair, strict=True)
            }
            packed.setdefault(a, {}).setdefault(str(num_gpus), {})[b] = {
                t: v for t, v in per_type.items() if v[0] > 0 or v[1] > 0
            }
        data: dict[str, Any] = {"format": FORMAT, "source": self.source}
        data["throughputs"] = nest(self.rows, keep_zeros=False)
        if self.unconsolidated:
            # Unlike `throughputs`, a 0 here differs from a missing entry (see the class doc).
            data["unconsolidated"] = nest(self.unconsolidated, keep_zeros=True)
        if packed:
            data["packed"] = packed
        return data

    # ------------------------------------------------------------------------------------------
    # Gavel's format

    @classmethod
    def from_gavel(cls, data: Mapping[str, Any], source: str = "") -> ThroughputTable:
        """Import Gavel's `simulation_throughputs.json` (already parsed).

        Layout: {worker type: {"('<class>', <num_gpus>)": {"null": steps/s alone,
        "('<partner>', <num_gpus>)": [steps/s of this job, of the partner] when sharing}}}.
        A worker type "<t>_unconsolidated" is the unconsolidated variant of type <t>, not a
        type of its own. 0 means cannot run.

        Raises:
            ThroughputFormatError: naming a key or value that does not fit this layout.
        """
        if not isinstance(data, Mapping) or not data:
            raise ThroughputFormatError("Gavel throughputs: expected an object of worker types")
        rows: dict[ClassKey, dict[str, float]] = {}
        unc: dict[ClassKey, dict[str, float]] = {}
        packed: dict[PairKey, dict[str, tuple[float, float]]] = {}
        for worker_type, jobs in data.items():
            gpu_type = worker_type.removesuffix(_GAVEL_UNCONSOLIDATED)
            consolidated = gpu_type == worker_type
            if not isinstance(jobs, Mapping):
                raise ThroughputFormatError(f"Gavel throughputs: {worker_type!r} is not an object")
            for job_key, entries in jobs.items():
                key = _parse_gavel_key(job_key, worker_type)
                if not isinstance(entries, Mapping) or _GAVEL_ISOLATED not in entries:
                    raise ThroughputFormatError(
                        f'Gavel throughputs: {worker_type} / {job_key} has no "null" entry'
                    )
                target = rows if consolidated else unc
                target.setdefault(key, {})[gpu_type] = _rate(
                    entries[_GAVEL_ISOLATED], f"{worker_type} / {job_key}"
                )
                if not consolidated:
                    continue  # pair throughputs: consolidated placement only
                for partner_key, value in entries.items():
                    if partner_key == _GAVEL_ISOLATED:
                        continue
                    partner = _parse_gavel_key(partner_key, worker_type)
                    if partner[1] != key[1]:
                        continue  # Gavel only packs jobs with equal GPU counts
                    where = f"{worker_type} / {job_key} / {partner_key}"
                    if not isinstance(value, Sequence) or len(value) != 2:
                        raise ThroughputFormatError(f"Gavel throughputs: {where}: expected [a, b]")
                    pair = (_rate(value[0], where), _rate(value[1], where))
                    packed.setdefault((key[0], partner[0], key[1]), {})[gpu_type] = pair
        gpu_types = tuple(dict.fromkeys(t for per_type in rows.values() for t in per_type))
        return cls(
            gpu_types=gpu_types,
            rows=_widen(rows, gpu_types),
            unconsolidated=_widen(unc, gpu_types, fill=math.nan),
            packed=_widen(packed, gpu_types, width=2),
            source=source or "Gavel simulation_throughputs.json",
        )


@dataclass(frozen=True, slots=True)
class RescaledRow:
    """A job's throughput row after online measurements (see `rescale_row`).

    Attributes:
        steps_per_s: (n_types,) the job's estimated steps/s per type.
        factor: the one factor applied to types not measured yet (1.0 without measurements).
        outliers: types whose measured/profile ratio fell outside [0.2, 5] and was clipped.
    """

    steps_per_s: np.ndarray  # (n_types,)
    factor: float
    outliers: tuple[str, ...]


def rescale_row(
    profile: np.ndarray,
    gpu_types: Sequence[str],
    measured: Mapping[str, float],
    *,
    job_id: str = "",
) -> RescaledRow:
    """Online update of one job's throughputs from what it was measured doing.

    Each measured type gets the ratio measured / profile, clipped to [0.2, 5] (an outlier is
    logged, with the job and type); types not measured yet are scaled by one factor, the
    geometric mean of the clipped ratios, so the profile's ratios between GPU types stay
    until a type is measured itself (docs/interfaces.md). A type the profile says cannot run
    but that was measured running takes the measured value. Non-finite or non-positive
    measurements are ignored with a warning (the job's own report is untrusted input).

    Args:
        profile: (n_types,) steps/s from the table, at the job's num_gpus; 0 = cannot run.
        gpu_types: the column names of `profile`.
        measured: GPU type -> measured steps/s at the job's num_gpus (e.g. a windowed mean).
        job_id: for log messages only.

    Returns:
        The estimated row; `profile` itself is not modified.
    """
    profile = np.asarray(profile, dtype=float)
    estimate = profile.copy()
    log_ratios: list[float] = []
    outliers: list[str] = []
    for gpu_type, value in measured.items():
        if gpu_type not in gpu_types:
            logger.warning("job_id=%s measured on unknown GPU type %r; ignored", job_id, gpu_type)
            continue
        if not (math.isfinite(value) and value > 0):
            logger.warning("job_id=%s bad measurement %r on %s; ignored", job_id, value, gpu_type)
            continue
        j = list(gpu_types).index(gpu_type)
        if profile[j] <= 0:
            logger.info("job_id=%s runs on %s, which its profile says it cannot", job_id, gpu_type)
            estimate[j] = value
            continue
        ratio = value / profile[j]
        clipped = min(max(ratio, MIN_FACTOR), MAX_FACTOR)
        if clipped != ratio:
            outliers.append(gpu_type)
            logger.warning(
                "job_id=%s gpu_type=%s measured %.4g steps/s vs profile %.4g (ratio %.3g): "
                "outlier, clipped to %.3g",
                job_id,
                gpu_type,
                value,
                profile[j],
                ratio,
                clipped,
            )
        estimate[j] = profile[j] * clipped
        log_ratios.append(math.log(clipped))
    factor = math.exp(sum(log_ratios) / len(log_ratios)) if log_ratios else 1.0
    unmeasured = np.array([t not in measured for t in gpu_types]) & (profile > 0)
    estimate[unmeasured] = profile[unmeasured] * factor
    return RescaledRow(steps_per_s=_read_only(estimate), factor=factor, outliers=tuple(outliers))


# ----------------------------------------------------------------------------------------------
# Parsing helpers


def _read_only(value: np.ndarray) -> np.ndarray:
    array = np.array(value, dtype=float, copy=True)
    array.flags.writeable = False
    return array


def _reject_unknown(data: Mapping[str, Any], valid: set[str], where: str) -> None:
    if not isinstance(data, Mapping):
        raise ThroughputFormatError(f"{where}: expected an object")
    unknown = sorted(set(data) - valid)
    if unknown:
        raise ThroughputFormatError(
            f"{where}: unknown key(s) {unknown}; valid keys are {sorted(valid)}"
        )


def _rate(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ThroughputFormatError(f"{where}: {value!r} is not a number of steps/s")
    if not (math.isfinite(value) and value >= 0):
        raise ThroughputFormatError(f"{where}: {value!r} must be finite and >= 0")
    return float(value)


def _num_gpus(text: str, where: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ThroughputFormatError(f"{where}: GPU count {text!r} must be a whole number >= 1")
    return int(text)


def _parse_gavel_key(text: str, where: str) -> ClassKey:
    match = _GAVEL_KEY.match(text)
    if match is None:
        raise ThroughputFormatError(
            f"Gavel throughputs: {where}: job key {text!r} is not \"('<class>', <num_gpus>)\""
        )
    return match["cls"], _num_gpus(match["num_gpus"], f"{where} / {text}")


def _class_entries(data: Any, where: str) -> dict[ClassKey, dict[str, float]]:
    """{class: {num_gpus: {gpu type: steps/s}}} -> {(class, num_gpus): {gpu type: steps/s}}."""
    if not isinstance(data, Mapping):
        raise ThroughputFormatError(f"`{where}`: expected {{class: {{num_gpus: {{type: x}}}}}}")
    out: dict[ClassKey, dict[str, float]] = {}
    for job_class, counts in data.items():
        if not isinstance(counts, Mapping):
            raise ThroughputFormatError(f"`{where}` / {job_class!r}: expected {{num_gpus: ...}}")
        for count, per_type in counts.items():
            at = f"`{where}` / {job_class!r} / {count!r}"
            if not isinstance(per_type, Mapping):
                raise ThroughputFormatError(f"{at}: expected {{gpu type: steps/s}}")
            key = (job_class, _num_gpus(count, at))
            out[key] = {t: _rate(v, f"{at} / {t!r}") for t, v in per_type.items()}
    return out


def _packed_entries(data: Any) -> dict[PairKey, dict[str, tuple[float, float]]]:
    """{class a: {num_gpus: {class b: {type: [a, b]}}}} -> {(a, b, num_gpus): {type: (a, b)}}."""
    if not isinstance(data, Mapping):
        raise ThroughputFormatError(
            "`packed`: expected {class: {num_gpus: {class: {type: [a, b]}}}}"
        )
    out: dict[PairKey, dict[str, tuple[float, float]]] = {}
    for class_a, counts in data.items():
        for count, partners in dict(counts).items():
            num_gpus = _num_gpus(count, f"`packed` / {class_a!r}")
            for class_b, per_type in dict(partners).items():
                at = f"`packed` / {class_a!r} / {count} / {class_b!r}"
                pairs: dict[str, tuple[float, float]] = {}
                for t, value in dict(per_type).items():
                    if not isinstance(value, Sequence) or len(value) != 2:
                        raise ThroughputFormatError(f"{at} / {t!r}: expected [a, b]")
                    pairs[t] = (_rate(value[0], at), _rate(value[1], at))
                out[(class_a, class_b, num_gpus)] = pairs
    return out


def _widen(
    entries: Mapping[Any, Mapping[str, Any]],
    gpu_types: tuple[str, ...],
    width: int = 0,
    fill: float = 0.0,
) -> dict[Any, np.ndarray]:
    """Per-type dicts -> arrays over `gpu_types` (`fill` where a type is missing)."""
    shape = (len(gpu_types), width) if width else (len(gpu_types),)
    out = {}
    for key, per_type in entries.items():
        array = np.full(shape, fill)
        for t, value in per_type.items():
            array[gpu_types.index(t)] = value
        out[key] = array
    return out
