"""Job traces for the simulator: parsing, writing and validating them (docs/simulation.md).

A trace is a tuple of `TraceJob` records in file order; `TraceJob.to_job` turns one into the
core's `Job`. Arrival and due times are seconds from the trace's start. Three formats:
- Gavel's 10-field tab-separated `.trace` (read only);
- ours, JSONL (`.jsonl`, one object per line) and CSV (`.csv`, a header row), read and written.

Parsing is strict and loses nothing: a malformed line raises `TraceError` naming the file, the
line and what was expected; no line is skipped except blank ones. `validate_trace` checks a trace
against a throughput table and the GPU types of a cluster and names every job that cannot run.

This module decides nothing; `parse_*`/`format_*`/`validate_trace` are pure, and only
`read_trace`, `write_trace` and `read_shipped_trace` touch files.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from slurm_hetsched.core.model import Job
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.errors import TraceError
from slurm_hetsched.sim.restart_costs import MAX_RESTART_S, is_restart_s

GAVEL, JSONL, CSV = "gavel", "jsonl", "csv"
FORMATS = (GAVEL, JSONL, CSV)
_EXTENSIONS = {".trace": GAVEL, ".jsonl": JSONL, ".csv": CSV}

GAVEL_FIELDS = (
    "job_type",
    "command",
    "working_directory",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "priority_weight",
    "SLO",
    "arrival_time",
)
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
)
REQUIRED_KEYS = ("arrival_s", "class", "steps")
# Reference GPU type for Gavel's SLO field (a multiple of the job's duration there), the same
# one Gavel's generator derives steps from.
REFERENCE_GPU_TYPE = "v100"
SHIPPED_TRACES = ("artifact_evaluation", "max_min_fairness", "minimize_makespan", "small_test")
_MAX_LISTED = 20  # problems listed in one validation error


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace.

    Attributes:
        job_id: unique within the trace; the file's `id`, else the job's 0-based position.
        arrival_s: submission time, seconds from the trace's start (>= 0).
        job_class: key into the throughput table.
        num_gpus: GPUs the job uses at once, all of one type (Gavel's scale factor), >= 1.
        total_steps: training steps of the whole job, >= 1.
        weight: priority weight (> 0; Gavel's priority_weight).
        account: Slurm account (tenant); "" for none.
        due_s: due date, seconds from the trace's start, or None.
        tardiness_weight: cost per second late; 0 without a due date.
        slo_s: completion-time objective, seconds from arrival, or None.
        allowed_gpus: GPU counts the job may run with, ascending, starting at num_gpus (a
            placement policy such as ANDREAS chooses); () = num_gpus only.
        restart_s: what one move costs the job (seconds without progress, 0 to a day), or
            None for the simulation's default (sim/restart_costs.py). Gavel's format has none.
        source: the file (or other origin) the job came from, for messages only.
        line: its line in `source` (1-based), or None; for messages only.
    """

    job_id: str
    arrival_s: float
    job_class: str
    num_gpus: int
    total_steps: int
    weight: float = 1.0
    account: str = ""
    due_s: float | None = None
    tardiness_weight: float = 0.0
    slo_s: float | None = None
    allowed_gpus: tuple[int, ...] = ()
    restart_s: float | None = None
    source: str = field(default="", compare=False)
    line: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        checks = (
            (self.job_id != "", "id", self.job_id, "a non-empty string"),
            (self.job_class != "", "class", self.job_class, "a non-empty job class"),
            (_finite(self.arrival_s) and self.arrival_s >= 0, "arrival_s", self.arrival_s,
             "seconds >= 0 from the trace's start"),
            (self.num_gpus >= 1, "num_gpus", self.num_gpus, "a whole number >= 1"),
            (self.total_steps >= 1, "steps", self.total_steps, "a whole number >= 1"),
            (_finite(self.weight) and self.weight > 0, "weight", self.weight, "a number > 0"),
            (self.due_s is None or (_finite(self.due_s) and self.due_s >= self.arrival_s),
             "due_s", self.due_s, f"none or seconds >= arrival_s ({self.arrival_s})"),
            (_finite(self.tardiness_weight) and self.tardiness_weight >= 0, "tardiness_weight",
             self.tardiness_weight, "a number >= 0"),
            (self.slo_s is None or (_finite(self.slo_s) and self.slo_s > 0), "slo_s",
             self.slo_s, "none or seconds > 0 after arrival"),
            (not self.allowed_gpus or (self.allowed_gpus[0] == self.num_gpus
             and list(self.allowed_gpus) == sorted(set(self.allowed_gpus))), "allowed_gpus",
             list(self.allowed_gpus), f"distinct ascending counts from num_gpus ({self.num_gpus})"),
            (self.restart_s is None or is_restart_s(self.restart_s), "restart_s", self.restart_s,
             f"none or seconds from 0 to {MAX_RESTART_S:.0f} (a day)"),
        )  # fmt: skip
        for ok, key, value, expected in checks:
            if not ok:
                raise TraceError(f"{self.where}: {key} is {value!r}; expected {expected}")

    @property
    def where(self) -> str:
        """Where the job came from, e.g. "t.csv, line 4 (job '3')"."""
        place = self.source or "trace"
        if self.line is not None:
            place += f", line {self.line}"
        return f"{place} (job {self.job_id!r})"

    def to_job(self) -> Job:
        """The core's `Job` for this record (key = job_id, nothing run yet)."""
        return Job(
            key=self.job_id,
            job_class=self.job_class,
            num_gpus=self.num_gpus,
            steps_remaining=float(self.total_steps),
            total_steps=float(self.total_steps),
            weight=self.weight,
            account=self.account,
            arrival_s=self.arrival_s,
            due_s=self.due_s,
            tardiness_weight=self.tardiness_weight,
            slo_s=self.slo_s,
            allowed_gpus=self.allowed_gpus,
            restart_s=self.restart_s,
        )


