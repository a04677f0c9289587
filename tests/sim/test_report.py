"""sim/report.py: the summary, the comparison table, the PNG plots and the progress bar, on small
hand-built results whose figures are known."""

from __future__ import annotations

import io
import itertools
import math
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim import report
from slurm_hetsched.sim.report import (
    Progress,
    format_compare_table,
    format_summary,
    jct_cdf_points,
    write_plots,
)
from slurm_hetsched.sim.results import BusySample, JobRecord, SimResult

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
H = 3600.0


def job(job_id: str, arrival_s: float, end_s: float | None) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        job_class="resnet18",
        num_gpus=1,
        arrival_s=arrival_s,
        start_s=arrival_s,
        end_s=end_s,
        total_steps=100.0,
        steps_done=100.0 if end_s is not None else 40.0,
        preemptions=0,
    )


# JCTs 1 h, 3 h and 2 h; job "d" never finishes. Average of the finished: 2 h; their 99th
# percentile 2 + 0.98 x (3 - 2) = 2.98 h.
JOBS = (
    job("a", 0.0, 1 * H),
    job("b", 600.0, 600.0 + 3 * H),
    job("c", 1200.0, 1200.0 + 2 * H),
    job("d", 1800.0, None),
)

FAIR = SimResult(
    policy="max_min_fairness_perf",
    trace="small.trace",
    cluster={"v100": 2, "k80": 4},
    round_s=360.0,
    seed=0,
    jobs=JOBS,
    busy=(
        BusySample(0.0, {"v100": 2, "k80": 1}),
        BusySample(1.5 * H, {"v100": 1, "k80": 3}),
        BusySample(2.0 * H, {"v100": 0}),
    ),
    rounds=37,
    wall_s=1.26,
    avg_jct_s=2 * H,
    makespan_s=12345.0,  # 3.429 h
    utilization=0.87654,
    energy_kwh=123.456,
    energy_cost=7.891,
    tardiness_cost=0.0,
    preemptions=5,
    completed=3,
    p99_jct_s=2.98 * H,
    moves=3,  # 0.75 per job of the 4
    restart_gpu_h=1.234,
)
# A second policy: 1.5x the first's average JCT, larger figures (wider cells).
FIFO = replace(
    FAIR,
    policy="fifo",
    avg_jct_s=3 * H,
    makespan_s=36000.0,
    utilization=0.5,
    energy_kwh=2345.0,
    energy_cost=1234.5,
    tardiness_cost=42.125,
    preemptions=12,
    wall_s=10.04,
)
# No job finished: NaN average.
NONE_DONE = replace(
    FAIR,
    policy="starve",
    jobs=tuple(replace(j, end_s=None) for j in JOBS),
    avg_jct_s=math.nan,
    p99_jct_s=math.nan,
    completed=0,
)


# --- table -----------------------------------------------------------------------------------


def parse_table(text: str) -> tuple[list[str], list[dict[str, str]]]:
    """Column extents from the dashed rule under the header; cells are the slices of each line."""
    lines = text.splitlines()
    rule = lines[1]
    assert set(rule) <= {"-", " "}
    spans = [m.span() for m in re.finditer(r"-+", rule)]
    header = [lines[0][a:b].strip() for a, b in spans]
    rows = []
    for line in lines[2:]:
        # Between two columns only the separator's spaces.
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert line[end:start].strip() == "", line
        rows.append({h: line[a:b].strip() for h, (a, b) in zip(header, spans, strict=True)})
    return header, rows


