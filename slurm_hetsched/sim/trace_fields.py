"""A trace's fields, from a text field or a JSON value, -> numbers; a bad one raises TraceError
naming the file, the line, the field and what was expected."""

from __future__ import annotations

import math
from typing import Any

from slurm_hetsched.errors import TraceError


def number_field(value: Any, key: str, here: str, expected: str = "a number") -> float:
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


def whole_field(value: Any, key: str, here: str, what: str) -> int:
    """A whole number (2, "2", 2.0 or "2.0"); the message names `what` was expected."""
    expected = f"a whole number of {what}"
    number = number_field(value, key, here, expected)
    if not number.is_integer():
        raise TraceError(f"{here}: {key} is {value!r}; expected {expected}")
    return int(number)
