"""The job spec parser: the documented example, defaults, time zones, every bound just inside
and just outside, hostile values, and every kind of error named by key in a short message."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from slurm_hetsched.core.jobspec import (
    CLASS_MAX,
    COPY_MAX,
    DUE_WITHIN_S,
    GPUS_MAX,
    JOB_KEY_MAX,
    MEM_GIB_MAX,
    SPEC_MAX,
    STEPS_MAX,
    TW_MAX,
    WEIGHT_MAX,
    WEIGHT_MIN,
    JobSpec,
    JobSpecError,
    check_job_key,
    is_managed,
    parse_job_spec,
    valid_job_key,
)

PARIS_WINTER = timezone(timedelta(hours=1))
NOW_S = datetime(2026, 6, 1, tzinfo=UTC).timestamp()
MESSAGE_MAX = 180  # admin comments: short, single-line (the unknown-key one lists every key)


def parse(comment: str, now_s: float = NOW_S) -> JobSpec:
    return parse_job_spec(comment, local_tz=UTC, now_s=now_s)


def refused(comment: str) -> str:
    """The message of the JobSpecError that `comment` raises, checked short and single-line."""
    with pytest.raises(JobSpecError) as info:
        parse(comment)
    message = str(info.value)
    assert len(message) <= MESSAGE_MAX and "\n" not in message, message
    return message


def iso(when_s: float) -> str:
    return datetime.fromtimestamp(when_s, UTC).isoformat()


def test_the_documented_example_parses() -> None:
    spec = parse(
        "hetsched:class=ResNet-50 (batch size 64);steps=20000;weight=1;due=2026-12-01T12:00Z;"
        "tw=0.01"
    )
    assert spec.job_class == "ResNet-50 (batch size 64)"
    assert spec.steps == 20000
    assert spec.weight == 1.0
    assert spec.due_s == datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp()
    assert spec.tardiness_weight == 0.01
    assert spec.gpus is None and spec.key is None and spec.copy == 0 and spec.mem_gib is None


def test_defaults_and_spaces_and_trailing_separator() -> None:
    spec = parse("  hetsched: class = LM (batch size 20) ; steps=5; ")
    assert (spec.job_class, spec.steps, spec.weight, spec.tardiness_weight) == (
        "LM (batch size 20)",
        5,
        1.0,
        0.0,
    )


def test_a_due_date_without_offset_is_in_the_given_local_time() -> None:
    local = parse_job_spec(
        "hetsched:class=A;due=2026-12-01T13:00", local_tz=PARIS_WINTER, now_s=NOW_S
    )
    utc = parse_job_spec(
        "hetsched:class=A;due=2026-12-01T12:00Z", local_tz=PARIS_WINTER, now_s=NOW_S
    )
    assert local.due_s == utc.due_s


def test_key_and_copy_are_read() -> None:
    spec = parse("hetsched:class=A;key=run-7.b_2+x;copy=3")
    assert (spec.key, spec.copy) == ("run-7.b_2+x", 3)


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
        ("hetsched:class=A;mem=40GB", "mem='40GB'"),
        ("hetsched:class=A;mem=0", "mem='0'"),
        ("hetsched:class=A;mem=1;mem=2", "given twice"),
        ("hetsched:class=A;oops", "'oops' is not key=value"),
        ("my own comment", "does not start with"),
    ],
)
def test_bad_specs_are_named(comment: str, message: str) -> None:
    assert message in refused(comment)


# ----------------------------------------------------------------------------------------------
# Bounds: just inside is accepted with its value, just outside is refused with the range


@pytest.mark.parametrize(
    ("pair", "field", "value"),
    [
        ("steps=1", "steps", 1),
        (f"steps={STEPS_MAX}", "steps", STEPS_MAX),
        ("steps=0000000000001", "steps", 1),  # 13 characters, as many as STEPS_MAX
        ("weight=1e-3", "weight", WEIGHT_MIN),
        ("weight=0.001", "weight", WEIGHT_MIN),
        ("weight=1000", "weight", WEIGHT_MAX),
        ("weight=+1E3", "weight", WEIGHT_MAX),
        ("weight=.5", "weight", 0.5),
        ("weight=2.", "weight", 2.0),
        ("tw=0", "tardiness_weight", 0.0),
        ("tw=+0.0e0", "tardiness_weight", 0.0),
        ("tw=1e3", "tardiness_weight", TW_MAX),
        ("gpus=1", "gpus", 1),
        (f"gpus={GPUS_MAX}", "gpus", GPUS_MAX),
        ("copy=0", "copy", 0),
        (f"copy={COPY_MAX}", "copy", COPY_MAX),
        ("key=a", "key", "a"),
        (f"key={'k' * JOB_KEY_MAX}", "key", "k" * JOB_KEY_MAX),
        ("key=a..b", "key", "a..b"),
        ("key=123_4", "key", "123_4"),
        ("mem=40", "mem_gib", 40.0),
        ("mem=12.5", "mem_gib", 12.5),
        ("mem=40G", "mem_gib", 40.0),
        ("mem=40GiB", "mem_gib", 40.0),
        ("mem= 7.25GiB ", "mem_gib", 7.25),
        ("mem=.5G", "mem_gib", 0.5),
        ("mem=1e-3", "mem_gib", 1e-3),
        ("mem=+2E1G", "mem_gib", 20.0),
        (f"mem={MEM_GIB_MAX:g}", "mem_gib", MEM_GIB_MAX),
        (f"mem={MEM_GIB_MAX:g}GiB", "mem_gib", MEM_GIB_MAX),
        ("mem=4096.0", "mem_gib", MEM_GIB_MAX),
    ],
)
def test_values_at_the_bounds_are_accepted(pair: str, field: str, value: object) -> None:
    assert getattr(parse(f"hetsched:class=A;{pair}"), field) == value


def test_class_at_its_bounds_is_accepted() -> None:
    assert parse("hetsched:class=x").job_class == "x"
    assert parse(f"hetsched:class={'c' * CLASS_MAX}").job_class == "c" * CLASS_MAX
    assert parse("hetsched:class=Transformer (batch size 64) é").job_class.endswith("é")


def test_due_dates_ten_years_either_side_are_accepted() -> None:
    for due_s in (NOW_S - DUE_WITHIN_S, NOW_S + DUE_WITHIN_S):
        assert parse(f"hetsched:class=A;due={iso(due_s)}").due_s == due_s


@pytest.mark.parametrize(
    ("pair", "expected"),
    [
        ("steps=0", "from 1 to 1000000000000"),
        (f"steps={STEPS_MAX + 1}", "from 1 to 1000000000000"),
        ("steps=00000000000001", "from 1 to 1000000000000"),  # 14 characters
        ("steps=" + "9" * 300, "from 1 to 1000000000000"),
        ("steps=1e3", "whole number"),
        ("steps=+5", "whole number"),
        ("steps=5.0", "whole number"),
        ("steps=\u0661\u0662", "whole number"),  # Arabic-Indic 12: '١٢'.isdigit() is True
        ("steps=\uff11\uff12", "whole number"),  # fullwidth 12
        ("weight=0.000999", "from 0.001 to 1000"),
        ("weight=1000.0001", "from 0.001 to 1000"),
        ("weight=0", "from 0.001 to 1000"),
        ("weight=1e308", "from 0.001 to 1000"),
        ("weight=1e999", "from 0.001 to 1000"),  # inf after float()
        ("weight=1e-400", "from 0.001 to 1000"),  # 0 after float()
        ("weight=nan", "from 0.001 to 1000"),
        ("weight=inf", "from 0.001 to 1000"),
        ("weight=-inf", "from 0.001 to 1000"),
        ("weight=Infinity", "from 0.001 to 1000"),
        ("weight=1_000", "from 0.001 to 1000"),
        ("weight=0x10", "from 0.001 to 1000"),
        ("weight=\u0661", "from 0.001 to 1000"),
        ("weight=1e", "from 0.001 to 1000"),
        ("weight=.", "from 0.001 to 1000"),
        ("weight=", "from 0.001 to 1000"),
        ("tw=-0", "from 0 to 1000"),
        ("tw=-0.0", "from 0 to 1000"),
        ("tw=1000.0000001", "from 0 to 1000"),
        ("tw=1e308", "from 0 to 1000"),
        ("gpus=0", "from 1 to 1024"),
        (f"gpus={GPUS_MAX + 1}", "from 1 to 1024"),
        ("gpus=99999999999999999999", "from 1 to 1024"),
        ("gpus=3-2", "N-M for an elastic job"),
        ("gpus=2-2", "N-M for an elastic job"),
        ("gpus=-3", "N-M for an elastic job"),
        ("gpus=2-", "N-M for an elastic job"),
        ("gpus=2-3-4", "N-M for an elastic job"),
        ("gpus=0-2", "N-M for an elastic job"),
        ("gpus=1-17", "at most 16 sizes"),
        (f"gpus=1-{GPUS_MAX + 1}", "N-M for an elastic job"),
        ("copy=-1", "from 0 to 1023"),
        (f"copy={COPY_MAX + 1}", "from 0 to 1023"),
        ("copy=", "from 0 to 1023"),
        ("key=", "1 to 64 characters"),
        ("key=.", "not starting with '.'"),
        ("key=..", "not starting with '.'"),
        ("key=.hidden", "not starting with '.'"),
        ("key=a/b", "A-Z a-z 0-9 . _ + -"),
        ("key=../../etc/passwd", "A-Z a-z 0-9 . _ + -"),
        ("key=a b", "A-Z a-z 0-9 . _ + -"),
        ("key=caf\u00e9", "A-Z a-z 0-9 . _ + -"),
        ("key=a\\b", "A-Z a-z 0-9 . _ + -"),
        (f"key={'k' * (JOB_KEY_MAX + 1)}", "1 to 64 characters"),
        ("due=2026-13-01", "ISO 8601"),
        ("due=\u0662\u0660\u0662\u0666-01-01", "ISO 8601"),
        ("due=0001-01-01T00:00+01:00", "within 10 years"),
        ("due=9999-12-31T23:59:59.999999-23:59", "within 10 years"),
        ("due=1970-01-01T00:00Z", "within 10 years"),
        ("mem=0", "a number > 0 and <= 4096"),
        ("mem=0G", "a number > 0 and <= 4096"),
        ("mem=0.0", "a number > 0 and <= 4096"),
        ("mem=1e-400", "a number > 0 and <= 4096"),  # 0 after float()
        ("mem=-1", "a number > 0 and <= 4096"),
        ("mem=-0", "a number > 0 and <= 4096"),
        ("mem=4096.0001", "a number > 0 and <= 4096"),
        ("mem=4097G", "a number > 0 and <= 4096"),
        ("mem=1e999", "a number > 0 and <= 4096"),
        ("mem=nan", "a number > 0 and <= 4096"),
        ("mem=inf", "a number > 0 and <= 4096"),
        ("mem=infG", "a number > 0 and <= 4096"),
        ("mem=", "a number > 0 and <= 4096"),
        ("mem=G", "a number > 0 and <= 4096"),
        ("mem=GiB", "a number > 0 and <= 4096"),
        ("mem=40 G", "e.g. 40, 12.5, 40G, 40GiB"),
        ("mem=40g", "e.g. 40, 12.5, 40G, 40GiB"),
        ("mem=40GB", "e.g. 40, 12.5, 40G, 40GiB"),
        ("mem=40Gib", "e.g. 40, 12.5, 40G, 40GiB"),
        ("mem=40M", "e.g. 40, 12.5, 40G, 40GiB"),
        ("mem=40GiBG", "e.g. 40, 12.5, 40G, 40GiB"),
        ("mem=40GG", "e.g. 40, 12.5, 40G, 40GiB"),
        ("mem=1_000", "e.g. 40, 12.5, 40G, 40GiB"),
        ("mem=0x10", "e.g. 40, 12.5, 40G, 40GiB"),
        ("mem=\u0664\u0660", "e.g. 40, 12.5, 40G, 40GiB"),  # Arabic-Indic 40
        ("mem=\uff14\uff10G", "e.g. 40, 12.5, 40G, 40GiB"),  # fullwidth 40
    ],
)
def test_values_outside_the_bounds_are_refused_with_the_range(pair: str, expected: str) -> None:
    key = pair.partition("=")[0]
    message = refused(f"hetsched:class=A;{pair}")
    assert message.startswith(f"{key}=") and expected in message


def test_due_dates_just_beyond_ten_years_are_refused() -> None:
    for due_s in (NOW_S - DUE_WITHIN_S - 1, NOW_S + DUE_WITHIN_S + 1):
        assert "within 10 years" in refused(f"hetsched:class=A;due={iso(due_s)}")


@pytest.mark.parametrize(
    "value",
    ["", "a\x00b", "tab\there", "bell\x07", "del\x7f", "nl\u2028x", "rtl\u202eoverride"],
)
def test_a_class_with_control_characters_or_empty_is_refused(value: str) -> None:
    assert "printable characters" in refused(f"hetsched:class={value};steps=1")


def test_an_overlong_class_is_refused() -> None:
    assert f"1 to {CLASS_MAX}" in refused(f"hetsched:class={'c' * (CLASS_MAX + 1)}")


def test_the_whole_spec_is_bounded() -> None:
    head = "hetsched:class="
    assert parse(head + "c" * 100 + ";" * (SPEC_MAX - len(head) - 100)).job_class == "c" * 100
    message = refused(head + "c" * 100 + ";" * (SPEC_MAX - len(head) - 99))
    assert message == f"spec is {SPEC_MAX + 1} characters long; at most {SPEC_MAX}"


# ----------------------------------------------------------------------------------------------
# Messages: a hostile value may be megabytes; never echo more than ~40 characters of it


@pytest.mark.parametrize(
    "pair",
    [
        "steps=" + "9" * 1000,
        "weight=" + "1" * 1000,
        "key=" + "k" * 1000,
        "due=" + "2" * 1000,
        "gpus=" + "\x00" * 1000,
        "mem=" + "4" * 1000 + "G",
        "class=" + "\x01" * 1000,
        "x" * 1000 + "=1",
        "\U0001f600" * 300 + "=1",
        "y" * 1000,
    ],
)
def test_messages_show_at_most_forty_characters_of_the_value(pair: str) -> None:
    message = refused(f"hetsched:{'class=A;' if not pair.startswith('class') else ''}{pair}")
    hostile = max(pair.split("="), key=len)
    assert repr(hostile)[1:42] not in message and "..." in message, message


def test_a_megabyte_comment_is_refused_by_its_length() -> None:
    assert "at most 1024" in refused("hetsched:class=A;steps=" + "9" * 2**20)


# ----------------------------------------------------------------------------------------------
# The job key, for other modules


def test_valid_job_key() -> None:
    assert valid_job_key("123_4") and valid_job_key("a.b") and valid_job_key("-x+y")
    for bad in ("", ".", "..", ".x", "a/b", "/", "a b", "k" * 65, "a\n", "\u0661"):
        assert not valid_job_key(bad), bad


def test_check_job_key_returns_the_key_or_names_what_and_the_rule() -> None:
    assert check_job_key("job-1") == "job-1"
    with pytest.raises(JobSpecError) as info:
        check_job_key("../" * 100, what="HETSCHED_JOB_KEY")
    message = str(info.value)
    assert message.startswith("HETSCHED_JOB_KEY='../../")
    assert "1 to 64 characters of A-Z a-z 0-9 . _ + -" in message
    assert len(message) <= MESSAGE_MAX and message.count("../") <= 13


def test_is_managed_only_for_hetsched_comments() -> None:
    assert is_managed("hetsched:class=A")
    assert is_managed("  hetsched:broken")
    assert not is_managed("")
    assert not is_managed(None)
    assert not is_managed("training run 3")


def test_an_elastic_job_names_its_smallest_and_largest_gpu_count() -> None:
    spec = parse("hetsched:class=A;gpus=2-3")
    assert (spec.gpus, spec.gpus_max) == (2, 3)
    assert parse("hetsched:class=A;gpus=1-16").gpus_max == 16
    assert parse("hetsched:class=A;gpus=2").gpus_max is None


def test_preempt_says_whether_the_job_can_be_checkpointed() -> None:
    assert parse("hetsched:class=c").preemptible
    assert parse("hetsched:class=c;preempt=yes").preemptible
    assert not parse("hetsched:class=c;preempt=NO").preemptible
    with pytest.raises(JobSpecError, match="preempt='maybe': expected yes or no"):
        parse("hetsched:class=c;preempt=maybe")
