"""Per-policy options: what each policy class accepts beyond its defaults, and their checks.

A policy class declares `options: ClassVar[Mapping[str, PolicyOption]]`, name -> option; each
name is also a keyword argument of the class's constructor. `parse_options` checks a mapping of
given values against that declaration (unknown names and bad values raise ConfigError listing
the valid ones) and returns the keyword arguments. Values may be given as strings ("0.1",
"true"), as a command line passes them.

No I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from slurm_hetsched.core.round_options import DEFAULT_RESTART_S
from slurm_hetsched.core.utility import UMAX_MAX
from slurm_hetsched.errors import ConfigError

OptionValue = float | bool | str


@dataclass(frozen=True, slots=True)
class PolicyOption:
    """One option a policy accepts.

    Attributes:
        description: one line: what it does and its valid values.
        default: the value when not given (the policy exactly as without the option).
        parse: the given value -> the checked value; raises ValueError saying what is wrong.
    """

    description: str
    default: OptionValue
    parse: Callable[[object], OptionValue]


NO_OPTIONS: Mapping[str, PolicyOption] = MappingProxyType({})


def _number(value: object) -> float:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{value!r} is not a number")
    return float(value)


def parse_slack(value: object) -> float:
    """A fraction in [0, 1): 1 would allow an objective of 0 (max-min: no GPU time at all)."""
    slack = _number(value)
    if not (math.isfinite(slack) and 0.0 <= slack < 1.0):
        raise ValueError(f"{value!r} must be a fraction >= 0 and < 1")
    return slack


def parse_flag(value: object) -> bool:
    """true/false, also as the strings "true", "false", "1", "0", "yes", "no"."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{value!r} must be true or false")


def parse_count(value: object) -> int:
    """A whole number >= 1."""
    number = _number(value)
    if not (math.isfinite(number) and number.is_integer() and number >= 1):
        raise ValueError(f"{value!r} must be a whole number >= 1")
    return int(number)


def parse_seed(value: object) -> int:
    """A whole number >= 0."""
    number = _number(value)
    if not (math.isfinite(number) and number.is_integer() and number >= 0):
        raise ValueError(f"{value!r} must be a whole number >= 0")
    return int(number)


def parse_non_negative(value: object) -> float:
    """A finite number >= 0."""
    number = _number(value)
    if not (math.isfinite(number) and number >= 0):
        raise ValueError(f"{value!r} must be a number >= 0")
    return number


def parse_choice(*choices: str) -> Callable[[object], str]:
    """A parser for one word of `choices` (case and surrounding blanks ignored)."""

    def parse(value: object) -> str:
        text = str(value).strip().lower()
        if text not in choices:
            raise ValueError(f"{value!r} must be one of {list(choices)}")
        return text

    return parse


def parse_fraction(value: object) -> float:
    """A number from 0 to 1."""
    number = _number(value)
    if not (math.isfinite(number) and 0 <= number <= 1):
        raise ValueError(f"{value!r} must be a number from 0 to 1")
    return number


ENERGY_SLACK = PolicyOption(
    description=(
        "fraction in [0, 1) of the policy's objective to give up for a lower energy cost per "
        "hour (0 = off; needs busy_w and idle_w for every GPU type)"
    ),
    default=0.0,
    parse=parse_slack,
)
ENERGY_OPTIONS: Mapping[str, PolicyOption] = MappingProxyType({"energy_slack": ENERGY_SLACK})


def describe(options: Mapping[str, PolicyOption]) -> str:
    """'name (default d): description; ...' or 'none', for error messages and listings."""
    if not options:
        return "none"
    return "; ".join(
        f"{name} (default {opt.default!r}): {opt.description}" for name, opt in options.items()
    )


def parse_options(
    policy: str, accepted: Mapping[str, PolicyOption], given: Mapping[str, object]
) -> dict[str, OptionValue]:
    """The checked keyword arguments for `given` option values.

    Raises:
        ConfigError: an option the policy does not accept, or a bad value; the message lists
            the options the policy accepts.
    """
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        raise ConfigError(
            f"policy {policy!r} has no option(s) {unknown}; its options are: {describe(accepted)}"
        )
    parsed: dict[str, OptionValue] = {}
    for name, value in given.items():
        try:
            parsed[name] = accepted[name].parse(value)
        except ValueError as exc:
            raise ConfigError(
                f"policy {policy!r}, option {name}: {exc}; {name}: {accepted[name].description}"
            ) from None
    return parsed


def checked(policy: str, accepted: Mapping[str, PolicyOption], name: str, value: object) -> float:
    """One numeric option as a constructor receives it, checked (ConfigError if bad)."""
    return float(parse_options(policy, accepted, {name: value})[name])


# The two options every utility-pricing policy (oasis, astraea) takes alike.
MAX_UTILITY_OPTION = PolicyOption(
    "the most any job's utility counts for (default 1e6, the spec's own bound)",
    UMAX_MAX,
    parse_non_negative,
)


def restart_option(what: str) -> PolicyOption:
    """`restart_s`: the seconds `what` (e.g. "a start or move") costs a job whose own
    estimate is unknown."""
    return PolicyOption(
        f"seconds {what} costs a job whose own estimate is unknown (default {DEFAULT_RESTART_S:g})",
        DEFAULT_RESTART_S,
        parse_non_negative,
    )
