"""sim/traces.py: Gavel's shipped traces, our JSONL/CSV format, and errors that say where."""

from __future__ import annotations

import hashlib
import math
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_hetsched.core.jobspec import MEM_GIB_MAX
from slurm_hetsched.core.model import InvalidProblemError, Job
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.data_files import shipped_throughputs
from slurm_hetsched.errors import HetschedError, TraceError
from slurm_hetsched.sim.traces import (
    KEYS,
    SHIPPED_TRACES,
    TraceJob,
    format_trace,
    parse_csv,
    parse_gavel,
    parse_jsonl,
    parse_trace,
    read_shipped_trace,
    read_trace,
    to_jobs,
    trace_format,
    validate_trace,
    write_trace,
)

R50_128 = "ResNet-50 (batch size 128)"  # 0 steps/s on k80 at 2, 4 and 8 GPUs
GAVEL_LINE = (
    "ResNet-18 (batch size 32)\tpython3 main.py --data_dir=%s/cifar10 --batch_size 32\t"
    "image_classification/cifar10\t--num_steps\t1\t323429\t1\t1\t-1.000000\t6241"
)
# Job count, then (class, steps, num_gpus, arrival_s) of the first and the last job, copied by
# hand from the raw files.
SHIPPED = {
    "artifact_evaluation": (15, ("ResNet-50 (batch size 64)", 2931, 1, 0.0), ("A3C", 8857, 1, 0.0)),
    "max_min_fairness": (
        96,
        ("ResNet-18 (batch size 128)", 925982, 4, 0.0),
        ("LM (batch size 40)", 297215, 1, 46317.0),
    ),
    "minimize_makespan": (
        100,
        ("Transformer (batch size 128)", 19605, 1, 0.0),
        ("LM (batch size 80)", 101663, 1, 0.0),
    ),
    "small_test": (
        20,
        ("Transformer (batch size 128)", 346, 2, 0.0),
        ("ResNet-18 (batch size 16)", 1817, 1, 0.0),
    ),
}
# md5 of the files in Gavel's repository (scheduler/traces/physical_cluster/): unmodified copies.
SHIPPED_MD5 = {
    "artifact_evaluation": "fc01632071d6d28b5ba535dd09ca399c",
    "max_min_fairness": "1fc1f008a9a87bf5d68899f83fc4768b",
    "minimize_makespan": "8b5cdb8754c1f75fac743cdd16d4a95e",
    "small_test": "ddd10e52cca558e0b82768682109276e",
}


@pytest.fixture(scope="module")
def table() -> ThroughputTable:
    return shipped_throughputs()


def raw_shipped(name: str) -> str:
    return (
        resources.files("slurm_hetsched")
        .joinpath("data", "traces", f"{name}.trace")
        .read_text("utf-8")
    )


def job(job_id: str = "0", **fields: object) -> TraceJob:
    values: dict[str, object] = {
        "arrival_s": 0.0,
        "job_class": "A3C",
        "num_gpus": 1,
        "total_steps": 100,
    }
    values.update(fields)
    return TraceJob(job_id=job_id, **values)


# ----------------------------------------------------------------------------------------------
# Gavel's shipped traces


def test_every_shipped_trace_is_tested() -> None:
    assert set(SHIPPED) == set(SHIPPED_TRACES)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_trace_parses(name: str, table: ThroughputTable) -> None:
    count, first, last = SHIPPED[name]
    trace = read_shipped_trace(name)
    assert len(trace) == count
    lines = raw_shipped(name).splitlines()
    assert len(lines) == count  # no line dropped
    for record, expected, line in ((trace[0], first, lines[0]), (trace[-1], last, lines[-1])):
        fields = line.split("\t")
        assert (record.job_class, record.total_steps, record.num_gpus, record.arrival_s) == expected
        assert record.job_class == fields[0]
        assert record.total_steps == int(fields[5])
        assert record.num_gpus == int(fields[6])
        assert record.weight == float(fields[7])
        assert record.arrival_s == float(fields[9])
        assert record.slo_s is None  # SLO -1.000000
        assert record.due_s is None and record.tardiness_weight == 0.0 and record.account == ""
    assert [j.job_id for j in trace] == [str(i) for i in range(count)]
    assert [j.line for j in trace] == list(range(1, count + 1))
    assert {j.job_class for j in trace} <= set(table.classes)
    validate_trace(trace, table, table.gpu_types)  # every job runs somewhere


