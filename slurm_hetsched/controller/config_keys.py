"""The config file's keys: for each `[section] key`, the ControllerConfig field it sets and the
parser that checks its value (with an error that says what was expected).

A parser takes the raw TOML value and the file's folder (relative paths are resolved against
it) and raises ValueError; config.py adds the file and the full key to the message.
"""

from __future__ import annotations

import math
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurm_hetsched.core.jobspec import CLASS_MAX, FORK_MAX
from slurm_hetsched.core.mechanism import MOVES, QUEUES
from slurm_hetsched.slurm.accounts import GPU_TYPE, MAX_QUOTA

# (section, key) -> (field name, parser). A parser takes the raw value and the file's folder.
_Parser = Callable[[Any, Path], Any]


def _number(minimum: float, *, strict: bool) -> _Parser:
    def parse(value: Any, base: Path) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and math.isfinite(value) and (value > minimum if strict else value >= minimum):
            return float(value)
        relation = ">" if strict else ">="
        raise ValueError(f"expected a number {relation} {minimum:g}, got {value!r}")

    return parse


def _count(value: Any, base: Path) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValueError(f"expected a whole number >= 0, got {value!r}")


def _fork(value: Any, base: Path) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= FORK_MAX:
        return value
    raise ValueError(f"expected a whole number of copies, 1 to {FORK_MAX}, got {value!r}")


def _port(value: Any, base: Path) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 65535:
        return value
    raise ValueError(f"expected a port number 0..65535, got {value!r}")


def _text(value: Any, base: Path) -> str:
    if isinstance(value, str) and value:
        return value
    raise ValueError(f"expected a non-empty string, got {value!r}")


def _path(value: Any, base: Path) -> Path:
    return Path(os.path.normpath(base / _text(value, base)))


def _flag(value: Any, base: Path) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"expected true or false, got {value!r}")


def _signal_name(value: Any, base: Path) -> str:
    name = _text(value, base).upper().removeprefix("SIG")
    if not hasattr(signal.Signals, f"SIG{name}"):
        raise ValueError(f"expected a signal name such as USR2 or USR1, got {value!r}")
    return name


def _queue(value: Any, base: Path) -> str:
    if value not in QUEUES:
        raise ValueError(f"expected one of {', '.join(QUEUES)}, got {value!r}")
    return str(value)


def _moves(value: Any, base: Path) -> str:
    if value not in MOVES:
        raise ValueError(f"expected one of {', '.join(MOVES)}, got {value!r}")
    return str(value)


# What the controller does with a job of a class in no throughput table.
UNKNOWN_CLASSES = ("learn", "refuse")


def _unknown_classes(value: Any, base: Path) -> str:
    if value not in UNKNOWN_CLASSES:
        raise ValueError(f"expected one of {', '.join(UNKNOWN_CLASSES)}, got {value!r}")
    return str(value)


def _share(value: Any, base: Path) -> float:
    share = float(_number(0, strict=True)(value, base))
    if share > 1:
        raise ValueError(f"expected a share of time in (0, 1], got {value!r}")
    return share


def _seconds_by_class(value: Any, base: Path) -> dict[str, float]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a table of job class = seconds, got {value!r}")
    seconds = _number(0, strict=False)
    out = {}
    for job_class, item in value.items():
        if not 0 < len(job_class) <= CLASS_MAX:
            raise ValueError(f"{job_class!r}: a job class has 1 to {CLASS_MAX} characters")
        try:
            out[job_class] = float(seconds(item, base))
        except ValueError as exc:
            raise ValueError(f"{job_class!r}: {exc}") from None
    return out


def _log_level(value: Any, base: Path) -> str:
    level = _text(value, base).lower()
    if level not in ("debug", "info", "warning", "error"):
        raise ValueError(f"expected debug, info, warning or error, got {value!r}")
    return level


def _names(value: Any, base: Path) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f'expected a list of names such as ["gpu"], got {value!r}')
    if len(set(value)) != len(value):
        raise ValueError(f"a name is listed twice: {value!r}")
    return tuple(value)


def _one_name(value: Any, base: Path) -> tuple[str, ...]:
    return (_text(value, base),)


def _string_table(value: Any, base: Path) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a table of key = value, got {value!r}")
    out = {}
    for key, item in value.items():
        if isinstance(item, bool):
            out[key] = "true" if item else "false"
        elif isinstance(item, int | float | str):
            out[key] = str(item)
        else:
            raise ValueError(f"{key}: expected a string, number or boolean, got {item!r}")
    return out


# Where the tenants' GPU quotas come from (docs/admin.md, "Tenants and quotas"): the
# [tenants.quota] table, or each Slurm account's GrpTRES.
QUOTA_SOURCES = ("config", "slurm")
# A Slurm account name as sacctmgr keeps it: lower case (it lowers what it is given).
_ACCOUNT = re.compile(r"[a-z0-9_][a-z0-9_.@+-]{0,63}")


