"""The site throughput file `hetsched profile` writes: our own format (docs/throughput.md),
merged into an existing file entry by entry, written atomically, and read back the way the
controller's `site.throughputs` reads it.

Merging works on the file's JSON, not on a `ThroughputTable`: the new (class, GPU count, GPU
type) entries replace the same entries, and everything else (other types of the same row,
other classes, `unconsolidated`, `packed`, `source`) is kept as written.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slurm_hetsched.core.throughput import FORMAT, ThroughputTable
from slurm_hetsched.data_files import load_throughputs
from slurm_hetsched.errors import HetschedError
from slurm_hetsched.profiling.plan import ProfileError
from slurm_hetsched.profiling.results import Measurement

_NEW_FILE_MODE = 0o644  # the controller (root) reads it; nothing in it is secret


def load_existing(path: Path) -> dict[str, Any] | None:
    """The file's content if it exists and is a valid table in our format; None if missing.

    Raises:
        ProfileError: it cannot be read, is not JSON, is Gavel's format, or is not a valid
            table; checked before any job is submitted.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ProfileError(f"--output {path}: cannot read it: {exc.strerror}") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ProfileError(f"--output {path}: not JSON ({exc}); choose another file") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ProfileError(
            f"--output {path} exists but is not a {FORMAT!r} file (Gavel's format?); profiles "
            "are merged into our own format only: choose another file"
        )
    try:
        ThroughputTable.from_dict(data)
    except ValueError as exc:  # ThroughputFormatError
        raise ProfileError(f"--output {path}: {exc}") from exc
    return data


def merged_table(
    existing: dict[str, Any] | None,
    job_class: str,
    measurements: Sequence[Measurement],
    *,
    source: str,
) -> dict[str, Any]:
    """`existing` (or a new table with `source`) with each measurement as the entry of its
    (class, GPU count, GPU type); checked with `ThroughputTable.from_dict`.

    Raises:
        ProfileError: the result is not a valid table (cannot happen for a valid `existing`).
    """
    data: dict[str, Any] = copy.deepcopy(existing) if existing is not None else {"format": FORMAT}
    if existing is None:
        data["source"] = source
    rows: dict[str, dict[str, float]] = data.setdefault("throughputs", {}).setdefault(job_class, {})
    for m in measurements:
        # A count the file spells differently ("02") is the same entry.
        key = next((k for k in rows if _count(k) == m.case.num_gpus), str(m.case.num_gpus))
        rows.setdefault(key, {})[m.case.gpu_type] = m.steps_per_s
    try:
        ThroughputTable.from_dict(data)
    except ValueError as exc:
        raise ProfileError(f"the merged table is not valid: {exc}") from exc
    return data


def write_table(
    path: Path, data: dict[str, Any], job_class: str, measurements: Sequence[Measurement]
) -> ThroughputTable:
    """Write `data` to `path` atomically, then read it back as the controller would.

    The file is replaced in one rename (a reader sees the old file or the new one) and keeps
    the mode of the file it replaces.

    Returns:
        the table as `site.throughputs` loads it.

    Raises:
        ProfileError: it cannot be written, or does not read back with the measured rates.
    """
    text = json.dumps(data, indent=2) + "\n"
    folder = path.parent if str(path.parent) else Path(".")
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = _NEW_FILE_MODE
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fchmod(out.fileno(), mode)
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _fsync_dir(folder)
    except OSError as exc:
        raise ProfileError(f"--output {path}: cannot write it: {exc}") from exc
    return _read_back(path, job_class, measurements)


def _read_back(path: Path, job_class: str, measurements: Sequence[Measurement]) -> ThroughputTable:
    """The written file as the controller's `site.throughputs` reads it, with every
    measured entry checked."""
    try:
        table = load_throughputs(path)
    except (HetschedError, ValueError, OSError) as exc:  # ThroughputFormatError, ConfigError
        raise ProfileError(
            f"{path} was written but does not load as a throughput table: {exc}"
        ) from exc
    for m in measurements:
        found = table.steps_per_s(job_class, m.case.gpu_type, m.case.num_gpus)
        if found != m.steps_per_s:
            raise ProfileError(
                f"{path} reads back {found} steps/s for {job_class!r} on {m.case.gpu_type} "
                f"x{m.case.num_gpus}, not the measured {m.steps_per_s}"
            )
    return table


def _count(key: str) -> int | None:
    text = key.strip()
    return int(text) if text.isascii() and text.isdigit() else None


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