@pytest.mark.parametrize("name", sorted(SHIPPED_MD5))
def test_shipped_traces_are_unmodified_copies(name: str) -> None:
    digest = hashlib.md5(raw_shipped(name).encode("utf-8")).hexdigest()
    assert digest == SHIPPED_MD5[name]


def test_max_min_fairness_trace_shape() -> None:
    trace = read_shipped_trace("max_min_fairness.trace")
    assert {n: sum(j.num_gpus == n for j in trace) for n in (1, 2, 4)} == {1: 59, 2: 19, 4: 18}
    arrivals = [j.arrival_s for j in trace]
    assert arrivals == sorted(arrivals)


def test_read_shipped_trace_unknown_name() -> None:
    with pytest.raises(TraceError, match=r"no shipped trace 'nope'.*small_test"):
        read_shipped_trace("nope")


def test_read_trace_from_file_uses_the_extension(tmp_path: Path) -> None:
    path = tmp_path / "small.trace"
    path.write_text(raw_shipped("small_test"))
    assert read_trace(path) == read_shipped_trace("small_test")
    copy = tmp_path / "small.txt"
    copy.write_text(raw_shipped("small_test"))
    with pytest.raises(TraceError, match=r"small\.txt.*extension '\.txt'"):
        read_trace(copy)
    assert read_trace(copy, "gavel") == read_shipped_trace("small_test")
    assert trace_format("x.JSONL") == "jsonl" and trace_format("x.csv") == "csv"
    with pytest.raises(TraceError, match="format 'tsv' unknown"):
        trace_format("x.csv", "tsv")
    with pytest.raises(TraceError, match="cannot read trace"):
        read_trace(tmp_path / "missing.csv")


def test_gavel_slo_is_a_multiple_of_the_duration_on_the_reference_type(
    table: ThroughputTable,
) -> None:
    line = GAVEL_LINE.replace("-1.000000", "2.0")
    with pytest.raises(TraceError, match=r"t\.trace, line 1: field 9 \(SLO\).*needs a throughput"):
        parse_gavel(line, source="t.trace")
    (record,) = parse_gavel(line, source="t.trace", table=table)
    rate = table.steps_per_s("ResNet-18 (batch size 32)", "v100", 1)
    assert record.slo_s == pytest.approx(2.0 * 323429 / rate)
    with pytest.raises(TraceError, match=r"line 1: field 9 \(SLO\) is 0\.0"):
        parse_gavel(GAVEL_LINE.replace("-1.000000", "0"), table=table)


# ----------------------------------------------------------------------------------------------
# Errors: file, line, what was expected


def gavel_error(text: str) -> str:
    with pytest.raises(TraceError) as info:
        parse_gavel(text, source="bad.trace")
    return str(info.value)


def test_gavel_too_few_fields() -> None:
    text = f"{GAVEL_LINE}\n{GAVEL_LINE}\nA3C\tpython3 main.py\t1\t100\n"
    message = gavel_error(text)
    assert message.startswith("bad.trace, line 3: 4 tab-separated fields; expected 10")
    assert "job_type, command" in message and "arrival_time" in message


def test_gavel_non_number_steps() -> None:
    bad = GAVEL_LINE.replace("\t323429\t", "\tlots\t")
    message = gavel_error(f"{GAVEL_LINE}\n{bad}\n")
    assert message == (
        "bad.trace, line 2: field 6 (total_steps) is 'lots'; expected a whole number of steps >= 1"
    )
    fractional = GAVEL_LINE.replace("\t323429\t", "\t12.5\t")
    assert "line 1: field 6 (total_steps) is '12.5'" in gavel_error(fractional)