Trace = tuple[TraceJob, ...]


def to_jobs(trace: Iterable[TraceJob]) -> tuple[Job, ...]:
    """`TraceJob.to_job` for each job, in trace order."""
    return tuple(job.to_job() for job in trace)


# ----------------------------------------------------------------------------------------------
# Reading


def trace_format(path: str | Path, fmt: str | None = None) -> str:
    """The format of a trace file: `fmt` if given, else from its extension.

    Raises:
        TraceError: `fmt` is not one of FORMATS, or the extension is not .trace/.jsonl/.csv.
    """
    if fmt is not None:
        if fmt not in FORMATS:
            raise TraceError(f"trace format {fmt!r} unknown; expected one of {list(FORMATS)}")
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix not in _EXTENSIONS:
        raise TraceError(
            f"{path}: cannot tell the trace format from the extension {suffix!r}; name the file "
            f"*.trace (Gavel), *.jsonl or *.csv, or give the format ({list(FORMATS)})"
        )
    return _EXTENSIONS[suffix]


def read_trace(
    path: str | Path,
    fmt: str | None = None,
    *,
    table: ThroughputTable | None = None,
    reference_gpu_type: str = REFERENCE_GPU_TYPE,
) -> Trace:
    """Read a trace file; the format comes from `fmt` or the file's extension.

    Args:
        path: the trace file.
        fmt: "gavel", "jsonl" or "csv"; None to use the extension (.trace, .jsonl, .csv).
        table, reference_gpu_type: only for a Gavel trace with SLOs (see `parse_gavel`).

    Raises:
        TraceError: the file cannot be read, or a line is malformed (with file and line).
    """
    kind = trace_format(path, fmt)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read trace ({exc})") from exc
    return parse_trace(
        text, kind, source=str(path), table=table, reference_gpu_type=reference_gpu_type
    )