def test_table_has_one_row_per_policy_with_rounded_values() -> None:
    header, rows = parse_table(format_compare_table([FAIR, FIFO]))
    assert header == [
        "policy",
        "completed",
        "avg JCT (h)",
        "JCT vs first",
        "p99 JCT (h)",
        "makespan (h)",
        "utilization (%)",
        "energy (kWh)",
        "energy cost",
        "tardiness cost",
        "preemptions",
        "moves/job",
        "restart loss (GPU-h)",
        "wall (s)",
    ]
    assert [r["policy"] for r in rows] == ["max_min_fairness_perf", "fifo"]
    assert rows[0] == {
        "policy": "max_min_fairness_perf",
        "completed": "3/4",
        "avg JCT (h)": "2.00",
        "JCT vs first": "1.00x",
        "p99 JCT (h)": "2.98",
        "makespan (h)": "3.43",
        "utilization (%)": "87.7",
        "energy (kWh)": "123.5",
        "energy cost": "7.89",
        "tardiness cost": "0.00",
        "preemptions": "5",
        "moves/job": "0.75",
        "restart loss (GPU-h)": "1.23",
        "wall (s)": "1.3",
    }
    assert rows[1]["avg JCT (h)"] == "3.00"
    assert rows[1]["JCT vs first"] == "1.50x"
    assert rows[1]["makespan (h)"] == "10.00"
    assert rows[1]["energy cost"] == "1234.50"
    assert rows[1]["tardiness cost"] == "42.12" or rows[1]["tardiness cost"] == "42.13"
    assert rows[1]["wall (s)"] == "10.0"


def test_table_lines_have_one_width_and_numbers_are_right_aligned() -> None:
    lines = format_compare_table([FAIR, FIFO, NONE_DONE]).splitlines()
    assert len(lines) == 2 + 3
    assert len({len(line) for line in lines}) == 1
    # Right-aligned: each numeric column's cells end where its header ends.
    header = lines[0]
    end = header.index("wall (s)") + len("wall (s)")
    assert all(line[end - 1] != " " for line in lines[2:])
    jct_end = header.index("avg JCT (h)") + len("avg JCT (h)")
    assert [line[:jct_end].rstrip()[-4:] for line in lines[2:]] == ["2.00", "3.00", "   -"]
    # The policy column is left-aligned.
    assert all(
        line.startswith(p) for line, p in zip(lines[2:], ["max_", "fifo", "starve"], strict=True)
    )


def test_table_shows_dash_for_nan_avg_jct_and_its_ratio() -> None:
    _, rows = parse_table(format_compare_table([FAIR, NONE_DONE]))
    assert rows[1]["completed"] == "0/4"
    assert rows[1]["avg JCT (h)"] == "-"
    assert rows[1]["JCT vs first"] == "-"
    assert rows[1]["p99 JCT (h)"] == "-"
    assert "nan" not in format_compare_table([FAIR, NONE_DONE]).lower()


def test_table_ratios_are_dashes_when_first_row_has_no_avg_jct() -> None:
    _, rows = parse_table(format_compare_table([NONE_DONE, FAIR, FIFO]))
    assert [r["JCT vs first"] for r in rows] == ["-", "-", "-"]
    assert rows[2]["avg JCT (h)"] == "3.00"


# --- summary ---------------------------------------------------------------------------------