def _quotas_from(value: Any, base: Path) -> str:
    if value not in QUOTA_SOURCES:
        raise ValueError(f"expected one of {', '.join(QUOTA_SOURCES)}, got {value!r}")
    return str(value)


def _quota_table(value: Any, base: Path) -> dict[str, dict[str, int]]:
    """{account: {GPU type: count}}: each tenant's GPUs of each type."""
    if not isinstance(value, dict):
        raise ValueError(f"expected a table of account = {{ gpu_type = count }}, got {value!r}")
    quotas = {}
    for account, quota in value.items():
        if not _ACCOUNT.fullmatch(account):
            hint = f" (Slurm keeps account names in lower case: {account.lower()!r})"
            raise ValueError(
                f"{account!r} is not a Slurm account name: lower case letters, digits and "
                f"_ . @ + -, at most 64{hint if account.lower() != account else ''}"
            )
        if not isinstance(quota, dict):
            raise ValueError(
                f"{account}: expected a table of GPU type = count such as {{ v100 = 2 }}, "
                f"got {quota!r}"
            )
        counts = {}
        for gpu_type, count in quota.items():
            if not GPU_TYPE.fullmatch(gpu_type):
                raise ValueError(f"{account}: {gpu_type!r} is not a GPU type name")
            if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_QUOTA:
                raise ValueError(
                    f"{account}.{gpu_type}: expected a whole number of GPUs, 0 to {MAX_QUOTA}, "
                    f"got {count!r}"
                )
            counts[gpu_type] = count
        quotas[account] = counts
    return quotas


def _failpoint(value: Any, base: Path) -> str:
    text = _text(value, base)
    if text.partition(":")[0] not in ("before", "after") or not text.partition(":")[2]:
        raise ValueError(f"expected before:<action> or after:<action>, got {text!r}")
    return str(text)


KEYS: dict[str, dict[str, tuple[str, _Parser]]] = {
    "controller": {
        "round_s": ("round_s", _number(0, strict=True)),
        "policy": ("policy", _text),
        "policy_options": ("policy_options", _string_table),
        "min_reset_interval_s": ("min_reset_interval_s", _number(0, strict=False)),
        "round_queue": ("round_queue", _queue),
        "work_conserving": ("work_conserving", _flag),
        "store": ("store", _path),
        "lock": ("lock", _path),
        "state_root": ("state_root", _path),
        "ack_timeout_s": ("ack_timeout_s", _number(0, strict=True)),
        "requeue_timeout_s": ("requeue_timeout_s", _number(0, strict=True)),
        "checkpoint_signal": ("checkpoint_signal", _signal_name),
        "release_rejected": ("release_rejected", _flag),
        "key_release_s": ("key_release_s", _number(0, strict=False)),
        "log_level": ("log_level", _log_level),
        "resubmit_environment": ("resubmit_environment", _string_table),
        "fork_default": ("fork_default", _fork),
        "fork_max": ("fork_max", _fork),
        "fork_merge_timeout_s": ("fork_merge_timeout_s", _number(0, strict=True)),
    },
    "slurm": {
        "conf": ("slurm_conf", lambda v, base: str(_path(v, base))),
        "bin_dir": ("bin_dir", lambda v, base: str(_path(v, base))),
        "command_timeout_s": ("command_timeout_s", _number(0, strict=True)),
        "retries": ("retries", _count),
        "retry_backoff_s": ("retry_backoff_s", _number(0, strict=False)),
        "partitions": ("partitions", _names),
        "qos": ("qos", _names),
    },
    "site": {
        "throughputs": ("throughputs", _path),
        "gpu_types": ("gpu_types", _path),
        "progress_max_age_s": ("progress_max_age_s", _number(0, strict=True)),
        "unknown_classes": ("unknown_classes", _unknown_classes),
        "explore": ("explore", _flag),
        "explore_rounds_per_type": ("explore_rounds_per_type", _count),
    },
    "metrics": {
        "port": ("metrics_port", _port),
        "address": ("metrics_address", _text),
    },
    "moves": {
        "mechanism": ("moves", _moves),
        "restart_share": ("restart_share", _share),
        "restart_s": ("restart_s", _number(0, strict=False)),
        "max_restart_s": ("max_restart_s", _number(0, strict=True)),
        "restart_s_by_class": ("restart_s_by_class", _seconds_by_class),
    },
    "watchdog": {
        "after_s": ("watchdog_after_s", _number(0, strict=True)),
    },
    # Slurm accounts as tenants with GPU quotas (Astraea; docs/admin.md, "Tenants and quotas").
    "tenants": {
        "quotas_from": ("quotas_from", _quotas_from),
        "quota": ("tenant_quotas", _quota_table),
    },
    # Fault injection for crash tests only (EnactSettings.failpoint): never in production.
    "testing": {
        "failpoint": ("failpoint", _failpoint),
    },
}

# Keys of earlier versions, still read: slurm.partition (one name) became slurm.partitions.
OLD_KEYS: dict[str, dict[str, tuple[str, _Parser]]] = {
    "slurm": {"partition": ("partitions", _one_name)},
}