def read_shipped_trace(name: str, *, table: ThroughputTable | None = None) -> Trace:
    """One of Gavel's traces shipped as package data, by name (see SHIPPED_TRACES).

    Raises:
        TraceError: no shipped trace has that name.
    """
    stem = name.removesuffix(".trace")
    if stem not in SHIPPED_TRACES:
        raise TraceError(f"no shipped trace {name!r}; shipped: {list(SHIPPED_TRACES)}")
    file = f"{stem}.trace"
    text = resources.files("slurm_hetsched").joinpath("data", "traces", file).read_text("utf-8")
    return parse_gavel(text, source=file, table=table)


def parse_trace(
    text: str,
    fmt: str,
    *,
    source: str = "<string>",
    table: ThroughputTable | None = None,
    reference_gpu_type: str = REFERENCE_GPU_TYPE,
) -> Trace:
    """Parse a trace's text in format `fmt` ("gavel", "jsonl" or "csv").

    Raises:
        TraceError: a malformed line (naming `source` and the line), or no jobs at all.
    """
    if fmt == GAVEL:
        return parse_gavel(text, source=source, table=table, reference_gpu_type=reference_gpu_type)
    if fmt == JSONL:
        return parse_jsonl(text, source=source)
    if fmt == CSV:
        return parse_csv(text, source=source)
    raise TraceError(f"trace format {fmt!r} unknown; expected one of {list(FORMATS)}")


def parse_gavel(
    text: str,
    *,
    source: str = "<string>",
    table: ThroughputTable | None = None,
    reference_gpu_type: str = REFERENCE_GPU_TYPE,
) -> Trace:
    """Parse Gavel's trace format: one job per line, 10 tab-separated fields (GAVEL_FIELDS).

    `job_type` is the class, `scale_factor` the GPU count, `priority_weight` the weight and
    `arrival_time` seconds from the start; `command`, `working_directory`, `num_steps_arg` and
    `needs_data_dir` (0 or 1) only matter on Gavel's physical cluster and are checked, then
    dropped. Job ids are the 0-based line order of the jobs, as Gavel numbers them.

    `SLO` is -1 for none, else (as in Gavel's scheduler) a multiple of the job's duration,
    taken as total_steps / steps/s on `reference_gpu_type` at its GPU count from `table`;
    converting one needs `table`.

    Raises:
        TraceError: naming `source`, the line and the field, for a line without exactly 10
            fields, a field that is not a number where one is expected, or an SLO without a
            table to convert it.
    """
    jobs: list[TraceJob] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        here = f"{source}, line {lineno}"
        fields = raw.split("\t")
        if len(fields) != len(GAVEL_FIELDS):
            raise TraceError(
                f"{here}: {len(fields)} tab-separated fields; expected {len(GAVEL_FIELDS)} "
                f"({', '.join(GAVEL_FIELDS)})"
            )
        values = dict(zip(GAVEL_FIELDS, fields, strict=True))
        if values["needs_data_dir"].strip() not in ("0", "1"):
            raise TraceError(
                f"{here}: field 5 (needs_data_dir) is {values['needs_data_dir']!r}; expected 0 or 1"
            )
        job_class = values["job_type"].strip()
        if not job_class:
            raise TraceError(f"{here}: field 1 (job_type) is empty; expected a job class")
        steps = _whole(values["total_steps"], "field 6 (total_steps)", here, "steps >= 1")
        num_gpus = _whole(values["scale_factor"], "field 7 (scale_factor)", here, "GPUs >= 1")
        weight = _number(values["priority_weight"], "field 8 (priority_weight)", here)
        slo = _number(values["SLO"], "field 9 (SLO)", here)
        arrival = _number(values["arrival_time"], "field 10 (arrival_time)", here, "seconds >= 0")
        slo_s = None
        if slo != -1:
            slo_s = _gavel_slo_s(slo, job_class, num_gpus, steps, here, table, reference_gpu_type)
        jobs.append(
            TraceJob(
                job_id=str(len(jobs)),
                arrival_s=arrival,
                job_class=job_class,
                num_gpus=num_gpus,
                total_steps=steps,
                weight=weight,
                slo_s=slo_s,
                source=source,
                line=lineno,
            )
        )
    return _finish(jobs, source)


