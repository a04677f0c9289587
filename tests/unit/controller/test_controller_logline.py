"""The one key=value line per round (logfmt): values that need it are quoted and escaped, so a
line is always one record a log tool can split."""

from __future__ import annotations

import shlex

import pytest

from slurm_hetsched.controller.logline import format_kv, format_value


def test_the_documented_line() -> None:
    line = format_kv(round=3, moved=1, solve_s=0.0123, error="slurmctld down")
    assert line == 'round=3 moved=1 solve_s=0.0123 error="slurmctld down"'


def test_fields_keep_their_order() -> None:
    assert format_kv(b=1, a=2, c=3) == "b=1 a=2 c=3"
    assert format_kv() == ""


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "-"),
        (True, "1"),
        (False, "0"),
        (0, "0"),
        (42, "42"),
        (0.0, "0"),
        (0.123456, "0.1235"),
        (1.5, "1.5"),
        (12345.678, "1.235e+04"),
        (2_500_000.4, "2500000"),
        ("max_min_fairness_perf", "max_min_fairness_perf"),
        ("slurm-unavailable", "slurm-unavailable"),
        ("", '""'),
        ("two words", '"two words"'),
        ("a=b", '"a=b"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("tab\there", '"tab\there"'),
        ("line\nbreak", '"line\\nbreak"'),
        ("carriage\rreturn", '"carriage\\rreturn"'),
    ],
)
def test_values(value: object, text: str) -> None:
    assert format_value(value) == text


def test_a_line_is_one_line_and_splits_back_into_its_fields() -> None:
    error = 'cannot read Slurm\'s queue: `squeue --json` exited with 1: "down"\r\nretry'
    line = format_kv(round=7, skipped="slurm-unavailable", error=error, policy="fifo")
    assert "\n" not in line and "\r" not in line
    fields = dict(part.split("=", 1) for part in shlex.split(line))
    assert fields["round"] == "7" and fields["policy"] == "fifo"
    assert fields["skipped"] == "slurm-unavailable"
    assert fields["error"] == error.replace("\r", "\\r").replace("\n", "\\n")
