"""The output side of `hetsched simulate`: a summary of one run, a table comparing policies,
PNG plots, and the progress bar shown while a long run goes on.

Costs are printed as plain numbers: their currency is whatever the site's prices are in.
matplotlib is optional (`pip install 'slurm-hetsched[plots]'`) and imported only by
`write_plots`, so the simulator and its text output work without it.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.results import SimResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    # Makes an empty figure of this (width, height) in inches, drawn with Agg.
    NewFigure = Callable[[tuple[float, float]], Figure]

JCT_CDF_FILE = "jct_cdf.png"
GPUS_BUSY_FILE = "gpus_busy.png"

_HOUR_S = 3600.0
_DPI = 100


# --- text ----------------------------------------------------------------------------------


def format_summary(result: SimResult) -> str:
    """A short block describing one run, one `name  value` line per figure."""
    rows = [
        ("policy", result.policy),
        ("trace", result.trace),
        ("cluster", _cluster(result)),
        ("rounds", f"{result.rounds} ({_num(result.round_s, 0)} s each)"),
        ("completed", f"{result.completed}/{len(result.jobs)} jobs"),
        ("avg JCT", _jct(result.avg_jct_s)),
        ("p99 JCT", _jct(result.p99_jct_s)),
        ("makespan", f"{_num(result.makespan_s / _HOUR_S, 2)} h"),
        ("utilization", f"{_num(100.0 * result.utilization, 1)} %"),
        ("energy", f"{_num(result.energy_kwh, 1)} kWh"),
        ("energy cost", _num(result.energy_cost, 2)),
        ("tardiness cost", _num(result.tardiness_cost, 2)),
        ("utility", _num(result.total_utility, 1)),
        ("preemptions", str(result.preemptions)),
        ("moves", f"{result.moves} ({_num(result.moves_per_job, 2)} per job)"),
        ("restart loss", f"{_num(result.restart_gpu_h, 2)} GPU-h"),
        ("wall time", f"{_num(result.wall_s, 1)} s"),
    ]
    if result.estimates:  # what rested on estimates, and the stints spent measuring them
        rows.insert(-1, ("estimates", f"{result.estimates}; {result.exploration_stints} stints"))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


# (header, right-aligned); "policy" is the only text column.
_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("policy", False),
    ("completed", True),
    ("avg JCT (h)", True),
    ("JCT vs first", True),
    ("p99 JCT (h)", True),
    ("makespan (h)", True),
    ("utilization (%)", True),
    ("energy (kWh)", True),
    ("energy cost", True),
    ("tardiness cost", True),
    ("preemptions", True),
    ("moves/job", True),
    ("restart loss (GPU-h)", True),
    ("wall (s)", True),
)


def format_compare_table(results: Sequence[SimResult]) -> str:
    """One aligned row per policy; "JCT vs first" is each avg JCT over the first row's.

    A run where no job finished (NaN avg JCT) shows "-" for its JCT and its ratio; every row
    shows "-" for the ratio when the first row has no avg JCT.
    """
    first_jct = results[0].avg_jct_s if results else math.nan
    rows = [[header for header, _ in _COLUMNS]]
    rows += [_compare_row(result, first_jct) for result in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = [_join(row, widths) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _compare_row(result: SimResult, first_jct_s: float) -> list[str]:
    jct_h = result.avg_jct_s / _HOUR_S
    return [
        result.policy,
        f"{result.completed}/{len(result.jobs)}",
        _num(jct_h, 2),
        _ratio(result.avg_jct_s, first_jct_s),
        _num(result.p99_jct_s / _HOUR_S, 2),
        _num(result.makespan_s / _HOUR_S, 2),
        _num(100.0 * result.utilization, 1),
        _num(result.energy_kwh, 1),
        _num(result.energy_cost, 2),
        _num(result.tardiness_cost, 2),
        str(result.preemptions),
        _num(result.moves_per_job, 2),
        _num(result.restart_gpu_h, 2),
        _num(result.wall_s, 1),
    ]


def _join(cells: Sequence[str], widths: Sequence[int]) -> str:
    # Every cell padded to its column's width, so every line has the same length.
    return "  ".join(
        cell.rjust(width) if right else cell.ljust(width)
        for cell, width, (_, right) in zip(cells, widths, _COLUMNS, strict=True)
    )


def _ratio(value: float, reference: float) -> str:
    if not (math.isfinite(value) and math.isfinite(reference)) or reference <= 0.0:
        return "-"
    return f"{value / reference:.2f}x"


def _num(value: float, digits: int) -> str:
    """`value` rounded to `digits`, "-" for NaN; -0.00 printed as 0.00."""
    if math.isnan(value):
        return "-"
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0.0 else text


def _jct(jct_s: float) -> str:
    if math.isnan(jct_s):
        return "- (no job finished)"
    return f"{_num(jct_s / _HOUR_S, 2)} h ({_num(jct_s, 0)} s)"


def _cluster(result: SimResult) -> str:
    total = sum(result.cluster.values())
    per_type = ", ".join(f"{t}={n}" for t, n in sorted(result.cluster.items()))
    return f"{per_type} ({total} GPUs)"


# --- plots ---------------------------------------------------------------------------------


def jct_cdf_points(result: SimResult) -> tuple[list[float], list[float]]:
    """The CDF of completion times: (JCTs in hours, sorted; fraction of the trace's jobs).

    One point per finished job. The fraction is over all the trace's jobs, so a run that left
    jobs unfinished plateaus below 1 instead of looking as good as one that finished them.
    """
    jcts = sorted(j / _HOUR_S for job in result.jobs if (j := job.jct_s) is not None)
    total = len(result.jobs)
    return jcts, [(i + 1) / total for i in range(len(jcts))]


def write_plots(results: Sequence[SimResult], directory: str | Path) -> list[Path]:
    """Write `jct_cdf.png` and `gpus_busy.png` into `directory` (created if needed).

    Returns:
        the paths written, in that order.

    Raises:
        ConfigError: matplotlib is not installed, or the directory cannot be written.
    """
    new_figure = _figure_factory()
    out = Path(directory)
    if not results:
        return []
    written = []
    for name, draw in ((JCT_CDF_FILE, _draw_jct_cdf), (GPUS_BUSY_FILE, _draw_gpus_busy)):
        written.append(_save(draw(new_figure, results), out / name))
    return written


def _figure_factory() -> NewFigure:
    """Makes figures on the Agg canvas; a ConfigError saying how to install matplotlib if absent.

    Figures are built without pyplot, so no GUI backend is ever picked and a caller's pyplot
    state (if any) is left alone.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ConfigError(
            "writing plots needs matplotlib, which is not installed; "
            "run `pip install 'slurm-hetsched[plots]'`"
        ) from exc

    def new_figure(size: tuple[float, float]) -> Figure:
        figure = Figure(figsize=size, dpi=_DPI, layout="constrained")
        FigureCanvasAgg(figure)  # attaches itself as the figure's canvas
        return figure

    return new_figure


def _draw_jct_cdf(new_figure: NewFigure, results: Sequence[SimResult]) -> Figure:
    figure = new_figure((7.0, 4.5))
    ax = figure.add_subplot()
    curves = [jct_cdf_points(result) for result in results]
    x_max = max((xs[-1] for xs, _ in curves if xs), default=None)
    for result, (xs, ys) in zip(results, curves, strict=True):
        label = f"{result.policy} ({result.completed}/{len(result.jobs)} finished)"
        if xs and x_max is not None:
            # Rise from 0 at the first JCT, and run flat to the longest JCT of any policy, so a
            # single job shows as a step and a plateau (unfinished jobs) stays visible.
            ax.plot([xs[0], *xs, x_max], [0.0, *ys, ys[-1]], drawstyle="steps-post", label=label)
        else:
            ax.plot([], [], label=label)  # keeps the policy in the legend
    if x_max is not None:  # a log axis without positive data only warns
        ax.set_xscale("log")
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("job completion time (h, log scale)")
    ax.set_ylabel("fraction of the trace's jobs finished")
    ax.set_title(f"CDF of job completion times: {results[0].trace}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left")  # a CDF rises from lower left to upper right
    return figure


def _draw_gpus_busy(new_figure: NewFigure, results: Sequence[SimResult]) -> Figure:
    n = len(results)
    figure = new_figure((8.0, 1.0 + 2.6 * n))
    axes = figure.subplots(n, 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    # One colour per GPU type across all panels, so they read the same way.
    gpu_types = sorted({t for r in results for t in r.cluster} | _busy_types(results))
    colors = {t: f"C{i % 10}" for i, t in enumerate(gpu_types)}
    for ax, result in zip(axes, results, strict=True):
        _draw_busy_panel(ax, result, colors)
    # Headroom above the highest capacity for the legend (the axes are shared).
    top = max([1, *(c for r in results for c in r.cluster.values())])
    axes[0].set_ylim(0.0, 1.35 * top)
    axes[-1].set_xlabel("simulated time (h)")
    figure.suptitle(f"GPUs busy per type (dashed: capacity): {results[0].trace}")
    return figure


def _draw_busy_panel(ax: Axes, result: SimResult, colors: dict[str, str]) -> None:
    times = [s.time_s / _HOUR_S for s in result.busy]
    # Each sample holds until the next; the last one until the makespan.
    end_h = max([result.makespan_s / _HOUR_S, *times])
    shown = sorted(set(result.cluster) | {t for s in result.busy for t in s.busy})
    for gpu_type in shown:
        color = colors[gpu_type]
        if times:
            counts = [s.busy.get(gpu_type, 0) for s in result.busy]
            ax.step(
                [*times, end_h], [*counts, counts[-1]], where="post", color=color, label=gpu_type
            )
        if gpu_type in result.cluster:
            ax.axhline(result.cluster[gpu_type], color=color, linestyle="--", linewidth=1.0)
    ax.set_title(result.policy)
    ax.set_ylabel("GPUs busy")
    ax.grid(True, alpha=0.3)
    if times:
        ax.legend(loc="upper right", fontsize="small", ncols=max(1, len(shown)))


def _busy_types(results: Sequence[SimResult]) -> set[str]:
    return {t for r in results for s in r.busy for t in s.busy}


def _save(figure: Figure, path: Path) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # No "Software" tag: the bytes then depend on the data, not on matplotlib's version.
        figure.savefig(path, format="png", metadata={"Software": None})
    except OSError as exc:
        raise ConfigError(f"cannot write plot {path}: {exc.strerror or exc}") from exc
    return path


# --- progress ------------------------------------------------------------------------------


class Progress:
    """A one-line progress bar for a long simulation, on a terminal only.

    Silent for the first `delay_s` (most runs end before and print nothing), then redrawn in
    place at most every `interval_s`. On a stream that is not a TTY (a log file, a pipe) it
    writes nothing unless `force` is set, so captured output stays free of `\\r` noise.

        with Progress(total=len(trace), label=policy, stream=sys.stderr) as bar:
            bar.update(done, sim_time_s=now)
    """

    def __init__(
        self,
        total: int,
        label: str = "",
        stream: TextIO | None = None,
        *,
        delay_s: float = 2.0,
        interval_s: float = 0.2,
        width: int = 24,
        force: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.label = label
        # Looked up now, not at import, so a redirected sys.stderr (tests, callers) is honoured.
        self.stream = sys.stderr if stream is None else stream
        self.delay_s = delay_s
        self.interval_s = interval_s
        self.width = width
        self.enabled = force or _isatty(self.stream)
        self._clock = clock
        self._start = clock()
        self._done = 0
        self._sim_time_s = 0.0
        self._last_draw: float | None = None
        self._drawn_state: tuple[int, float] | None = None
        self._line_len = 0
        self._closed = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def update(self, done: int, *, sim_time_s: float | None = None) -> None:
        """Record `done` jobs finished at simulated time `sim_time_s`; redraw if it is due."""
        self._done = done
        if sim_time_s is not None:
            self._sim_time_s = sim_time_s
        if not self.enabled or self._closed:
            return
        now = self._clock()
        if now - self._start < self.delay_s:
            return
        if self._last_draw is not None and now - self._last_draw < self.interval_s:
            return
        self._draw(now)

    def close(self) -> None:
        """Draw the final state (if the bar was ever shown) and end its line."""
        if self._closed:
            return
        self._closed = True
        if self._last_draw is None:  # never shown: leave the terminal untouched
            return
        if self._drawn_state != (self._done, self._sim_time_s):
            self._draw(self._clock())
        self.stream.write("\n")
        self.stream.flush()

    def render(self, now: float) -> str:
        """The bar's text at wall-clock time `now` (without `\\r`)."""
        fraction = min(1.0, max(0.0, self._done / self.total)) if self.total > 0 else 1.0
        filled = round(fraction * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        prefix = f"{self.label} " if self.label else ""
        return (
            f"{prefix}{100.0 * fraction:5.1f}% [{bar}] {self._done}/{self.total} jobs"
            f"  sim {_hms(self._sim_time_s)}  wall {_hms(now - self._start)}"
        )

    def _draw(self, now: float) -> None:
        line = self.render(now)
        # Pad over the previous line's tail in case this one is shorter.
        padding = " " * max(0, self._line_len - len(line))
        self.stream.write(f"\r{line}{padding}")
        self.stream.flush()
        self._line_len = len(line)
        self._last_draw = now
        self._drawn_state = (self._done, self._sim_time_s)


def _hms(seconds: float) -> str:
    """H:MM:SS, hours unbounded (simulated runs last weeks)."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