def parse_jsonl(text: str, *, source: str = "<string>") -> Trace:
    """Parse our JSONL format: one JSON object per non-blank line with the keys of KEYS.

    Required: arrival_s, class, steps. Optional: id (default: the job's 0-based position),
    num_gpus (1, or the smallest of allowed_gpus), weight (1), account (""), due_s,
    tardiness_weight (0), slo_s, allowed_gpus (a list of GPU counts), restart_s (seconds one
    move costs the job; none: the simulation's default); null means the default.
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
    return _finish(jobs, source)


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
    return _finish(jobs, source)


# ----------------------------------------------------------------------------------------------
# Writing


def format_trace(trace: Sequence[TraceJob], fmt: str) -> str:
    """The text of `trace` in our "jsonl" or "csv" format; parsing it gives `trace` back.

    Raises:
        TraceError: `fmt` is Gavel's (read only) or unknown.
    """
    if fmt == JSONL:
        return "".join(json.dumps(_record(job)) + "\n" for job in trace)
    if fmt == CSV:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(KEYS)
        for job in trace:
            writer.writerow("" if v is None else _csv_cell(v) for v in _record(job).values())
        return out.getvalue()
    if fmt == GAVEL:
        raise TraceError("Gavel's trace format is read only; write .jsonl or .csv instead")
    raise TraceError(f"trace format {fmt!r} unknown; expected {JSONL!r} or {CSV!r}")


def write_trace(path: str | Path, trace: Sequence[TraceJob], fmt: str | None = None) -> None:
    """Write `trace` to `path` in our JSONL or CSV format (from `fmt` or the extension).

    Raises:
        TraceError: the format is Gavel's or unknown, or the file cannot be written.
    """
    text = format_trace(trace, trace_format(path, fmt))
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot write trace ({exc})") from exc


# ----------------------------------------------------------------------------------------------
# Validation against a throughput table and a cluster


def validate_trace(
    trace: Sequence[TraceJob],
    table: ThroughputTable,
    gpu_types: Sequence[str],
    *,
    capacity: Mapping[str, int] | None = None,
) -> None:
    """Check that every job can run on some GPU type; name every one that cannot.

    A job can run on type t when the table gives its class a positive steps/s on t at its
    GPU count and, if `capacity` is given, the cluster has at least num_gpus GPUs of t.

    Args:
        trace: the jobs.
        table: the throughput table the simulation uses.
        gpu_types: the cluster's GPU types (each must be a column of `table`).
        capacity: optional GPUs per type of the cluster.

    Raises:
        TraceError: listing each job whose class is not in the table or that no GPU type can
            run (with its file and line), and the known classes.
        InvalidProblemError: a GPU type of `gpu_types` has no column in `table`.
    """
    types_ = tuple(gpu_types)
    known = set(table.classes)
    problems: list[str] = []
    unknown_class = False
    for job in trace:
        if job.job_class not in known:
            unknown_class = True
            problems.append(f"{job.where}: class {job.job_class!r} is not in the throughput table")
            continue
        row = table.row(job.job_class, job.num_gpus, types_)
        runnable = [t for t, v in zip(types_, row, strict=True) if v > 0]
        if not runnable:
            counts = ", ".join(str(n) for n in table.gpu_counts(job.job_class))
            problems.append(
                f"{job.where}: class {job.job_class!r} on {job.num_gpus} GPU(s) cannot run on "
                f"any of {list(types_)} (the table has this class at {counts} GPU(s))"
            )
            continue
        if capacity is not None and not any(capacity.get(t, 0) >= job.num_gpus for t in runnable):
            sizes = ", ".join(f"{t}: {capacity.get(t, 0)}" for t in runnable)
            problems.append(
                f"{job.where}: needs {job.num_gpus} GPUs of one type, and the types that can "
                f"run it have fewer ({sizes})"
            )
    if not problems:
        return
    listed = "\n  ".join(problems[:_MAX_LISTED])
    more = f"\n  ... and {len(problems) - _MAX_LISTED} more" if len(problems) > _MAX_LISTED else ""
    hint = f"\nknown classes: {list(table.classes)}" if unknown_class else ""
    raise TraceError(
        f"{len(problems)} of {len(trace)} jobs cannot run ({table.source or 'throughput table'}; "
        f"GPU types {list(types_)}); fix or remove them:\n  {listed}{more}{hint}"
    )


# ----------------------------------------------------------------------------------------------
# Helpers


def _finite(value: float) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _finish(jobs: list[TraceJob], source: str) -> Trace:
    if not jobs:
        raise TraceError(f"{source}: no jobs; expected at least one job line")
    seen: dict[str, TraceJob] = {}
    for job in jobs:
        if job.job_id in seen:
            raise TraceError(
                f"{job.where}: id {job.job_id!r} is also on line {seen[job.job_id].line}; "
                "expected unique ids"
            )
        seen[job.job_id] = job
    return tuple(jobs)


def _gavel_slo_s(
    slo: float,
    job_class: str,
    num_gpus: int,
    steps: int,
    here: str,
    table: ThroughputTable | None,
    reference_gpu_type: str,
) -> float:
    if not (math.isfinite(slo) and slo > 0):
        raise TraceError(f"{here}: field 9 (SLO) is {slo!r}; expected -1 (none) or a number > 0")
    if table is None:
        raise TraceError(
            f"{here}: field 9 (SLO) is {slo!r}, a multiple of the job's duration; converting "
            "it needs a throughput table (pass `table=`), or set the SLO to -1"
        )
    if job_class not in table.classes or reference_gpu_type not in table.gpu_types:
        raise TraceError(
            f"{here}: SLO of class {job_class!r} needs its steps/s on {reference_gpu_type}, "
            "which the throughput table does not have"
        )
    rate = table.steps_per_s(job_class, reference_gpu_type, num_gpus)
    if rate <= 0:
        raise TraceError(
            f"{here}: SLO of class {job_class!r} on {num_gpus} GPU(s) needs its steps/s on "
            f"{reference_gpu_type}, and the table says it cannot run there"
        )
    return slo * steps / rate


def _number(value: Any, key: str, here: str, expected: str = "a number") -> float:
    """A finite number from a JSON value or a text field; bools and NaN/inf are rejected."""
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = math.nan
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        number = math.nan
    if not math.isfinite(number):
        raise TraceError(f"{here}: {key} is {value!r}; expected {expected}")
    return number


def _whole(value: Any, key: str, here: str, what: str) -> int:
    """A whole number (2, "2", 2.0 or "2.0"); the message names `what` was expected."""
    expected = f"a whole number of {what}"
    number = _number(value, key, here, expected)
    if not number.is_integer():
        raise TraceError(f"{here}: {key} is {value!r}; expected {expected}")
    return int(number)


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
        return _number(present[key], key, here) if key in present else None

    def text(key: str, default: str) -> str:
        value = present.get(key, default)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # a numeric id written without quotes
        if not isinstance(value, str):
            raise TraceError(f"{here}: {key} is {value!r}; expected a string")
        return value.strip()

    steps = _whole(present["steps"], "steps", here, "steps >= 1")
    allowed = (
        _allowed_gpus(present["allowed_gpus"], here, csv_cell) if "allowed_gpus" in present else ()
    )
    # Without num_gpus, a job with allowed_gpus starts from their smallest (the rule they obey).
    default_gpus = allowed[0] if allowed else 1
    num_gpus = _whole(present.get("num_gpus", default_gpus), "num_gpus", here, "GPUs >= 1")
    weight, tardiness = optional("weight"), optional("tardiness_weight")
    return TraceJob(
        job_id=text("id", str(index)),
        arrival_s=_number(present["arrival_s"], "arrival_s", here, "seconds >= 0"),
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
        source=source,
        line=lineno,
    )


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
    return tuple(_whole(v, "allowed_gpus", here, "GPUs >= 1 in each entry") for v in items)


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
    }


def _csv_cell(value: Any) -> str:
    if isinstance(value, list):
        return ";".join(str(v) for v in value)
    return repr(value) if isinstance(value, float) else str(value)