def test_gavel_negative_gpus() -> None:
    bad = GAVEL_LINE.replace("\t323429\t1\t", "\t323429\t-2\t")
    message = gavel_error(f"\n{GAVEL_LINE}\n\n{bad}")  # blank lines still count
    assert message == ("bad.trace, line 4 (job '1'): num_gpus is -2; expected a whole number >= 1")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("\t1\t323429", "\tyes\t323429", "field 5 (needs_data_dir) is 'yes'; expected 0 or 1"),
        ("\t6241", "\tsoon", "field 10 (arrival_time) is 'soon'; expected seconds >= 0"),
        ("\t6241", "\t-5", "arrival_s is -5.0; expected seconds >= 0"),
        ("\t1\t-1.000000", "\tnan\t-1.000000", "field 8 (priority_weight) is 'nan'"),
        ("\t1\t-1.000000", "\t0\t-1.000000", "weight is 0.0; expected a number > 0"),
    ],
)
def test_gavel_bad_fields(old: str, new: str, expected: str) -> None:
    assert old in GAVEL_LINE
    assert expected in gavel_error(GAVEL_LINE.replace(old, new))


def test_empty_trace_is_an_error() -> None:
    with pytest.raises(TraceError, match=r"empty\.trace: no jobs"):
        parse_gavel("\n\n", source="empty.trace")
    with pytest.raises(TraceError, match=r"e\.csv: no header row"):
        parse_csv("", source="e.csv")
    with pytest.raises(TraceError, match=r"e\.csv: no jobs"):
        parse_csv("arrival_s,class,steps\n", source="e.csv")


