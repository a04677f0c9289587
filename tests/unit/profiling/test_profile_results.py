"""What a profile job measured (its final progress report, read safely), the results table,
and the throughput file: merged entry by entry, written atomically, read back as the
controller's `site.throughputs` reads it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from profile_fakes import progress

from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.data_files import load_throughputs
from slurm_hetsched.profiling.plan import ProfileCase, ProfileError
from slurm_hetsched.profiling.results import (
    Measurement,
    format_results,
    measurement_from_progress,
    output_tail,
    read_measurement,
)
from slurm_hetsched.profiling.table_file import load_existing, merged_table, write_table

V100 = ProfileCase("v100", 1)


def measured(gpu_type: str, rate: float, num_gpus: int = 1) -> Measurement:
    return Measurement(ProfileCase(gpu_type, num_gpus), "7", rate, 200, gpu_type)


def test_the_rate_is_the_final_reports() -> None:
    m = measurement_from_progress(V100, "7", progress("7", "v100", 31.5))
    assert (m.steps_per_s, m.steps, m.reported_gpu_type) == (31.5, 200, "v100")


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (None, "no usable progress report"),
        (progress("7", "v100", 3.0, status="failed"), "says 'failed' at step 57 of 200"),
        (progress("7", "v100", 3.0, status="running"), "says 'running'"),
        (progress("7", "v100", None), "too briefly to measure a rate: raise --steps"),
        (progress("7", "v100", 0.0), "reported 0.0 steps/s"),
    ],
)
def test_no_measurement_says_why(payload: dict[str, object] | None, says: str) -> None:
    with pytest.raises(ProfileError) as raised:
        measurement_from_progress(V100, "7", payload)
    assert says in str(raised.value)


def test_the_report_is_read_from_the_jobs_own_folder_only(tmp_path: Path) -> None:
    folder = tmp_path / str(os.geteuid()) / V100.name
    folder.mkdir(parents=True)
    (folder / "progress.json").write_text(json.dumps(progress("7", "v100", 12.0)))
    assert read_measurement(tmp_path, os.geteuid(), V100, "7", now_s=1.8e9).steps_per_s == 12.0
    with pytest.raises(ProfileError, match="no usable progress report"):
        read_measurement(tmp_path, os.geteuid(), V100, "8", now_s=1.8e9)  # another job's
    (folder / "progress.json").unlink()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(progress("7", "v100", 99.0)))
    (folder / "progress.json").symlink_to(elsewhere)
    with pytest.raises(ProfileError, match="no usable progress report"):
        read_measurement(tmp_path, os.geteuid(), V100, "7", now_s=1.8e9)


def test_results_show_the_ratio_to_the_fastest_at_the_same_count() -> None:
    text = format_results(
        "m", [measured("k80", 10.0), measured("v100", 30.0), measured("k80", 18.0, 2)]
    )
    lines = text.splitlines()
    assert lines[1].split() == ["TYPE", "GPUS", "STEPS/S", "RATIO", "JOB"]
    assert lines[2].split() == ["v100", "1", "30", "1.000", "7"]
    assert lines[3].split() == ["k80", "1", "10", "0.333", "7"]
    assert lines[4].split() == ["k80", "2", "18", "1.000", "7"]


def test_output_tail_shows_the_last_lines_printable(tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    out.write_text("".join(f"line {i}\n" for i in range(20)) + "bad \x1b[2J end\n")
    tail = output_tail(out).splitlines()
    assert tail[-1] == "    | bad ?[2J end" and tail[0] == "    | line 13"
    assert output_tail(tmp_path / "missing.out") == ""
    (tmp_path / "link.out").symlink_to(out)
    assert output_tail(tmp_path / "link.out") == ""


# -- the throughput file --------------------------------------------------------------------


def test_a_new_table_holds_the_measurements(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    rates = [measured("v100", 30.0), measured("k80", 10.0), measured("k80", 19.5, 2)]
    data = merged_table(None, "my model", rates, source="measured here")
    table = write_table(path, data, "my model", rates)
    assert table.steps_per_s("my model", "k80", 2) == 19.5
    assert load_throughputs(path).steps_per_s("my model", "v100", 1) == 30.0
    assert json.loads(path.read_text())["source"] == "measured here"
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def test_merging_replaces_only_the_same_entries(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    existing = {
        "format": "hetsched-throughputs/1",
        "source": "ours",
        "throughputs": {
            "my model": {"1": {"v100": 1.0, "a100": 50.0}, "02": {"v100": 2.0}},
            "other": {"1": {"v100": 7.0}},
        },
        "unconsolidated": {"my model": {"2": {"v100": 1.5}}},
    }
    path.write_text(json.dumps(existing))
    path.chmod(0o600)
    loaded = load_existing(path)
    assert loaded == existing
    rates = [measured("v100", 30.0), measured("k80", 10.0), measured("v100", 55.0, 2)]
    data = merged_table(loaded, "my model", rates, source="unused")
    write_table(path, data, "my model", rates)
    written = json.loads(path.read_text())
    assert written["throughputs"] == {
        "my model": {"1": {"v100": 30.0, "a100": 50.0, "k80": 10.0}, "02": {"v100": 55.0}},
        "other": {"1": {"v100": 7.0}},
    }
    assert written["unconsolidated"] == existing["unconsolidated"]
    assert written["source"] == "ours"
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)  # the replaced file's mode
    assert [p.name for p in tmp_path.iterdir()] == ["profile.json"]  # no temp file left
    ThroughputTable.from_dict(written)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "not JSON"),
        ('{"v100": {}}', "not a 'hetsched-throughputs/1' file"),
        ("[1, 2]", "not a 'hetsched-throughputs/1' file"),
        ('{"format": "hetsched-throughputs/1", "throughputs": {"m": {"1": {"v100": -1}}}}', ""),
        ('{"format": "hetsched-throughputs/1", "throughputs": {}, "extra": 1}', "extra"),
    ],
)
def test_an_output_that_is_not_a_valid_table_of_ours_is_refused(
    tmp_path: Path, content: str, says: str
) -> None:
    path = tmp_path / "profile.json"
    path.write_text(content)
    with pytest.raises(ProfileError, match="--output") as raised:
        load_existing(path)
    assert says in str(raised.value)


def test_a_missing_output_is_a_new_file(tmp_path: Path) -> None:
    assert load_existing(tmp_path / "new.json") is None


def test_an_unwritable_output_is_an_error(tmp_path: Path) -> None:
    rates = [measured("v100", 30.0)]
    data = merged_table(None, "m", rates, source="s")
    with pytest.raises(ProfileError, match="cannot write it"):
        write_table(tmp_path / "no" / "such" / "folder.json", data, "m", rates)