def summary_fields(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        name, value = re.split(r"\s{2,}", line, maxsplit=1)
        fields[name] = value
    return fields


def test_summary_lists_the_runs_figures() -> None:
    text = format_summary(FAIR)
    assert summary_fields(text) == {
        "policy": "max_min_fairness_perf",
        "trace": "small.trace",
        "cluster": "k80=4, v100=2 (6 GPUs)",
        "rounds": "37 (360 s each)",
        "completed": "3/4 jobs",
        "avg JCT": "2.00 h (7200 s)",
        "p99 JCT": "2.98 h (10728 s)",
        "makespan": "3.43 h",
        "utilization": "87.7 %",
        "energy": "123.5 kWh",
        "energy cost": "7.89",
        "tardiness cost": "0.00",
        "utility": "0.0",
        "preemptions": "5",
        "moves": "3 (0.75 per job)",
        "restart loss": "1.23 GPU-h",
        "wall time": "1.3 s",
    }
    # Values start in one column.
    starts = {
        line.index(value)
        for line, value in zip(text.splitlines(), summary_fields(text).values(), strict=True)
    }
    assert len(starts) == 1


def test_summary_without_finished_jobs_says_so() -> None:
    fields = summary_fields(format_summary(NONE_DONE))
    assert fields["avg JCT"] == "- (no job finished)"
    assert fields["p99 JCT"] == "- (no job finished)"
    assert fields["completed"] == "0/4 jobs"


# --- plots -----------------------------------------------------------------------------------


def test_cdf_points_are_the_sorted_finished_jcts_over_all_jobs() -> None:
    xs, ys = jct_cdf_points(FAIR)
    assert xs == pytest.approx([1.0, 2.0, 3.0])
    # 4 jobs in the trace, one unfinished: the CDF stops at 3/4.
    assert ys == pytest.approx([0.25, 0.5, 0.75])
    assert jct_cdf_points(NONE_DONE) == ([], [])


def read_png(path: Path) -> tuple[int, int]:
    from matplotlib import image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    pixels = image.imread(path)
    height, width = pixels.shape[:2]
    # Not blank: a plot has more than one colour.
    assert pixels.reshape(-1, pixels.shape[-1]).std(axis=0).max() > 0.01
    return height, width


def test_write_plots_writes_two_readable_pngs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "new" / "plots"  # created on the way
    paths = write_plots([FAIR, FIFO], out)
    assert paths == [out / "jct_cdf.png", out / "gpus_busy.png"]
    sizes = [read_png(p) for p in paths]
    for height, width in sizes:
        assert height >= 300 and width >= 500
    # One panel per policy: three policies make a taller busy plot than two.
    three = write_plots([FAIR, FIFO, NONE_DONE], tmp_path / "three")
    assert read_png(three[1])[0] > sizes[1][0]


def test_write_plots_is_deterministic(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    first = write_plots([FAIR, NONE_DONE], tmp_path / "one")
    second = write_plots([FAIR, NONE_DONE], str(tmp_path / "two"))
    assert [p.name for p in first] == [p.name for p in second]
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]


def test_busy_plot_has_a_panel_per_policy_with_types_and_capacities() -> None:
    pytest.importorskip("matplotlib")
    figure = report._draw_gpus_busy(report._figure_factory(), [FAIR, FIFO])
    panels = [ax for ax in figure.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["max_min_fairness_perf", "fifo"]
    for ax, result in zip(panels, [FAIR, FIFO], strict=True):
        solid = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
        dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
        assert sorted(str(line.get_label()) for line in solid) == ["k80", "v100"]
        assert sorted(float(np.asarray(line.get_ydata())[0]) for line in dashed) == [2, 4]
        k80 = next(line for line in solid if line.get_label() == "k80")
        # Samples at 0, 1.5 h, 2 h (k80 absent: 0), held to the makespan.
        assert np.asarray(k80.get_xdata()).tolist() == pytest.approx(
            [0, 1.5, 2, result.makespan_s / H]
        )
        assert np.asarray(k80.get_ydata()).tolist() == [1, 3, 0, 0]
        assert ax.get_ylabel() == "GPUs busy"
    assert panels[0].get_shared_x_axes().joined(panels[0], panels[1])
    assert panels[0].get_shared_y_axes().joined(panels[0], panels[1])


def test_cdf_plot_has_one_line_per_policy_on_a_log_axis() -> None:
    pytest.importorskip("matplotlib")
    figure = report._draw_jct_cdf(report._figure_factory(), [FAIR, FIFO, NONE_DONE])
    (ax,) = figure.axes
    assert ax.get_xscale() == "log"
    assert "h" in ax.get_xlabel()
    labels = [str(t.get_text()) for t in ax.get_legend().get_texts()]  # type: ignore[union-attr]
    assert labels == [
        "max_min_fairness_perf (3/4 finished)",
        "fifo (3/4 finished)",
        "starve (0/4 finished)",
    ]


def test_write_plots_without_matplotlib_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A None entry in sys.modules makes the import raise ImportError.
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(ConfigError, match=r"pip install 'slurm-hetsched\[plots\]'"):
        write_plots([FAIR], tmp_path)
    assert not any(tmp_path.iterdir())


# --- progress --------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def bar(stream: io.StringIO, clock: FakeClock, **kw: object) -> Progress:
    return Progress(total=10, label="fair", stream=stream, clock=clock, **kw)  # type: ignore[arg-type]


def test_progress_is_silent_before_the_delay_and_shows_after() -> None:
    clock, out = FakeClock(), Tty()
    progress = bar(out, clock)
    clock.now += 1.9
    progress.update(3, sim_time_s=600.0)
    assert out.getvalue() == ""
    clock.now += 0.2  # 2.1 s in
    progress.update(5, sim_time_s=3 * H + 65)
    text = out.getvalue()
    assert text.startswith("\r") and "\n" not in text
    assert text == "\rfair  50.0% [############------------] 5/10 jobs  sim 3:01:05  wall 0:00:02"


def test_progress_redraws_at_most_every_interval() -> None:
    clock, out = FakeClock(), Tty()
    progress = bar(out, clock)
    clock.now += 3.0
    for done in range(1, 10):  # nine updates 1/16 s apart (exact in binary): 0.5 s in all
        progress.update(done, sim_time_s=done * 360.0)
        clock.now += 0.0625
    # Drawn at 0, 0.25 and 0.5 s after the first: the first updates at least 0.2 s apart.
    assert out.getvalue().count("\r") == 3
    assert out.getvalue().endswith("9/10 jobs  sim 0:54:00  wall 0:00:03")


def test_progress_close_draws_the_final_state_and_ends_the_line() -> None:
    clock, out = FakeClock(), Tty()
    with bar(out, clock) as progress:
        clock.now += 2.5
        progress.update(4, sim_time_s=100.0)
        clock.now += 0.01
        progress.update(10, sim_time_s=7200.0)  # throttled
        assert "10/10" not in out.getvalue()
    text = out.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1
    last = text.rstrip("\n").rsplit("\r", 1)[1]
    assert last.startswith("fair 100.0% [" + "#" * 24 + "] 10/10 jobs  sim 2:00:00")
    progress.close()  # idempotent
    assert out.getvalue() == text


def test_progress_of_a_short_run_prints_nothing() -> None:
    clock, out = FakeClock(), Tty()
    with bar(out, clock) as progress:
        clock.now += 1.0
        progress.update(10, sim_time_s=5000.0)
    assert out.getvalue() == ""


def test_progress_on_a_non_tty_prints_nothing_unless_forced() -> None:
    clock, out = FakeClock(), io.StringIO()
    with bar(out, clock) as progress:
        clock.now += 60.0
        progress.update(5, sim_time_s=1.0)
    assert out.getvalue() == ""

    forced = io.StringIO()
    with bar(forced, clock, force=True) as progress:
        clock.now += 60.0
        progress.update(5, sim_time_s=1.0)
    assert forced.getvalue().startswith("\rfair  50.0%") and forced.getvalue().endswith("\n")


def test_progress_pads_over_a_longer_previous_line() -> None:
    clock, out = FakeClock(), Tty()
    progress = Progress(total=10, stream=out, clock=clock, label="x")
    clock.now += 2.0
    progress.update(1, sim_time_s=1000 * H)  # "sim 1000:00:00"
    clock.now += 1.0
    progress.update(2, sim_time_s=0.0)  # "sim 0:00:00": 3 characters shorter
    first, second = out.getvalue().split("\r")[1:]
    assert len(second) == len(first)
    assert second.endswith("   ")


def test_progress_with_no_jobs_does_not_divide_by_zero() -> None:
    clock, out = FakeClock(), Tty()
    progress = Progress(total=0, stream=out, clock=clock, delay_s=0.0)
    progress.update(0, sim_time_s=0.0)
    assert "100.0%" in out.getvalue()
