"""The job spec a managed job carries in its Slurm comment (docs/interfaces.md, "Job spec"):

    hetsched:class=ResNet-50 (batch size 64);steps=20000;weight=1;due=2026-12-01T12:00Z;tw=0.01

One parser for the controller, `hetsched status` and the job side. Pure: the time zone for due
dates without an offset is passed in, never read from the machine here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, tzinfo

from slurm_hetsched.errors import HetschedError

SPEC_PREFIX = "hetsched:"
KEYS = ("class", "steps", "weight", "due", "tw", "gpus", "key")
_MAX_LENGTH = 4096  # Slurm comments can be long; a spec never needs this much


class JobSpecError(HetschedError, ValueError):
    """A comment that starts with `hetsched:` but is not a valid spec; the message says why."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A parsed, validated job spec.

    Attributes:
        job_class: the throughput table class (`class=`).
        steps: total training steps (`steps=`), or None if not given.
        weight: fair-share weight (`weight=`, default 1), > 0.
        due_s: due date as Unix seconds (`due=`, ISO 8601), or None.
        tardiness_weight: cost per second late (`tw=`, default 0), >= 0.
        gpus: the GPU count the user repeated (`gpus=`), or None; must equal the request.
        key: the job key (`key=`), or None (then the first Slurm job id is the key).
    """

    job_class: str
    steps: int | None = None
    weight: float = 1.0
    due_s: float | None = None
    tardiness_weight: float = 0.0
    gpus: int | None = None
    key: str | None = None


def is_managed(comment: str | None) -> bool:
    """Whether a comment claims to carry a spec (valid or not)."""
    return bool(comment) and comment.strip().startswith(SPEC_PREFIX)  # type: ignore[union-attr]


def parse_job_spec(comment: str, *, local_tz: tzinfo) -> JobSpec:
    """Parse a `hetsched:` comment.

    Args:
        comment: the job's Slurm comment.
        local_tz: the time zone of a `due=` without an offset (the controller host's).

    Raises:
        JobSpecError: not a spec, an unknown or repeated key, a missing `class`, a bad number
            or date; the message names the key and what was expected.
    """
    text = comment.strip()
    if not text.startswith(SPEC_PREFIX):
        raise JobSpecError(f"comment does not start with {SPEC_PREFIX!r}")
    if len(text) > _MAX_LENGTH:
        raise JobSpecError(f"spec is {len(text)} characters long; at most {_MAX_LENGTH}")
    values: dict[str, str] = {}
    for pair in text[len(SPEC_PREFIX) :].split(";"):
        if not pair.strip():
            continue  # a trailing or doubled ';'
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise JobSpecError(f"{pair.strip()!r} is not key=value")
        if key not in KEYS:
            raise JobSpecError(f"unknown key {key!r}; valid keys: {', '.join(KEYS)}")
        if key in values:
            raise JobSpecError(f"key {key!r} given twice")
        values[key] = value
    if not values.get("class"):
        raise JobSpecError("missing class=<throughput-table class>")
    return JobSpec(
        job_class=values["class"],
        steps=_whole(values, "steps"),
        weight=_number(values, "weight", 1.0, positive=True),
        due_s=_due(values.get("due"), local_tz),
        tardiness_weight=_number(values, "tw", 0.0, positive=False),
        gpus=_whole(values, "gpus"),
        key=values.get("key") or None,
    )


def _whole(values: dict[str, str], key: str) -> int | None:
    raw = values.get(key)
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise JobSpecError(f"{key}={raw!r}: expected a whole number >= 1")
    return int(raw)


def _number(values: dict[str, str], key: str, default: float, *, positive: bool) -> float:
    raw = values.get(key)
    if raw is None:
        return default
    try:
        number = float(raw)
    except ValueError:
        number = math.nan
    ok = math.isfinite(number) and (number > 0 if positive else number >= 0)
    if not ok:
        raise JobSpecError(f"{key}={raw!r}: expected a number {'> 0' if positive else '>= 0'}")
    return number


def _due(raw: str | None, local_tz: tzinfo) -> float | None:
    if raw is None:
        return None
    text = raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise JobSpecError(
            f"due={raw!r}: expected an ISO 8601 date, e.g. 2026-12-01T12:00Z or 2026-12-01T13:00"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=local_tz)
    return when.timestamp()
