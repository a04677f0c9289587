"""Our trace formats, JSONL and CSV: records with the keys of KEYS, parsed into a Trace and
written from one (parsing what was written gives the same trace back)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from slurm_hetsched.core.utility import (
    Utility,
    UtilityFieldError,
    utility_fields,
    utility_from_fields,
)
from slurm_hetsched.errors import TraceError
from slurm_hetsched.sim.trace_fields import number_field, whole_field
from slurm_hetsched.sim.trace_job import Trace, TraceJob, finish_trace

# Our format's keys, in the order the writer puts them. `class` and friends follow the job
# spec's words (docs/interfaces.md); times are seconds on the trace's clock.
KEYS = (
    "id",
    "arrival_s",
    "class",
    "num_gpus",
    "steps",
    "weight",
    "account",
    "due_s",
    "tardiness_weight",
    "slo_s",
    "allowed_gpus",
    "restart_s",
    "mem_gib",
    "utility",
    "umax",
    "target_s",
    "sharp",
)
REQUIRED_KEYS = ("arrival_s", "class", "steps")
# The keys of a job's utility (core/utility.py `utility_from_fields`), in KEYS order.
_UTILITY_KEYS = ("utility", "umax", "target_s", "sharp")


def parse_jsonl(text: str, *, source: str = "<string>") -> Trace:
    """Parse our JSONL format: one JSON object per non-blank line with the keys of KEYS.

    Required: arrival_s, class, steps. Optional: id (default: the job's 0-based position),
    num_gpus (1, or the smallest of allowed_gpus), weight (1), account (""), due_s,
    tardiness_weight (0), slo_s, allowed_gpus (a list of GPU counts), restart_s (seconds one
    move costs the job; none: the simulation's default), mem_gib (GPU memory one GPU of the
    job needs, GiB; none: unknown), utility (sigmoid, linear or deadline) with umax, target_s
    (seconds from arrival) and sharp (per hour), as the job spec's `utility=`, `umax=`,
    `target=` and `sharp=` (none: the due date and tardiness weight read as a utility, with
    umax if given); null means the default.
    Unknown keys are rejected.

    Raises:
        TraceError: naming `source`, the line and the key.
    """
    jobs: list[TraceJob] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        here = f"{source}, line {lineno}"
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{here}: not valid JSON ({exc.msg}); expected one object") from None
        if not isinstance(record, dict):
            raise TraceError(
                f"{here}: a JSON {type(record).__name__}; expected an object with keys {list(KEYS)}"
            )
        _check_keys(record, here, "key")
        jobs.append(_record_job(record, here, len(jobs), source, lineno, csv_cell=False))
    return finish_trace(jobs, source)


def parse_csv(text: str, *, source: str = "<string>") -> Trace:
    """Parse our CSV format: a header row naming columns of KEYS, then one job per row.

    Required columns: arrival_s, class, steps; the others are optional, and an empty cell
    means the default (as null does in JSONL). allowed_gpus is written "1;2;4" (a comma would
    need quoting). Unknown columns are rejected.

    Raises:
        TraceError: naming `source`, the line and the column.
    """
    reader = csv.reader(io.StringIO(text), strict=True)
    header: list[str] | None = None
    jobs: list[TraceJob] = []
    lineno, end = 0, 0  # lines where the current row starts and ends (quoted cells span lines)
    try:
        for row in reader:
            lineno, end = end + 1, reader.line_num
            here = f"{source}, line {lineno}"
            if not any(cell.strip() for cell in row):
                continue
            if header is None:
                header = [cell.strip() for cell in row]
                _check_keys(header, here, "column")
                continue
            if len(row) != len(header):
                raise TraceError(
                    f"{here}: {len(row)} fields; expected {len(header)} as in the header "
                    f"({', '.join(header)})"
                )
            record = {k: v for k, v in zip(header, row, strict=True) if v.strip() != ""}
            jobs.append(_record_job(record, here, len(jobs), source, lineno, csv_cell=True))
    except csv.Error as exc:
        raise TraceError(f"{source}, line {end + 1}: not valid CSV ({exc})") from None
    if header is None:
        raise TraceError(f"{source}: no header row; expected columns from {list(KEYS)}")
    return finish_trace(jobs, source)


def format_jsonl(trace: Sequence[TraceJob]) -> str:
    """The text of `trace` in our JSONL format, one object a line."""
    return "".join(json.dumps(_record(job)) + "\n" for job in trace)


def format_csv(trace: Sequence[TraceJob]) -> str:
    """The text of `trace` in our CSV format, a header row of KEYS then one row a job."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(KEYS)
    for job in trace:
        writer.writerow("" if v is None else _csv_cell(v) for v in _record(job).values())
    return out.getvalue()


def _check_keys(keys: Iterable[str], here: str, what: str) -> None:
    keys = list(keys)
    unknown = [k for k in keys if k not in KEYS]
    if unknown:
        raise TraceError(f"{here}: unknown {what}(s) {unknown}; valid: {list(KEYS)}")
    duplicate = sorted({k for k in keys if keys.count(k) > 1})
    if duplicate:
        raise TraceError(f"{here}: {what}(s) {duplicate} given twice; expected each once")
    missing = [k for k in REQUIRED_KEYS if k not in keys]
    if missing:
        raise TraceError(
            f"{here}: missing {what}(s) {missing}; required: {list(REQUIRED_KEYS)}, "
            f"optional: {[k for k in KEYS if k not in REQUIRED_KEYS]}"
        )


def _record_job(
    record: Mapping[str, Any], here: str, index: int, source: str, lineno: int, csv_cell: bool
) -> TraceJob:
    """A TraceJob from one JSONL object or CSV row (absent, null and "" mean the default)."""
    present = {k: v for k, v in record.items() if v is not None}
    missing = [k for k in REQUIRED_KEYS if k not in present]
    if missing:
        raise TraceError(f"{here}: {', '.join(missing)} empty or null; expected a value")

    def optional(key: str) -> float | None:
        return number_field(present[key], key, here) if key in present else None

    def text(key: str, default: str) -> str:
        value = present.get(key, default)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # a numeric id written without quotes
        if not isinstance(value, str):
            raise TraceError(f"{here}: {key} is {value!r}; expected a string")
        return value.strip()

    steps = whole_field(present["steps"], "steps", here, "steps >= 1")
    allowed = (
        _allowed_gpus(present["allowed_gpus"], here, csv_cell) if "allowed_gpus" in present else ()
    )
    # Without num_gpus, a job with allowed_gpus starts from their smallest (the rule they obey).
    default_gpus = allowed[0] if allowed else 1
    num_gpus = whole_field(present.get("num_gpus", default_gpus), "num_gpus", here, "GPUs >= 1")
    weight, tardiness = optional("weight"), optional("tardiness_weight")
    return TraceJob(
        job_id=text("id", str(index)),
        arrival_s=number_field(present["arrival_s"], "arrival_s", here, "seconds >= 0"),
        job_class=text("class", ""),
        num_gpus=num_gpus,
        total_steps=steps,
        weight=1.0 if weight is None else weight,
        account=text("account", ""),
        due_s=optional("due_s"),
        tardiness_weight=0.0 if tardiness is None else tardiness,
        slo_s=optional("slo_s"),
        allowed_gpus=allowed,
        restart_s=optional("restart_s"),
        mem_gib=optional("mem_gib"),
        utility=_utility(present, here, optional("due_s"), 0.0 if tardiness is None else tardiness),
        source=source,
        line=lineno,
    )


def _utility(
    present: Mapping[str, Any], here: str, due_s: float | None, tardiness_weight: float
) -> Utility | None:
    """The record's utility from `utility`, `umax`, `target_s` and `sharp` (core/utility.py
    `utility_from_fields`, the job spec's rules and bounds), or None when it gives none."""
    if not any(key in present for key in _UTILITY_KEYS):
        return None
    kind = present.get("utility")
    if isinstance(kind, str):
        kind = kind.strip()

    def number(key: str) -> float | None:
        return number_field(present[key], key, here) if key in present else None

    try:
        return utility_from_fields(
            kind, number("umax"), number("target_s"), number("sharp"), due_s, tardiness_weight
        )
    except UtilityFieldError as exc:
        raise TraceError(f"{here}: {exc}") from None


def _allowed_gpus(value: Any, here: str, csv_cell: bool) -> tuple[int, ...]:
    """allowed_gpus from a JSON list or a CSV cell "1;2;4" (whole numbers, any order here;
    TraceJob then checks they are distinct, ascending and start at num_gpus >= 1)."""
    expected = "GPU counts: " + ('"1;2;4" in CSV' if csv_cell else "a JSON list such as [1, 2, 4]")
    if csv_cell and isinstance(value, str):
        items: list[Any] = value.split(";")
        if any(not v.strip() for v in items):
            raise TraceError(f"{here}: allowed_gpus is {value!r}; expected {expected}")
    elif not csv_cell and isinstance(value, list):
        items = value
    else:
        raise TraceError(f"{here}: allowed_gpus is {value!r}; expected {expected}")
    if not items:
        return ()
    return tuple(whole_field(v, "allowed_gpus", here, "GPUs >= 1 in each entry") for v in items)


def _record(job: TraceJob) -> dict[str, Any]:
    """One job as our format's record, keys in KEYS order."""
    return {
        "id": job.job_id,
        "arrival_s": job.arrival_s,
        "class": job.job_class,
        "num_gpus": job.num_gpus,
        "steps": job.total_steps,
        "weight": job.weight,
        "account": job.account,
        "due_s": job.due_s,
        "tardiness_weight": job.tardiness_weight,
        "slo_s": job.slo_s,
        "allowed_gpus": list(job.allowed_gpus) if job.allowed_gpus else None,
        "restart_s": job.restart_s,
        "mem_gib": job.mem_gib,
        **dict(zip(_UTILITY_KEYS, _utility_record(job.utility), strict=True)),
    }


def _utility_record(
    utility: Utility | None,
) -> tuple[str | None, float | None, float | None, float | None]:
    """The record's utility, umax, target_s and sharp: all None without a utility; umax
    always with one (so that the default shape with the default umax reads back as given)."""
    return (None, None, None, None) if utility is None else utility_fields(utility)


def _csv_cell(value: Any) -> str:
    if isinstance(value, list):
        return ";".join(str(v) for v in value)
    return repr(value) if isinstance(value, float) else str(value)
