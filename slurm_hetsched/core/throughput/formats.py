"""The throughput files' formats, read strictly and written back: our own (docs/throughput.md:
`parse_own`, `dump_own`) and Gavel's `simulation_throughputs.json` (`parse_gavel`).

Both read already-parsed data (dicts from JSON), never paths: `slurm_hetsched.data_files` reads
the files. Every key and value is checked, and a `ThroughputFormatError` names the offending one.
What a format holds is a `TableEntries`, the content of a `ThroughputTable`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from slurm_hetsched.errors import HetschedError

FORMAT = "hetsched-throughputs/1"
# Gavel writes its job keys as stringified Python tuples; parse them, never eval them.
_GAVEL_KEY = re.compile(r"""^\(\s*(['"])(?P<cls>.+)\1\s*,\s*(?P<num_gpus>\d+)\s*\)$""")
_GAVEL_UNCONSOLIDATED = "_unconsolidated"
_GAVEL_ISOLATED = "null"

ClassKey = tuple[str, int]  # (job class, num_gpus)
PairKey = tuple[str, str, int]  # (job class a, job class b, num_gpus of each)


class ThroughputFormatError(HetschedError, ValueError):
    """A throughput file's content does not follow its format."""


@dataclass(frozen=True, slots=True)
class TableEntries:
    """A throughput table's content as the formats read and write it (see `ThroughputTable`).

    Attributes:
        gpu_types: the column order of every array.
        rows: (job class, num_gpus) -> (n_types,) steps/s, consolidated; 0 = cannot run.
        unconsolidated: same keys and shape, GPUs spread over nodes; NaN = not measured.
        packed: (class a, class b, num_gpus) -> (n_types, 2) steps/s of a and b sharing GPUs.
        source: free text naming where the numbers come from.
    """

    gpu_types: tuple[str, ...]
    rows: Mapping[ClassKey, np.ndarray]
    unconsolidated: Mapping[ClassKey, np.ndarray]
    packed: Mapping[PairKey, np.ndarray]
    source: str


# ----------------------------------------------------------------------------------------------
# Our own format (docs/throughput.md)


def parse_own(data: Mapping[str, Any]) -> TableEntries:
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
    return TableEntries(
        gpu_types=gpu_types,
        rows=_widen(raw_rows, gpu_types),
        unconsolidated=_widen(raw_unc, gpu_types, fill=math.nan),
        packed=_widen(raw_packed, gpu_types, width=2),
        source=str(data.get("source", "")),
    )


def dump_own(table: TableEntries) -> dict[str, Any]:
    """`table` in our own format; `parse_own(dump_own(table))` gives it back."""

    def nest(entries: Mapping[ClassKey, np.ndarray], keep_zeros: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for (job_class, num_gpus), row in sorted(entries.items()):
            out.setdefault(job_class, {})[str(num_gpus)] = {
                t: float(v)
                for t, v in zip(table.gpu_types, row, strict=True)
                if v > 0 or (keep_zeros and v == 0)  # NaN (not measured) is left out
            }
        return out

    packed: dict[str, Any] = {}
    for (a, b, num_gpus), pair in sorted(table.packed.items()):
        per_type = {
            t: [float(x), float(y)] for t, (x, y) in zip(table.gpu_types, pair, strict=True)
        }
        packed.setdefault(a, {}).setdefault(str(num_gpus), {})[b] = {
            t: v for t, v in per_type.items() if v[0] > 0 or v[1] > 0
        }
    data: dict[str, Any] = {"format": FORMAT, "source": table.source}
    data["throughputs"] = nest(table.rows, keep_zeros=False)
    if table.unconsolidated:
        # Unlike `throughputs`, a 0 here differs from a missing entry (see `TableEntries`).
        data["unconsolidated"] = nest(table.unconsolidated, keep_zeros=True)
    if packed:
        data["packed"] = packed
    return data


# ----------------------------------------------------------------------------------------------
# Gavel's format


def parse_gavel(data: Mapping[str, Any], source: str = "") -> TableEntries:
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
    return TableEntries(
        gpu_types=gpu_types,
        rows=_widen(rows, gpu_types),
        unconsolidated=_widen(unc, gpu_types, fill=math.nan),
        packed=_widen(packed, gpu_types, width=2),
        source=source or "Gavel simulation_throughputs.json",
    )


# ----------------------------------------------------------------------------------------------
# Parsing helpers


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
