"""Flag values -> checked plain values; a bad one raises ConfigError naming the flag."""

from __future__ import annotations

from collections.abc import Sequence

from slurm_hetsched.errors import ConfigError


def number_pair(text: str, flag: str) -> tuple[float, float]:
    parts = text.split(",")
    try:
        a, b = (float(x) for x in parts)
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected two numbers A,B") from None
    return a, b


def positive_seconds(value: float, flag: str) -> float:
    if not value > 0:
        raise ConfigError(f"{flag} {value}: expected a number of seconds > 0")
    return value


def positive_count(value: int | None, flag: str) -> int | None:
    if value is not None and value < 1:
        raise ConfigError(f"{flag} must be >= 1, got {value}")
    return value


def non_negative_seconds(value: float, flag: str) -> float:
    if not value >= 0:
        raise ConfigError(f"{flag} {value}: expected a number of seconds >= 0")
    return value


def parse_policy_options(items: Sequence[str]) -> dict[str, str]:
    """KEY=VALUE strings -> {key: value}; the policy checks and converts each value."""
    options: dict[str, str] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"--policy-option {item!r}: expected KEY=VALUE, e.g. energy_slack=0.1"
            )
        options[key.strip()] = raw.strip()
    return options
