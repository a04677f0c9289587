"""What one move costs each simulated job: its restart cost, in seconds without progress.

A job's cost comes from, first to last: its own `restart_s` in the trace, the class table of
`hetsched simulate --restart-costs FILE` (job class -> seconds, TOML or JSON), and the run's
default (`--restart-overhead`). `hetsched trace generate --restart-range LO,HI` writes costs
into a trace: one per job class, uniform in [LO, HI] (docs/simulation.md, "Restart costs").

Only `read_restart_costs` touches a file; the rest is pure.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from slurm_hetsched.errors import ConfigError

# A cost above a day is a unit slip (minutes, milliseconds), not a checkpoint-restore.
MAX_RESTART_S = 86_400.0
# Published checkpoint-restore costs of real models on GPU clusters span 25 to 250 s per model
# (Sia, SOSP'23): the range `hetsched trace generate --restart-range` draws from when not given.
PUBLISHED_RESTART_RANGE_S = (25.0, 250.0)
_DECIMALS = 3  # drawn costs are rounded to milliseconds, as trace times are


def is_restart_s(value: object) -> bool:
    """True for a finite number of seconds from 0 to MAX_RESTART_S (bools are not numbers)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= MAX_RESTART_S
    )


def check_restart_costs(
    by_class: Mapping[str, float], where: str, known_classes: Iterable[str] | None = None
) -> dict[str, float]:
    """The class table as {class: seconds}, checked.

    Args:
        by_class: job class -> restart cost in seconds.
        where: the table's origin for messages (a file name, "--restart-costs").
        known_classes: the throughput table's classes; a class outside them is an error
            (a misspelt class would silently get the default). None skips the check.

    Raises:
        ConfigError: naming every bad entry, with the valid range or the known classes.
    """
    bad = [
        f"{name!r} = {value!r}"
        for name, value in by_class.items()
        if not (isinstance(name, str) and name.strip() and is_restart_s(value))
    ]
    if bad:
        raise ConfigError(
            f"{where}: restart cost(s) {', '.join(bad)}; expected a job class = seconds from 0 "
            f"to {MAX_RESTART_S:.0f} (a day)"
        )
    if known_classes is not None:
        known = list(known_classes)
        unknown = sorted(set(by_class) - set(known))
        if unknown:
            raise ConfigError(
                f"{where}: job class(es) {unknown} are not in the throughput table; "
                f"known classes: {known}"
            )
    return {name: float(value) for name, value in by_class.items()}


def read_restart_costs(path: str | Path) -> dict[str, float]:
    """A class table from a TOML (.toml) or JSON (.json) file: job class -> seconds.

    TOML: one `"class name" = seconds` line per class, at the top level (quote names with
    spaces). JSON: one object {"class name": seconds}. The classes are checked against the
    throughput table later, by `simulate`, which knows it.

    Raises:
        ConfigError: the file cannot be read or parsed, is not a flat table of numbers, or has
            a cost that is not from 0 to a day.
    """
    file = Path(path)
    suffix = file.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise ConfigError(
            f"restart costs {file}: cannot tell the format from {suffix!r}; name the file "
            "*.toml or *.json"
        )
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"restart costs {file}: cannot read ({exc})") from exc
    data: Any
    try:
        data = tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"restart costs {file}: not valid TOML ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"restart costs {file}: not valid JSON ({exc.msg} at line {exc.lineno})"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"restart costs {file}: a JSON {type(data).__name__}; expected an object "
            '{"job class": seconds}'
        )
    nested = sorted(k for k, v in data.items() if isinstance(v, dict))
    if nested:
        raise ConfigError(
            f'restart costs {file}: {nested} are tables; expected `"job class" = seconds` '
            "at the top level"
        )
    return check_restart_costs(data, f"restart costs {file}")


def restart_s_of(
    own_s: float | None, job_class: str, by_class: Mapping[str, float], default_s: float
) -> float:
    """A job's restart cost: its own if given, else its class's, else the default."""
    if own_s is not None:
        return own_s
    return by_class.get(job_class, default_s)


def check_restart_range(lo_hi: tuple[float, float], where: str) -> tuple[float, float]:
    """(lo, hi) with 0 <= lo <= hi <= a day, else a ConfigError naming `where`."""
    lo, hi = lo_hi
    if not (is_restart_s(lo) and is_restart_s(hi) and lo <= hi):
        raise ConfigError(
            f"{where} {lo:g},{hi:g}: expected LO,HI seconds with 0 <= LO <= HI <= "
            f"{MAX_RESTART_S:.0f}, e.g. {PUBLISHED_RESTART_RANGE_S[0]:g},"
            f"{PUBLISHED_RESTART_RANGE_S[1]:g}"
        )
    return float(lo), float(hi)


def draw_restart_costs(
    classes: Iterable[str], lo_hi: tuple[float, float], rng: np.random.Generator
) -> dict[str, float]:
    """One restart cost per class, uniform in [lo, hi], in the order given.

    Drawing for every class of the throughput table (not only those a trace uses) keeps a
    class's cost the same whatever jobs the rest of the trace holds.

    Raises:
        ConfigError: a range outside 0 <= lo <= hi <= a day.
    """
    lo, hi = check_restart_range(lo_hi, "restart range")
    names = list(classes)
    drawn = np.round(rng.uniform(lo, hi, len(names)), _DECIMALS)
    return {name: float(min(max(s, lo), hi)) for name, s in zip(names, drawn, strict=True)}
