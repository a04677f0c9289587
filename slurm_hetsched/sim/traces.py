"""Job traces for the simulator: the formats by name, and reading and writing trace files
(docs/simulation.md). The public API of traces, re-exported from the modules below.

A trace is a tuple of `TraceJob` records in file order (trace_job.py); `TraceJob.to_job` turns
one into the core's `Job`. Arrival and due times are seconds from the trace's start. Three
formats:
- Gavel's 10-field tab-separated `.trace` (read only; trace_gavel.py);
- ours, JSONL (`.jsonl`, one object per line) and CSV (`.csv`, a header row), read and written
  (trace_records.py).

Parsing is strict and loses nothing: a malformed line raises `TraceError` naming the file, the
line and what was expected; no line is skipped except blank ones. `validate_trace`
(trace_validate.py) checks a trace against a throughput table and the GPU types of a cluster
and names every job that cannot run.

These modules decide nothing; `parse_*`/`format_*`/`validate_trace` are pure, and only
`read_trace`, `write_trace` and `read_shipped_trace` (here) touch files.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.errors import TraceError
from slurm_hetsched.sim.trace_gavel import GAVEL_FIELDS, REFERENCE_GPU_TYPE, parse_gavel
from slurm_hetsched.sim.trace_job import Trace, TraceJob, to_jobs
from slurm_hetsched.sim.trace_records import (
    KEYS,
    REQUIRED_KEYS,
    format_csv,
    format_jsonl,
    parse_csv,
    parse_jsonl,
)
from slurm_hetsched.sim.trace_validate import validate_trace

__all__ = [
    "CSV",
    "FORMATS",
    "GAVEL",
    "GAVEL_FIELDS",
    "JSONL",
    "KEYS",
    "REFERENCE_GPU_TYPE",
    "REQUIRED_KEYS",
    "SHIPPED_TRACES",
    "Trace",
    "TraceJob",
    "format_trace",
    "parse_csv",
    "parse_gavel",
    "parse_jsonl",
    "parse_trace",
    "read_shipped_trace",
    "read_trace",
    "to_jobs",
    "trace_format",
    "validate_trace",
    "write_trace",
]

GAVEL, JSONL, CSV = "gavel", "jsonl", "csv"
FORMATS = (GAVEL, JSONL, CSV)
_EXTENSIONS = {".trace": GAVEL, ".jsonl": JSONL, ".csv": CSV}
SHIPPED_TRACES = ("artifact_evaluation", "max_min_fairness", "minimize_makespan", "small_test")


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


# ----------------------------------------------------------------------------------------------
# Writing


def format_trace(trace: Sequence[TraceJob], fmt: str) -> str:
    """The text of `trace` in our "jsonl" or "csv" format; parsing it gives `trace` back.

    Raises:
        TraceError: `fmt` is Gavel's (read only) or unknown.
    """
    if fmt == JSONL:
        return format_jsonl(trace)
    if fmt == CSV:
        return format_csv(trace)
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
