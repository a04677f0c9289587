"""The command line of restart costs, moves and bursty traces: `hetsched simulate --restart-costs
--moves --restart-share` and `hetsched trace generate --arrivals bursty --restart-range`, run
in-process through `main`, with their errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_hetsched.cli import main
from slurm_hetsched.sim.traces import read_trace

CLUSTER = "v100=4,p100=4,k80=4"
R18 = "ResNet-18 (batch size 32)"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def bursty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    trace = tmp_path / "bursty.jsonl"
    code, out, err = run(
        capsys, "trace", "generate", "-o", str(trace), "-n", "24", "--mix", "single",
        "--arrivals", "bursty", "--burst-jobs-max", "8", "--burst-window", "600",
        "--burst-quiet", "3600", "--restart-range", "--seed", "2",
    )  # fmt: skip
    assert code == 0, err
    assert "wrote 24 jobs" in out and "bursty arrivals" in out and "restart costs 25-250 s" in out
    return trace


def test_generate_writes_bursts_and_default_range_costs(bursty: Path) -> None:
    trace = read_trace(bursty)
    assert len(trace) == 24
    assert all(j.restart_s is not None and 25.0 <= j.restart_s <= 250.0 for j in trace)
    starts = [trace[0].arrival_s]
    count = 0
    for job in trace:  # bursts of at most 8 jobs within 600 s of their first
        if job.arrival_s > starts[-1] + 600.0:
            starts.append(job.arrival_s)
            count = 0
        count += 1
        assert count <= 8
    assert len(starts) >= 3


def test_simulate_compare_with_moves_and_a_class_table(
    bursty: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    costs = tmp_path / "costs.toml"
    costs.write_text(f'"{R18}" = 99\n')
    code, out, err = run(
        capsys, "simulate", "--trace", str(bursty), "--cluster", CLUSTER, "--no-progress",
        "--compare", "max_min_fairness_perf,fifo_perf", "--moves", "plain",
        "--restart-share", "0.2", "--restart-costs", str(costs), "--json", "-",
    )  # fmt: skip
    assert code == 0, err
    results = json.loads(out)
    assert [r["policy"] for r in results] == ["max_min_fairness_perf", "fifo_perf"]
    traced = {j.job_id: j.restart_s for j in read_trace(bursty)}
    for result in results:
        assert result["completed"] == 24
        assert {"p99_jct_s", "restart_gpu_h", "moves", "moves_per_job"} <= set(result)
        # Every job of this trace has its own cost, which wins over the class table.
        assert {j["job_id"]: j["restart_s"] for j in result["jobs"]} == pytest.approx(traced)
        lost_h = sum(j["restart_gpu_s"] for j in result["jobs"]) / 3600
        assert result["restart_gpu_h"] == pytest.approx(lost_h, abs=1e-3)


def test_simulate_table_shows_the_new_columns(
    bursty: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "simulate", "--trace", str(bursty), "--cluster", CLUSTER, "--no-progress",
        "--compare", "fifo_perf,max_min_fairness_perf",
    )  # fmt: skip
    assert code == 0, err
    header = out.splitlines()[0]
    for column in ("p99 JCT (h)", "moves/job", "restart loss (GPU-h)", "preemptions"):
        assert column in header


def test_class_table_applies_where_the_trace_gives_no_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(f'arrival_s,class,steps,restart_s\n0,"{R18}",1000,\n0,"{R18}",1000,7\n')
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({R18: 123.0}))
    code, out, err = run(
        capsys, "simulate", "--trace", str(trace), "--cluster", CLUSTER, "--no-progress",
        "--restart-costs", str(costs), "--restart-overhead", "5", "--json", "-",
    )  # fmt: skip
    assert code == 0, err
    assert [j["restart_s"] for j in json.loads(out)["jobs"]] == [123.0, 7.0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--restart-share", "0"], "--restart-share 0.0: expected a share"),
        (["--restart-share", "1.5"], "--restart-share 1.5"),
        (["--restart-share", "nan"], "--restart-share nan"),
        (["--restart-overhead", "-1"], "--restart-overhead -1.0: expected seconds from 0"),
        (["--restart-overhead", "inf"], "--restart-overhead inf"),
        (["--restart-costs", "missing.toml"], "missing.toml: cannot read"),
    ],
)
def test_bad_simulate_values_are_one_clear_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "simulate", "--trace", "small_test", "--cluster", CLUSTER, *args)
    assert code == 1
    assert message in err and "Traceback" not in err


def test_a_class_table_naming_an_unknown_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    costs = tmp_path / "costs.toml"
    costs.write_text('"ResNet-81" = 30\n')
    code, _, err = run(
        capsys, "simulate", "--trace", "small_test", "--cluster", CLUSTER,
        "--restart-costs", str(costs),
    )  # fmt: skip
    assert code == 1
    assert "['ResNet-81'] are not in the throughput table" in err


def test_moves_must_be_a_known_choice(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--trace", "small_test", "--moves", "sometimes"])
    assert "invalid choice: 'sometimes'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--arrivals", "bursty", "--rate", "2"], "--arrivals bursty draws its own arrivals"),
        (["--arrivals", "bursty", "--burst-jobs-max", "0"], "--burst-jobs-max 0"),
        (["--arrivals", "bursty", "--burst-window", "0"], "--burst-window 0.0"),
        (["--arrivals", "bursty", "--burst-quiet", "-5"], "--burst-quiet -5.0"),
        (["--rate", "2", "--burst-window", "60"], "--burst-window need --arrivals bursty"),
        (["--rate", "2", "--restart-range", "250,25"], "--restart-range 250,25: expected LO,HI"),
        (["--rate", "2", "--restart-range=-1,5"], "--restart-range -1,5"),
        (["--rate", "2", "--restart-range", "25"], "--restart-range '25': expected two numbers"),
    ],
)
def test_bad_generate_values_are_one_clear_line(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.jsonl"
    code, _, err = run(capsys, "trace", "generate", "-o", str(out), "-n", "5", *args)
    assert code == 1
    assert message in err and "Traceback" not in err
    assert not out.exists()


def test_bursty_needs_a_job_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "trace", "generate", "-o", str(tmp_path / "t.jsonl"),
                       "--arrivals", "bursty")  # fmt: skip
    assert code == 1 and "--arrivals bursty needs --jobs N" in err


def test_scenarios_refuse_the_new_generator_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys, "trace", "generate", "-o", str(tmp_path / "t.jsonl"), "--scenario", "andreas1",
        "--nodes", "2", "--arrivals", "bursty", "--restart-range",
    )  # fmt: skip
    assert code == 1
    assert "drop --arrivals, --restart-range" in err
