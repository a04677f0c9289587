"""The job spec a managed job carries in its Slurm comment (docs/interfaces.md, "Job spec"):

    hetsched:class=ResNet-50 (batch size 64);steps=20000;weight=1;due=2026-12-01T12:00Z;tw=0.01

One parser for the controller, `hetsched status` and the job side. Any user can write any
comment, so every field is bounded to a range that every policy solves at its extremes (the
constants below; tests/property/test_jobspec_properties.py), and anything else is a
`JobSpecError` whose short, single-line message goes into the job's admin comment: one hostile
comment must never stop a scheduling round. Pure: the time zone for due dates without an
offset and the observation time are passed in, never read from the machine here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, tzinfo

from slurm_hetsched.core.utility import (
    DEFAULT_MAX_UTILITY,
    SHARP_MAX,
    TARGET_MAX_S,
    UMAX_MAX,
    UTILITY_KINDS,
    Utility,
    default_utility,
)
from slurm_hetsched.errors import HetschedError

SPEC_PREFIX = "hetsched:"
KEYS = (
    "class",
    "steps",
    "weight",
    "due",
    "tw",
    "gpus",
    "key",
    "copy",
    "fork",
    "mem",
    "utility",
    "umax",
    "target",
    "sharp",
    "preempt",
)
SPEC_MAX = 1024  # characters of the whole spec, prefix included
STEPS_MAX = 10**12
WEIGHT_MIN = 1e-3
WEIGHT_MAX = 1e3
TW_MAX = 1e3  # tardiness weight: cost per second late (the minimum is 0)
DUE_WITHIN_S = 10 * 365.25 * 86400.0  # a due date is at most ten years from the observation
GPUS_MAX = 1024
# An elastic job's sizes (`gpus=N-M`): policies weigh each, so a round's work grows with them.
ELASTIC_SIZES_MAX = 16
CLASS_MAX = 128
COPY_MAX = 1023
FORK_MAX = 64  # copies of one forked job (`fork=`); a job never has more than nodes either
JOB_KEY_MAX = 64
MEM_GIB_MAX = 4096.0  # GiB of memory one GPU of a job needs; above every GPU made so far
# The utility's bounds, UMAX_MAX, TARGET_MAX_S and SHARP_MAX, are core/utility.py's (shared
# with the traces and what-if problems), imported above and read here as this module's.

_SHOWN_MAX = 40  # characters of an offending value a message echoes (values may be megabytes)
# ASCII only: str.isdigit() and float() also accept other scripts' digits, '_' and 'nan'.
_DIGITS = re.compile(r"[0-9]+")
_NUMBER = re.compile(r"[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
# A safe file name: the key names the job's state folder (docs/interfaces.md, "State folder").
_JOB_KEY = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*")
_JOB_KEY_RULE = f"1 to {JOB_KEY_MAX} characters of A-Z a-z 0-9 . _ + -, not starting with '.'"
# `mem=`: a number of GiB, bare or with the unit (G and GiB are both GiB, as GPU datasheets'
# "GB" are in gpu_types.toml); the longer suffix first.
_MEM_SUFFIXES = ("GiB", "G")
_MEM_RULE = f"GiB per GPU, a number > 0 and <= {MEM_GIB_MAX:g} (e.g. 40, 12.5, 40G, 40GiB)"
# `target=`: a duration from the job's arrival, in seconds or with a unit.
_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_TARGET_RULE = "a duration > 0 and <= 10 years: seconds, or a number with s, m, h or d (e.g. 6h)"


class JobSpecError(HetschedError, ValueError):
    """A comment that starts with `hetsched:` but is not a valid spec; the message says why."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A parsed, validated job spec; every value within the bounds of this module.

    Attributes:
        job_class: the throughput table class (`class=`), 1 to CLASS_MAX printable characters.
        steps: total training steps (`steps=`, 1 to STEPS_MAX), or None if not given.
        weight: fair-share weight (`weight=`, default 1), WEIGHT_MIN to WEIGHT_MAX.
        due_s: due date as Unix seconds (`due=`, ISO 8601), within DUE_WITHIN_S of the
            observation time, or None.
        tardiness_weight: cost per second late (`tw=`, default 0), 0 to TW_MAX.
        gpus: the GPU count the user repeated (`gpus=`, 1 to GPUS_MAX), or None; must equal
            the request. An elastic job gives a range, `gpus=2-3`: `gpus` is its smallest
            count and `gpus_max` its largest; the request must lie between them.
        gpus_max: the largest count of an elastic job (`gpus=N-M`), or None.
        key: the job key (`key=`, see `valid_job_key`), or None (then the first Slurm job id
            is the key).
        copy: the index of a forked copy (`copy=`, 0 to COPY_MAX, default 0); copies share
            one key, so a job's identity is (key, copy).
        fork: the most copies the job may be forked into (`fork=`, 1 to FORK_MAX; HadarE,
            docs/policies.md "Forked jobs"), or None: the site's default.
        mem_gib: GPU memory one GPU of the job needs, in GiB (`mem=`, above 0 up to
            MEM_GIB_MAX), or None; GPU types with less memory are ruled out for the job.
        utility: what finishing at a given time is worth (`utility=`, `umax=`, `target=`,
            `sharp=`; core/utility.py); without `utility=`, its due date and tardiness weight
            read as one (`default_utility`).
        preemptible: False when the job cannot be checkpointed (`preempt=no`): tenant
            policies (astraea) start it only inside its own account's quota and never move
            it; the others ignore it (default `preempt=yes`).
    """

    job_class: str
    steps: int | None = None
    weight: float = 1.0
    due_s: float | None = None
    tardiness_weight: float = 0.0
    gpus: int | None = None
    gpus_max: int | None = None
    key: str | None = None
    copy: int = 0
    fork: int | None = None
    mem_gib: float | None = None
    utility: Utility = field(default_factory=lambda: default_utility(None, 0.0))
    preemptible: bool = True

    @property
    def elastic_gpus(self) -> tuple[int, ...]:
        """Every GPU count an elastic job (`gpus=N-M`) may run with, N to M; () otherwise."""
        if self.gpus is None or self.gpus_max is None:
            return ()
        return tuple(range(self.gpus, self.gpus_max + 1))


def is_managed(comment: str | None) -> bool:
    """Whether a comment claims to carry a spec (valid or not)."""
    return bool(comment) and comment.strip().startswith(SPEC_PREFIX)  # type: ignore[union-attr]


def valid_job_key(key: str) -> bool:
    """Whether `key` is a valid job key: 1 to JOB_KEY_MAX characters of A-Z a-z 0-9 . _ + -,
    not starting with '.', so it is always a plain file name (never '.', '..' or a path)."""
    return len(key) <= JOB_KEY_MAX and _JOB_KEY.fullmatch(key) is not None


def check_job_key(key: str, what: str = "key") -> str:
    """`key` itself if it is a valid job key (`valid_job_key`).

    Args:
        key: the candidate key.
        what: how the message names it (e.g. "key" or "HETSCHED_JOB_KEY").

    Raises:
        JobSpecError: not a valid key; the message names `what`, the value and the rule.
    """
    if not valid_job_key(key):
        raise JobSpecError(f"{what}={_shown(key)}: expected {_JOB_KEY_RULE}")
    return key


def parse_job_spec(comment: str, *, local_tz: tzinfo, now_s: float) -> JobSpec:
    """Parse a `hetsched:` comment.

    Args:
        comment: the job's Slurm comment.
        local_tz: the time zone of a `due=` without an offset (the controller host's).
        now_s: the observation time (Unix seconds); `due=` must lie within DUE_WITHIN_S of it.

    Raises:
        JobSpecError: not a spec, too long, an unknown or repeated key, a missing `class`, a
            value that is malformed or out of its range; the message names the key, shows the
            value (truncated) and says what was expected.
    """
    text = comment.strip()
    if not text.startswith(SPEC_PREFIX):
        raise JobSpecError(f"comment does not start with {SPEC_PREFIX!r}")
    if len(text) > SPEC_MAX:
        raise JobSpecError(f"spec is {len(text)} characters long; at most {SPEC_MAX}")
    values: dict[str, str] = {}
    for pair in text[len(SPEC_PREFIX) :].split(";"):
        if not pair.strip():
            continue  # a trailing or doubled ';'
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise JobSpecError(f"{_shown(pair.strip())} is not key=value")
        if key not in KEYS:
            raise JobSpecError(f"unknown key {_shown(key)}; valid keys: {', '.join(KEYS)}")
        if key in values:
            raise JobSpecError(f"key {key!r} given twice")
        values[key] = value
    if "class" not in values:
        raise JobSpecError("missing class=<throughput-table class>")
    job_key = values.get("key")
    due_s = _due(values.get("due"), local_tz, now_s)
    tardiness_weight = _number(values, "tw", 0.0, 0.0, TW_MAX)
    gpus, gpus_max = _gpus(values)
    return JobSpec(
        job_class=_job_class(values["class"]),
        steps=_whole(values, "steps", 1, STEPS_MAX),
        weight=_number(values, "weight", 1.0, WEIGHT_MIN, WEIGHT_MAX),
        due_s=due_s,
        tardiness_weight=tardiness_weight,
        gpus=gpus,
        gpus_max=gpus_max,
        key=None if job_key is None else check_job_key(job_key),
        copy=_whole(values, "copy", 0, COPY_MAX) or 0,
        fork=_whole(values, "fork", 1, FORK_MAX),
        mem_gib=_mem(values.get("mem")),
        utility=_utility(values, due_s, tardiness_weight),
        preemptible=_yes_no(values, "preempt", True),
    )


def _yes_no(values: dict[str, str], key: str, default: bool) -> bool:
    raw = values.get(key)
    if raw is None:
        return default
    if raw.lower() in ("yes", "no"):
        return raw.lower() == "yes"
    raise JobSpecError(f"{key}={_shown(raw)}: expected yes or no")


def _shown(value: str) -> str:
    """`value` for a message: its repr, cut to _SHOWN_MAX characters."""
    text = repr(value)
    return text if len(text) <= _SHOWN_MAX else text[: _SHOWN_MAX - 3] + "..."


def _job_class(raw: str) -> str:
    if not 1 <= len(raw) <= CLASS_MAX or not raw.isprintable():
        raise JobSpecError(f"class={_shown(raw)}: expected 1 to {CLASS_MAX} printable characters")
    return raw


def _whole(values: dict[str, str], key: str, lo: int, hi: int) -> int | None:
    raw = values.get(key)
    if raw is None:
        return None
    # The length first: int() of a few thousand digits is slow, and the value is unbounded.
    if len(raw) <= len(str(hi)) and _DIGITS.fullmatch(raw) and lo <= int(raw) <= hi:
        return int(raw)
    raise JobSpecError(f"{key}={_shown(raw)}: expected a whole number from {lo} to {hi}")


def _gpus(values: dict[str, str]) -> tuple[int | None, int | None]:
    """`gpus=N` (None for the largest), or an elastic job's `gpus=N-M` with N < M."""
    raw = values.get("gpus")
    if raw is None or "-" not in raw:
        return _whole(values, "gpus", 1, GPUS_MAX), None
    low, _, high = raw.partition("-")
    try:
        lo, hi = (_whole({"gpus": part}, "gpus", 1, GPUS_MAX) for part in (low, high))
    except JobSpecError:
        lo = hi = None
    if lo is None or hi is None or not lo < hi < lo + ELASTIC_SIZES_MAX:
        raise JobSpecError(
            f"gpus={_shown(raw)}: expected N, or N-M for an elastic job, with 1 <= N < M <= "
            f"{GPUS_MAX} and at most {ELASTIC_SIZES_MAX} sizes (M - N < {ELASTIC_SIZES_MAX})"
        )
    return lo, hi


def _number(values: dict[str, str], key: str, default: float, lo: float, hi: float) -> float:
    raw = values.get(key)
    if raw is None:
        return default
    number = float(raw) if _NUMBER.fullmatch(raw) else math.nan  # huge exponents give inf
    if not lo <= number <= hi:  # NaN and inf fail here too
        raise JobSpecError(f"{key}={_shown(raw)}: expected a decimal number from {lo:g} to {hi:g}")
    return number


def _mem(raw: str | None) -> float | None:
    """GiB of `mem=`: a number as `_number` takes it, optionally followed by G or GiB."""
    if raw is None:
        return None
    number = raw
    for suffix in _MEM_SUFFIXES:
        if number.endswith(suffix):
            number = number[: -len(suffix)]
            break
    gib = float(number) if _NUMBER.fullmatch(number) else math.nan  # huge exponents give inf
    if not 0 < gib <= MEM_GIB_MAX:  # NaN and inf fail here too
        raise JobSpecError(f"mem={_shown(raw)}: expected {_MEM_RULE}")
    return gib


def _utility(values: dict[str, str], due_s: float | None, tardiness_weight: float) -> Utility:
    """The spec's utility: `utility=` with its parameters, else the default from the due date
    and tardiness weight (`umax=` applies to both)."""
    top = _number(values, "umax", DEFAULT_MAX_UTILITY, 0.0, UMAX_MAX)
    if top <= 0:
        raise JobSpecError(f"umax={_shown(values['umax'])}: expected a number > 0")
    kind = values.get("utility")
    if kind is None:
        for key in ("target", "sharp"):
            if key in values:
                raise JobSpecError(f"{key}= needs utility=sigmoid, linear or deadline")
        return default_utility(due_s, tardiness_weight, top)
    if kind not in UTILITY_KINDS:
        raise JobSpecError(f"utility={_shown(kind)}: expected one of {', '.join(UTILITY_KINDS)}")
    target_s = _target(values.get("target"))
    if target_s is None and not (kind == "deadline" and due_s is not None):
        needs = "target=" if kind != "deadline" else "target= or due="
        raise JobSpecError(f"utility={kind} needs {needs} (e.g. target=6h)")
    if "sharp" in values and kind != "sigmoid":
        raise JobSpecError(f"sharp= is the steepness of utility=sigmoid, not of {kind}")
    sharpness = _number(values, "sharp", 1.0, 0.0, SHARP_MAX)
    return Utility(kind, top, target_s, sharpness, due_s=due_s)


def _target(raw: str | None) -> float | None:
    """Seconds of `target=`: a number, bare (seconds) or followed by s, m, h or d."""
    if raw is None:
        return None
    scale = _DURATION_UNITS.get(raw[-1:], None)
    number = raw[:-1] if scale is not None else raw
    seconds = float(number) * (scale or 1.0) if _NUMBER.fullmatch(number) else math.nan
    if not 0 < seconds <= TARGET_MAX_S:  # NaN and inf fail here too
        raise JobSpecError(f"target={_shown(raw)}: expected {_TARGET_RULE}")
    return seconds


def _due(raw: str | None, local_tz: tzinfo, now_s: float) -> float | None:
    if raw is None:
        return None
    due_s = _timestamp(raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw, local_tz)
    if due_s is None:
        raise JobSpecError(
            f"due={_shown(raw)}: expected an ISO 8601 date, e.g. 2026-12-01T12:00Z or "
            "2026-12-01T13:00"
        )
    if not abs(due_s - now_s) <= DUE_WITHIN_S:
        raise JobSpecError(f"due={_shown(raw)}: expected a date within 10 years of now")
    return due_s


def _timestamp(text: str, local_tz: tzinfo) -> float | None:
    """Unix seconds of an ISO 8601 date (`local_tz` if it has no offset), or None."""
    if not text.isascii():
        return None  # ASCII digits only, as for the numbers
    try:
        when = datetime.fromisoformat(text)
        if when.tzinfo is None:
            when = when.replace(tzinfo=local_tz)
        return when.timestamp()
    except (ValueError, OverflowError):  # malformed, or out of datetime's range (years 1-9999)
        return None
