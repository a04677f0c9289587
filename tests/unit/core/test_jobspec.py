"""The job spec parser: the documented example, defaults, time zones, and every kind of error
named by key."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from slurm_hetsched.core.jobspec import JobSpecError, is_managed, parse_job_spec

PARIS_WINTER = timezone(timedelta(hours=1))


def test_the_documented_example_parses() -> None:
    spec = parse_job_spec(
        "hetsched:class=ResNet-50 (batch size 64);steps=20000;weight=1;due=2026-12-01T12:00Z;"
        "tw=0.01",
        local_tz=UTC,
    )
    assert spec.job_class == "ResNet-50 (batch size 64)"
    assert spec.steps == 20000
    assert spec.weight == 1.0
    assert spec.due_s == datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp()
    assert spec.tardiness_weight == 0.01
    assert spec.gpus is None and spec.key is None


def test_defaults_and_spaces_and_trailing_separator() -> None:
    spec = parse_job_spec("  hetsched: class = LM (batch size 20) ; steps=5; ", local_tz=UTC)
    assert (spec.job_class, spec.steps, spec.weight, spec.tardiness_weight) == (
        "LM (batch size 20)",
        5,
        1.0,
        0.0,
    )


def test_a_due_date_without_offset_is_in_the_given_local_time() -> None:
    local = parse_job_spec("hetsched:class=A;due=2026-12-01T13:00", local_tz=PARIS_WINTER)
    utc = parse_job_spec("hetsched:class=A;due=2026-12-01T12:00Z", local_tz=PARIS_WINTER)
    assert local.due_s == utc.due_s


@pytest.mark.parametrize(
    ("comment", "message"),
    [
        ("hetsched:steps=10", "missing class"),
        ("hetsched:class=A;colour=red", "unknown key 'colour'"),
        ("hetsched:class=A;class=B", "given twice"),
        ("hetsched:class=A;steps=ten", "steps='ten'"),
        ("hetsched:class=A;steps=0", "steps='0'"),
        ("hetsched:class=A;weight=-1", "weight='-1'"),
        ("hetsched:class=A;weight=nan", "weight='nan'"),
        ("hetsched:class=A;tw=-0.5", "tw='-0.5'"),
        ("hetsched:class=A;due=tomorrow", "due='tomorrow'"),
        ("hetsched:class=A;gpus=two", "gpus='two'"),
        ("hetsched:class=A;oops", "'oops' is not key=value"),
        ("my own comment", "does not start with"),
    ],
)
def test_bad_specs_are_named(comment: str, message: str) -> None:
    with pytest.raises(JobSpecError, match=message):
        parse_job_spec(comment, local_tz=UTC)


def test_is_managed_only_for_hetsched_comments() -> None:
    assert is_managed("hetsched:class=A")
    assert is_managed("  hetsched:broken")
    assert not is_managed("")
    assert not is_managed(None)
    assert not is_managed("training run 3")
