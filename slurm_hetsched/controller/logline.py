"""One `key=value` log line per round, easy to grep and to feed to log tools."""

from __future__ import annotations

import logging
import sys
from typing import Any


def format_value(value: Any) -> str:
    """A value as logfmt writes it: None as '-', floats short, text quoted when needed."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e6 else f"{value:.0f}"
    text = str(value)
    if not text or any(c in text for c in ' "=\\\t\n\r'):
        # One record per line: a newline or carriage return in a value is written escaped.
        escaped = (
            text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
        )
        return f'"{escaped}"'
    return text


def format_kv(**fields: Any) -> str:
    """`round=3 moved=1 solve_s=0.0123 error="slurmctld down"`, in the order given."""
    return " ".join(f"{key}={format_value(value)}" for key, value in fields.items())


def setup_logging(level: str) -> None:
    """Log to stderr with a timestamp; calling it again only changes the level."""
    root = logging.getLogger()
    if not any(getattr(h, "_hetsched", False) for h in root.handlers):
        for handler in list(root.handlers):
            root.removeHandler(handler)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler._hetsched = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level.upper())