JSONL_OK = '{"arrival_s": 0, "class": "A3C", "steps": 100}'


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"arrival_s": 0, "class": "A3C"', "line 2: not valid JSON"),
        ("[1, 2]", "line 2: a JSON list; expected an object"),
        ('{"arrival_s": 0, "class": "A3C"}', "line 2: missing key(s) ['steps']"),
        (
            '{"arrival_s": 0, "class": "A3C", "steps": 1, "gpus": 2}',
            "line 2: unknown key(s) ['gpus']; valid: ['id', 'arrival_s'",
        ),
        (
            '{"arrival_s": 0, "class": "A3C", "steps": "many"}',
            "line 2: steps is 'many'; expected a whole number of steps >= 1",
        ),
        (
            '{"arrival_s": 0, "class": "A3C", "steps": 10, "num_gpus": -1}',
            "line 2 (job '1'): num_gpus is -1; expected a whole number >= 1",
        ),
        ('{"arrival_s": 0, "class": "A3C", "steps": null}', "line 2: steps empty or null"),
        (
            '{"arrival_s": 5, "class": "A3C", "steps": 9, "due_s": 4}',
            "line 2 (job '1'): due_s is 4.0; expected none or seconds >= arrival_s (5.0)",
        ),
        ('{"arrival_s": 0, "class": "A3C", "steps": true}', "line 2: steps is True"),
        (
            '{"id": "0", "arrival_s": 0, "class": "A3C", "steps": 9}',
            "line 2 (job '0'): id '0' is also on line 1; expected unique ids",
        ),
    ],
)
def test_jsonl_errors(line: str, expected: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_jsonl(f"{JSONL_OK}\n{line}\n", source="jobs.jsonl")
    assert str(info.value).startswith("jobs.jsonl, ")
    assert expected in str(info.value)


CSV_HEADER = "id,arrival_s,class,num_gpus,steps"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"{CSV_HEADER}\na,0,A3C,1,100\nb,0,A3C,1\n", "line 3: 4 fields; expected 5"),
        (f"{CSV_HEADER}\na,0,A3C,1,100\nb,0,A3C,1,ten\n", "line 3: steps is 'ten'"),
        (f"{CSV_HEADER}\na,0,A3C,-4,100\n", "line 2 (job 'a'): num_gpus is -4"),
        (f"{CSV_HEADER}\na,0,A3C,1,\n", "line 2: steps empty or null"),
        ("id,arrival_s,class,steps,gpus\n", "line 1: unknown column(s) ['gpus']"),
        ("id,arrival_s,class\n", "line 1: missing column(s) ['steps']"),
        ("arrival_s,class,steps,steps\n", "line 1: column(s) ['steps'] given twice"),
        (f'{CSV_HEADER}\na,0,"A3C,1,100\n', "line 2: not valid CSV (unexpected end of data)"),
        (f'{CSV_HEADER}\n\n"a\nb",0,A3C,1,100\nc,0,A3C,0,1\n', "line 5 (job 'c'): num_gpus is 0"),
    ],
)
def test_csv_errors(text: str, expected: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_csv(text, source="jobs.csv")
    assert str(info.value).startswith("jobs.csv, line ")
    assert expected in str(info.value)


def test_errors_from_a_file_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(f"{CSV_HEADER}\n\na,0,A3C,1,100\nb,0,A3C,x,100\n")
    with pytest.raises(TraceError, match=rf"^{path}, line 4: num_gpus is 'x'"):
        read_trace(path)


def test_trace_error_is_a_hetsched_error() -> None:
    assert issubclass(TraceError, HetschedError) and issubclass(TraceError, ValueError)


# ----------------------------------------------------------------------------------------------
# Validation against the table and the cluster


def test_unknown_class_is_named_with_file_and_line(table: ThroughputTable) -> None:
    text = (
        f"{CSV_HEADER}\n"
        "a,0,A3C,1,100\n"
        "b,0,GPT-5 (batch size 1),1,100\n"
        "c,0,ResNet-50 (batch size 128),2,100\n"
        "d,0,A3C,16,100\n"
    )
    trace = parse_csv(text, source="jobs.csv")
    with pytest.raises(TraceError) as info:
        validate_trace(trace, table, ["k80"])
    message = str(info.value)
    assert message.startswith("3 of 4 jobs cannot run")
    assert "jobs.csv, line 3 (job 'b'): class 'GPT-5 (batch size 1)' is not in the throughput" in (
        message
    )
    assert (
        "jobs.csv, line 4 (job 'c'): class 'ResNet-50 (batch size 128)' on 2 GPU(s) cannot run "
        "on any of ['k80'] (the table has this class at 1, 2, 4, 8 GPU(s))" in message
    )
    assert "line 5 (job 'd'): class 'A3C' on 16 GPU(s) cannot run" in message
    assert "known classes: [" in message and "'A3C'" in message
    assert "(job 'a')" not in message
    validate_trace(trace[:1] + trace[2:3], table, ["k80", "v100"])  # v100 runs job c


def test_validation_lists_every_bad_job_up_to_a_limit(table: ThroughputTable) -> None:
    trace = tuple(job(str(i), job_class="nope") for i in range(25))
    with pytest.raises(TraceError) as info:
        validate_trace(trace, table, table.gpu_types)
    assert "25 of 25 jobs" in str(info.value)
    assert "(job '19')" in str(info.value) and "(job '20')" not in str(info.value)
    assert "... and 5 more" in str(info.value)


def test_validation_with_capacity(table: ThroughputTable) -> None:
    trace = (job("big", job_class=R50_128, num_gpus=4),)
    validate_trace(trace, table, ["k80", "v100"], capacity={"k80": 8, "v100": 4})
    with pytest.raises(TraceError, match=r"needs 4 GPUs of one type.*\(v100: 2\)"):
        validate_trace(trace, table, ["k80", "v100"], capacity={"k80": 8, "v100": 2})


def test_validation_rejects_a_gpu_type_the_table_lacks(table: ThroughputTable) -> None:
    with pytest.raises(InvalidProblemError, match="'a100' has no column"):
        validate_trace((job(),), table, ["a100"])


# ----------------------------------------------------------------------------------------------
# Our format: round trips


def sample_trace() -> tuple[TraceJob, ...]:
    return (
        job("0"),
        job(
            'job, "quoted" 1',
            arrival_s=12.345,
            job_class="ResNet-50 (batch size 64)",
            num_gpus=4,
            total_steps=20000,
            weight=2.5,
            account="team,a",
            due_s=86400.125,
            tardiness_weight=0.01,
            slo_s=3600.0,
        ),
        job("x", arrival_s=1e9, total_steps=1, weight=1e-3, due_s=1e9, slo_s=0.1),
    )


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_round_trip_through_files(tmp_path: Path, suffix: str) -> None:
    trace = sample_trace()
    path = tmp_path / f"t{suffix}"
    write_trace(path, trace)
    back = read_trace(path)
    assert back == trace
    first = 2 if suffix == ".csv" else 1  # after the header row
    assert [j.line for j in back] == [first, first + 1, first + 2]
    assert back[1].where == f"{path}, line {back[1].line} (job 'job, \"quoted\" 1')"


def test_round_trip_of_a_shipped_trace(table: ThroughputTable) -> None:
    trace = read_shipped_trace("max_min_fairness")
    for fmt in ("jsonl", "csv"):
        assert parse_trace(format_trace(trace, fmt), fmt) == trace


def test_jsonl_defaults_and_written_keys() -> None:
    (record,) = parse_jsonl('{"class": "A3C", "steps": 7, "arrival_s": 3, "due_s": null}')
    assert record == TraceJob("0", 3.0, "A3C", 1, 7)
    text = format_trace((record,), "jsonl")
    assert text.startswith('{"id": "0", "arrival_s": 3.0, "class": "A3C", "num_gpus": 1')
    assert format_trace((record,), "csv").splitlines()[0] == ",".join(KEYS)


def test_gavel_format_is_read_only(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="read only"):
        write_trace(tmp_path / "t.trace", sample_trace())


finite = st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False)
text_ = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp", "Zs")), max_size=12
)


