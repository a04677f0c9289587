"""A trace job's utility (core/utility.py): the JSONL and CSV fields `utility`, `umax`,
`target_s` and `sharp` (sim/trace_records.py), read by the job spec's rules and bounds, written
back, and carried to the core's Job."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_hetsched.core.jobspec import (
    SHARP_MAX,
    TARGET_MAX_S,
    UMAX_MAX,
    JobSpecError,
    parse_job_spec,
)
from slurm_hetsched.core.utility import DEFAULT_MAX_UTILITY, Utility, default_utility
from slurm_hetsched.errors import TraceError
from slurm_hetsched.sim.traces import (
    TraceJob,
    format_trace,
    parse_csv,
    parse_jsonl,
    parse_trace,
    read_trace,
    write_trace,
)

LINE = '{{"arrival_s": 10, "class": "A3C", "steps": 5{extra}}}'


def one(extra: str) -> TraceJob:
    (record,) = parse_jsonl(LINE.format(extra=extra))
    return record


def test_the_fields_give_each_shape_and_reach_the_job() -> None:
    sigmoid = one(', "utility": "sigmoid", "umax": 50, "target_s": 3600, "sharp": 2')
    assert sigmoid.utility == Utility("sigmoid", 50.0, 3600.0, 2.0)
    assert sigmoid.to_job().utility == sigmoid.utility
    assert sigmoid.to_job().the_utility() == sigmoid.utility
    assert one(', "utility": "linear", "target_s": 60').utility == Utility("linear", 100.0, 60.0)
    # A deadline without target_s is the due date; sharp defaults to 1 as in the job spec.
    deadline = one(', "utility": "deadline", "due_s": 500')
    assert deadline.utility == Utility("deadline", 100.0, None, 1.0, due_s=500.0)
    assert deadline.utility.value(500.0, 10.0) == 100.0 and deadline.utility.value(501, 10) == 0


def test_umax_alone_keeps_the_default_shape_with_that_maximum() -> None:
    late = one(', "umax": 20, "due_s": 100, "tardiness_weight": 0.5')
    assert late.utility == default_utility(100.0, 0.5, 20.0)
    assert one(', "umax": 7').utility == Utility("flat", 7.0)
    # Without any of the four, no utility of its own: the default, from the due date.
    plain = one(', "due_s": 100, "tardiness_weight": 0.5')
    assert plain.utility is None and plain.to_job().utility is None
    assert plain.the_utility() == default_utility(100.0, 0.5)


def test_csv_reads_the_same_fields_and_empty_cells_are_none() -> None:
    text = (
        "arrival_s,class,steps,utility,umax,target_s,sharp\n"
        "10,A3C,5, sigmoid ,50,3600,2\n"
        "10,A3C,5,,,,\n"
    )
    first, second = parse_csv(text)
    assert first.utility == Utility("sigmoid", 50.0, 3600.0, 2.0) and second.utility is None


def utility_trace() -> tuple[TraceJob, ...]:
    base = TraceJob("s", 10.0, "A3C", 1, 5)
    return (
        dataclasses.replace(base, utility=Utility("sigmoid", 50.0, 3600.0, 2.0)),
        dataclasses.replace(base, job_id="l", utility=Utility("linear", 1e6, TARGET_MAX_S)),
        dataclasses.replace(
            base, job_id="d", due_s=900.0, utility=Utility("deadline", 3.5, due_s=900.0)
        ),
        dataclasses.replace(base, job_id="t", utility=Utility("deadline", 3.5, target_s=1.0)),
        dataclasses.replace(
            base,
            job_id="u",
            due_s=900.0,
            tardiness_weight=0.25,
            utility=default_utility(900.0, 0.25, 12.0),
        ),
        dataclasses.replace(base, job_id="f", utility=Utility("flat", DEFAULT_MAX_UTILITY)),
        dataclasses.replace(base, job_id="none"),
    )


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_write_then_read_gives_the_utilities_back(tmp_path: Path, suffix: str) -> None:
    trace = utility_trace()
    path = tmp_path / f"t{suffix}"
    write_trace(path, trace)
    back = read_trace(path)
    assert back == trace
    assert [job.utility for job in back] == [job.utility for job in trace]


def test_the_writer_puts_umax_with_every_utility_and_nothing_without() -> None:
    text = format_trace(utility_trace(), "jsonl").splitlines()
    assert text[0].endswith('"utility": "sigmoid", "umax": 50.0, "target_s": 3600.0, "sharp": 2.0}')
    assert text[4].endswith('"utility": null, "umax": 12.0, "target_s": null, "sharp": null}')
    assert text[6].endswith('"utility": null, "umax": null, "target_s": null, "sharp": null}')
    csv_rows = format_trace(utility_trace(), "csv").splitlines()
    assert csv_rows[0].endswith(",utility,umax,target_s,sharp")
    assert csv_rows[1].endswith(",sigmoid,50.0,3600.0,2.0")
    assert csv_rows[7].endswith(",,,,")


def test_a_utility_takes_the_jobs_due_date_or_is_refused() -> None:
    # A sigmoid's value does not read the due date: it takes the job's.
    job = TraceJob("a", 0.0, "A3C", 1, 5, due_s=50.0, utility=Utility("sigmoid", 5.0, 60.0))
    assert job.utility == Utility("sigmoid", 5.0, 60.0, due_s=50.0)
    # A tardiness utility with another due date, or a linear one with a sharpness, has no
    # fields that would give it back.
    with pytest.raises(TraceError, match=r"trace \(job 'b'\): utility is .*tardiness.*due_s"):
        TraceJob("b", 0.0, "A3C", 1, 5, due_s=50.0, utility=default_utility(60.0, 0.0))
    with pytest.raises(TraceError, match=r"job 'c'.*utility is .*linear"):
        TraceJob("c", 0.0, "A3C", 1, 5, utility=Utility("linear", 5.0, 60.0, 2.0))
    with pytest.raises(TraceError, match=r"job 'd'.*umax is 0.0; expected a number above 0"):
        TraceJob("d", 0.0, "A3C", 1, 5, utility=Utility("sigmoid", 0.0, 60.0))


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (', "utility": "cubic", "target_s": 60', "utility is 'cubic'; expected one of sigmoid"),
        (', "utility": "tardiness"', "utility is 'tardiness'; expected one of sigmoid"),
        (', "utility": 3, "target_s": 60', "utility is 3; expected one of sigmoid"),
        (', "umax": -1', "umax is -1.0; expected a number above 0 up to 1e\\+06"),
        (', "umax": 0', "umax is 0.0; expected a number above 0"),
        (', "umax": 1000000.5', "umax is 1000000.5"),
        (', "umax": "x"', "umax is 'x'; expected a number"),
        (', "umax": true', "umax is True; expected a number"),
        (', "utility": "linear", "target_s": 4e8', "target_s is 400000000.0; expected seconds"),
        (', "utility": "linear", "target_s": 0', "target_s is 0.0; expected seconds"),
        (', "utility": "linear"', "utility is 'linear' without target_s; expected target_s"),
        (', "utility": "deadline"', "utility is 'deadline' without target_s; expected target_s or"),
        (', "target_s": 60', "target_s is 60.0 without utility; expected it only with utility"),
        (', "sharp": 2', "sharp is 2.0 without utility"),
        (', "utility": "linear", "target_s": 60, "sharp": 1', "sharp is 1.0 with utility linear"),
        (', "utility": "sigmoid", "target_s": 60, "sharp": 3600.5', "sharp is 3600.5; expected"),
        (', "utility": "sigmoid", "target_s": 60, "sharp": -1', "sharp is -1.0; expected"),
    ],
)
def test_a_bad_utility_field_is_refused_naming_the_line(extra: str, expected: str) -> None:
    with pytest.raises(TraceError, match=f"^<string>, line 1: {expected}"):
        one(extra)


def test_a_bad_utility_cell_in_csv_names_its_line() -> None:
    text = "arrival_s,class,steps,utility,target_s\n0,A3C,5,linear,60\n0,A3C,5,linear,-5\n"
    with pytest.raises(TraceError, match=r"^t\.csv, line 3: target_s is -5\.0"):
        parse_csv(text, source="t.csv")


@pytest.mark.parametrize(
    "fields",
    [
        {"utility": "sigmoid", "umax": 50, "target": 3600, "sharp": 2},
        {"utility": "sigmoid", "umax": UMAX_MAX, "target": TARGET_MAX_S, "sharp": SHARP_MAX},
        {"utility": "sigmoid", "target": 1, "sharp": 0},
        {"utility": "sigmoid"},
        {"utility": "linear", "target": 60},
        {"utility": "linear", "target": 60, "sharp": 1},
        {"utility": "deadline", "target": 60, "umax": 2},
        {"utility": "deadline"},
        {"utility": "flat", "target": 60},
        {"umax": 7},
        {"umax": 0},
        {"umax": UMAX_MAX * 1.01},
        {"target": 60},
        {"sharp": 1},
        {"utility": "linear", "target": TARGET_MAX_S * 1.01},
        {"utility": "sigmoid", "target": 60, "sharp": SHARP_MAX * 1.01},
    ],
)
def test_a_record_and_a_job_spec_with_the_same_fields_agree(fields: dict[str, object]) -> None:
    spec = "hetsched:class=A3C" + "".join(f";{k}={v}" for k, v in fields.items())
    try:
        expected: Utility | None = parse_job_spec(spec, local_tz=UTC, now_s=0.0).utility
    except JobSpecError:
        expected = None
    record = {"arrival_s": 0, "class": "A3C", "steps": 5}
    record.update({("target_s" if k == "target" else k): v for k, v in fields.items()})
    try:
        (job,) = parse_trace(json.dumps(record), "jsonl")
    except TraceError:
        assert expected is None, spec
        return
    assert job.the_utility() == expected, spec


kinds = st.sampled_from(["sigmoid", "linear", "deadline"])
umax = st.floats(min_value=1e-300, max_value=UMAX_MAX, allow_nan=False)
target = st.floats(min_value=1e-9, max_value=TARGET_MAX_S, allow_nan=False)
sharp = st.floats(min_value=0, max_value=SHARP_MAX, allow_nan=False)


@st.composite
def utility_jobs(draw: st.DrawFn) -> TraceJob:
    due = draw(st.none() | st.floats(min_value=10.0, max_value=1e9, allow_nan=False))
    kind = draw(st.none() | kinds)
    if kind is None:
        utility = default_utility(due, 0.5, draw(umax))
    else:
        target_s = draw(target) if kind != "deadline" or due is None else draw(st.none() | target)
        steepness = draw(sharp) if kind == "sigmoid" else 1.0
        utility = Utility(kind, draw(umax), target_s, steepness, due_s=due)
    return TraceJob("j", 10.0, "A3C", 1, 5, due_s=due, tardiness_weight=0.5, utility=utility)


@settings(max_examples=60, deadline=None)
@given(job=utility_jobs())
def test_round_trip_property(job: TraceJob) -> None:
    for fmt in ("jsonl", "csv"):
        assert parse_trace(format_trace((job,), fmt), fmt) == (job,)