@st.composite
def trace_jobs(draw: st.DrawFn) -> tuple[TraceJob, ...]:
    n = draw(st.integers(1, 5))
    jobs = []
    for i in range(n):
        arrival = draw(finite)
        due = draw(st.none() | finite.map(lambda d, a=arrival: a + d))
        num_gpus = draw(st.integers(1, 64))
        extra = draw(st.sets(st.integers(num_gpus + 1, 128), max_size=3))
        jobs.append(
            TraceJob(
                job_id=f"{i}{draw(text_)}",
                arrival_s=arrival,
                job_class=draw(text_.filter(bool)),
                num_gpus=num_gpus,
                total_steps=draw(st.integers(1, 10**12)),
                weight=draw(finite.filter(lambda w: w > 0)),
                account=draw(text_),
                due_s=None if due is None or not math.isfinite(due) else due,
                tardiness_weight=draw(finite),
                slo_s=draw(st.none() | finite.filter(lambda s: s > 0)),
                allowed_gpus=(num_gpus, *sorted(extra)) if extra else (),
                restart_s=draw(st.none() | st.floats(0, 86_400, allow_nan=False)),
                mem_gib=draw(st.none() | st.floats(1e-6, MEM_GIB_MAX, allow_nan=False)),
            )
        )
    return tuple(jobs)


@settings(max_examples=60, deadline=None)
@given(trace=trace_jobs())
def test_round_trip_property(trace: tuple[TraceJob, ...]) -> None:
    assert parse_jsonl(format_trace(trace, "jsonl")) == trace
    assert parse_csv(format_trace(trace, "csv")) == trace


# ----------------------------------------------------------------------------------------------
# Conversion to the core's Job


def test_to_job() -> None:
    (record,) = sample_trace()[1:2]
    converted = record.to_job()
    assert converted == Job(
        key='job, "quoted" 1',
        job_class="ResNet-50 (batch size 64)",
        num_gpus=4,
        steps_remaining=20000.0,
        total_steps=20000.0,
        weight=2.5,
        account="team,a",
        arrival_s=12.345,
        due_s=86400.125,
        tardiness_weight=0.01,
        slo_s=3600.0,
    )
    assert [j.key for j in to_jobs(read_shipped_trace("small_test"))] == [str(i) for i in range(20)]


# ----------------------------------------------------------------------------------------------
# mem_gib: the GPU memory one GPU of the job needs, as the job spec's mem=


def test_mem_gib_is_read_in_both_formats_and_reaches_the_job() -> None:
    (jsonl,) = parse_jsonl('{"arrival_s": 0, "class": "A3C", "steps": 5, "mem_gib": 13.5}')
    (row,) = parse_csv("arrival_s,class,steps,mem_gib\n0,A3C,5,13.5\n")
    assert jsonl == row and row.mem_gib == 13.5 and row.to_job().mem_gib == 13.5
    (absent,) = parse_csv("arrival_s,class,steps,mem_gib\n0,A3C,5,\n")
    assert absent.mem_gib is None and absent.to_job().mem_gib is None


@pytest.mark.parametrize("value", ["0", "-1", "4097", "1e999", '"lots"', "true"])
def test_a_mem_gib_out_of_bounds_is_refused_naming_the_line(value: str) -> None:
    with pytest.raises(TraceError, match=r"<string>, line 1.*mem_gib"):
        parse_jsonl(f'{{"arrival_s": 0, "class": "A3C", "steps": 5, "mem_gib": {value}}}')


# ----------------------------------------------------------------------------------------------
# allowed_gpus: the GPU counts a placement policy (ANDREAS) may choose from


def test_allowed_gpus_round_trip_in_both_formats(tmp_path: Path) -> None:
    trace = (
        TraceJob("a", 0.0, "A3C", 1, 10, allowed_gpus=(1, 2, 4)),
        TraceJob("b", 1.0, "A3C", 2, 10),  # () = its num_gpus only
    )
    jsonl = format_trace(trace, "jsonl")
    assert '"allowed_gpus": [1, 2, 4]' in jsonl.splitlines()[0]
    assert '"allowed_gpus": null' in jsonl.splitlines()[1]
    csv_text = format_trace(trace, "csv")
    # restart_s, mem_gib and the utility's four (utility, umax, target_s, sharp) empty
    assert csv_text.splitlines()[1].endswith(",1;2;4,,,,,,")
    assert csv_text.splitlines()[2].endswith(",,")
    for suffix in (".jsonl", ".csv"):
        write_trace(tmp_path / f"t{suffix}", trace)
        back = read_trace(tmp_path / f"t{suffix}")
        assert back == trace
        assert back[0].allowed_gpus == (1, 2, 4)
        assert back[0].to_job().allowed_gpus == (1, 2, 4)


def test_allowed_gpus_without_num_gpus_starts_from_the_smallest() -> None:
    (record,) = parse_jsonl('{"arrival_s": 0, "class": "A3C", "steps": 5, "allowed_gpus": [2, 4]}')
    assert (record.num_gpus, record.allowed_gpus) == (2, (2, 4))
    (row,) = parse_csv("arrival_s,class,steps,allowed_gpus\n0,A3C,5,2;4\n")
    assert row == record


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('"1;2"', "allowed_gpus is '1;2'; expected GPU counts: a JSON list"),
        ("[1, 2.5]", "allowed_gpus is 2.5; expected a whole number"),
        ("[1, true]", "allowed_gpus is True"),
        ("3", "allowed_gpus is 3; expected GPU counts"),
        ("[2, 1]", "allowed_gpus is [2, 1]; expected distinct ascending counts from num_gpus (1)"),
        ("[1, 1, 2]", "allowed_gpus is [1, 1, 2]; expected distinct ascending"),
        ("[2, 4]", "allowed_gpus is [2, 4]; expected distinct ascending counts from num_gpus (1)"),
    ],
)
def test_allowed_gpus_errors_in_jsonl(value: str, expected: str) -> None:
    line = f'{{"arrival_s": 0, "class": "A3C", "steps": 5, "num_gpus": 1, "allowed_gpus": {value}}}'
    with pytest.raises(TraceError) as info:
        parse_jsonl(line, source="j.jsonl")
    assert str(info.value).startswith("j.jsonl, line 1")
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("1;two", "allowed_gpus is 'two'"),
        ("1;;2", "allowed_gpus is '1;;2'; expected GPU counts: \"1;2;4\" in CSV"),
        ("0;1", "allowed_gpus is [0, 1]; expected distinct ascending counts from num_gpus (1)"),
        ("1;4;2", "allowed_gpus is [1, 4, 2]"),
    ],
)
def test_allowed_gpus_errors_in_csv(cell: str, expected: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_csv(
            f"arrival_s,class,steps,num_gpus,allowed_gpus\n0,A3C,5,1,{cell}\n", source="c.csv"
        )
    assert str(info.value).startswith("c.csv, line 2")
    assert expected in str(info.value)
