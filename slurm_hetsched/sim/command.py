"""`hetsched simulate`: read the trace and the cluster, run one or several policies, write the
results. Plain values in, text out; the command line lives in cli.py.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from slurm_hetsched import data_files
from slurm_hetsched.core.fork_rounds import ForkSettings
from slurm_hetsched.core.policies import POLICIES, get_policy
from slurm_hetsched.core.policies.base import Policy
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.core.throughput.prior import with_estimates, without
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.faithful.catalog import faithful_form
from slurm_hetsched.sim.faithful.choices import GAVEL, FaithfulChoices
from slurm_hetsched.sim.faithful.forms import Form
from slurm_hetsched.sim.faithful.loop import faithful_result
from slurm_hetsched.sim.hadare import simulate_forked
from slurm_hetsched.sim.layout import DEFAULT_GPUS_PER_SERVER, cluster_nodes, gpu_counts
from slurm_hetsched.sim.results import SimResult
from slurm_hetsched.sim.run import SimSettings, simulate
from slurm_hetsched.sim.traces import SHIPPED_TRACES, Trace, read_shipped_trace, read_trace


@dataclass(frozen=True, slots=True)
class SimulateRequest:
    """Everything `hetsched simulate` was asked for.

    Attributes:
        trace: a trace file, or the name of a shipped Gavel trace (e.g. "max_min_fairness").
        policies: one policy, or several to compare on the same trace.
        cluster: "v100=8,p100=16,k80=24", or a node layout file (.toml, etc/devcluster.toml
            format).
        gpus_per_server: servers per type when `cluster` gives counts.
        settings: round length, restart costs (default and per class), reset interval,
            idle power, seed, round mechanism options (moves, restart share).
        throughputs: a throughput file; None for the shipped table.
        policy_options: options for every policy (e.g. {"energy_slack": 0.1}).
        json_out: write the results as JSON here ('-' for standard output).
        plots_dir: write PNG plots here.
        trace_format: the trace's format if its extension does not say.
        progress: show a progress bar on long runs (standard error, terminals only).
        faithful_solver: replay the trace as Gavel's simulator does, with this interior-point
            solver (sim/faithful); None: our simulation.
        faithful_choices: with `faithful_solver`, the choices of Gavel's to keep.
        unprofiled: GPU types the policy's table lacks, or ("all",) for no table at all: the
            policy decides on estimates and a neutral prior and learns each job's rates as it
            runs, while jobs run at the true table's (docs/throughput.md).
    """

    trace: str
    policies: tuple[str, ...]
    cluster: str
    gpus_per_server: int = DEFAULT_GPUS_PER_SERVER
    settings: SimSettings = field(default_factory=SimSettings)
    throughputs: Path | None = None
    policy_options: Mapping[str, Any] = field(default_factory=dict)
    json_out: str | None = None
    plots_dir: Path | None = None
    trace_format: str | None = None
    progress: bool = True
    faithful_solver: str | None = None
    faithful_choices: FaithfulChoices = GAVEL
    unprofiled: tuple[str, ...] = ()
    fork: ForkSettings = field(default_factory=ForkSettings)


def run_simulate(request: SimulateRequest, out: TextIO | None = None) -> list[SimResult]:
    """Run the request; print a summary (one policy) or a comparison table (several) on `out`
    (default: the standard output of the moment, looked up now so a redirection is honoured).

    Raises:
        ConfigError: an unknown policy, a bad cluster or option, an output that cannot be
            written or plots without matplotlib (these before anything is simulated).
        TraceError: a malformed trace or a job the cluster cannot run.
    """
    out = sys.stdout if out is None else out
    if not request.policies:
        raise ConfigError("no policy given; name one with --policy or several with --compare")
    forms: dict[str, Form] = {}
    for name in request.policies:
        _check_simulable(name)
        if request.faithful_solver is not None:
            forms[name] = faithful_form(name, request.faithful_solver, request.settings.seed)
    _check_outputs(request)
    table = (
        data_files.shipped_throughputs()
        if request.throughputs is None
        else data_files.load_throughputs(request.throughputs)
    )
    catalog = data_files.shipped_gpu_types()
    # Jobs run at the table's rates, estimated for a type it lacks; a class it lacks is an error.
    truth = with_estimates(table, catalog, prior=False)
    site = SiteData(truth, catalog, data_files.shipped_site_energy())
    trace, trace_name = _load_trace(request, site)
    nodes = cluster_nodes(request.cluster, request.gpus_per_server)
    learned = None
    if request.unprofiled:
        if forms:
            raise ConfigError("--unprofiled: not with --gavel-faithful (Gavel knows every rate)")
        seen = _hidden_table(table, request.unprofiled)
        site = dataclasses.replace(site, table=with_estimates(seen, catalog))
        learned = truth
    forks = request.fork.max_copies > 1
    if forks and (forms or request.unprofiled):
        raise ConfigError("--fork: not with --gavel-faithful or --unprofiled")
    if forms:
        results = _run_faithful(request, forms, trace, trace_name, gpu_counts(nodes), site, out)
    else:
        results = []
        for name in request.policies:
            policy = _policy(name, request.policy_options, request.settings.seed)
            with _progress(request.progress, name, len(trace)) as bar:
                if forks:
                    results.append(
                        simulate_forked(
                            trace,
                            nodes,
                            policy,
                            site,
                            request.settings,
                            request.fork,
                            trace_name=trace_name,
                            progress=bar,
                        ).result
                    )
                    continue
                results.append(
                    simulate(
                        trace,
                        nodes,
                        policy,
                        site,
                        request.settings,
                        trace_name=trace_name,
                        progress=bar,
                        truth=learned,
                    )
                )
    from slurm_hetsched.sim.report import format_compare_table, format_summary, write_plots

    text = format_summary(results[0]) if len(results) == 1 else format_compare_table(results)
    if request.json_out != "-":
        print(text, file=out)
        if forks:
            print(f"forking: {request.fork.describe()}", file=out)
    if request.json_out is not None:
        _write_json(request.json_out, results, out)
    if request.plots_dir is not None:
        for path in write_plots(results, request.plots_dir):
            if request.json_out != "-":
                print(f"wrote {path}", file=out)
    return results


def _run_faithful(
    request: SimulateRequest,
    forms: Mapping[str, Form],
    trace: Trace,
    trace_name: str,
    counts: Mapping[str, int],
    site: SiteData,
    out: TextIO,
) -> list[SimResult]:
    """The policies' Gavel forms on the trace's GPU counts (`--gavel-faithful`), after a line
    naming the mode, its solver and the choices turned back to ours (not with `--json -`)."""
    solver = next(iter(forms.values())).solver
    ours = request.faithful_choices.ours
    if request.json_out != "-":
        print(
            f"Gavel-faithful mode (solver {solver}"
            + (f"; ours: {', '.join(ours)})" if ours else ")"),
            file=out,
        )
    return [
        faithful_result(
            trace, counts, form, site, request.settings, trace_name, request.faithful_choices
        )
        for form in forms.values()
    ]


def _hidden_table(table: ThroughputTable, unprofiled: Sequence[str]) -> ThroughputTable:
    """The table the policy sees with `--unprofiled` (checked: known types, or `all`)."""
    if tuple(unprofiled) == ("all",):
        return without(table, every=True)
    unknown = [t for t in unprofiled if t not in table.gpu_types]
    if unknown:
        raise ConfigError(
            f"--unprofiled {','.join(unprofiled)}: {', '.join(unknown)} not a column of the "
            f"throughput table ({', '.join(table.gpu_types)}); name its types, or `all`"
        )
    return without(table, unprofiled)


def _check_outputs(request: SimulateRequest) -> None:
    """Refuse outputs that cannot be written now, not after a run of minutes."""
    if request.json_out is not None and request.json_out != "-":
        _check_file_output(Path(request.json_out), "--json")
    if request.plots_dir is not None:
        from slurm_hetsched.sim.report import GPUS_BUSY_FILE, JCT_CDF_FILE

        _check_folder_output(request.plots_dir, "--plots")
        if request.plots_dir.is_dir():
            for name in (JCT_CDF_FILE, GPUS_BUSY_FILE):
                _check_file_output(request.plots_dir / name, "--plots")
        try:
            importlib.import_module("matplotlib.backends.backend_agg")
        except ImportError as exc:
            raise ConfigError(
                "--plots needs matplotlib, which is not installed: run `pip install "
                "'slurm-hetsched[plots]'`, or leave out --plots"
            ) from exc


def _check_file_output(path: Path, flag: str) -> None:
    if path.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder; give the path of a file to write")
    folder = path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist; create it first"
        raise ConfigError(f"{flag} {path}: {folder} {what}")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"{flag} {path}: not writable (permission denied)")


def _check_folder_output(path: Path, flag: str) -> None:
    """`path` is a writable folder, or one that can be created (as write_plots does)."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{flag} {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: cannot write in {existing} (permission denied)")


def _check_simulable(name: str) -> None:
    if name not in POLICIES:
        get_policy(name)  # raises the ConfigError that lists every policy
    if name.endswith("_packed"):
        raise ConfigError(
            f"policy {name!r} shares GPUs between pairs of jobs, which the round mechanism "
            "does not place yet; simulate its policy without `_packed` instead"
        )


def _policy(name: str, options: Mapping[str, Any], seed: int) -> Policy:
    """The policy with the run's options; a policy with randomness gets the run's seed."""
    chosen = dict(options)
    if "seed" in POLICIES[name].options and "seed" not in chosen:
        chosen["seed"] = seed  # ANDREAS: the run's --seed drives its random construction
    return get_policy(name, chosen)


def _load_trace(request: SimulateRequest, site: SiteData) -> tuple[Trace, str]:
    path = Path(request.trace)
    if path.is_file():
        return read_trace(path, request.trace_format, table=site.table), path.name
    stem = request.trace.removesuffix(".trace")
    if stem in SHIPPED_TRACES:
        return read_shipped_trace(stem, table=site.table), f"{stem}.trace (shipped)"
    raise ConfigError(
        f"trace {request.trace!r}: no such file, and not a shipped trace "
        f"({', '.join(SHIPPED_TRACES)})"
    )


def _write_json(target: str, results: Sequence[SimResult], out: TextIO) -> None:
    data: Any = results[0].to_json() if len(results) == 1 else [r.to_json() for r in results]
    text = json.dumps(data, indent=2)
    if target == "-":
        print(text, file=out)
        return
    try:
        Path(target).write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {exc.strerror}") from exc
    print(f"wrote {target}", file=out)


def _progress(enabled: bool, label: str, total: int) -> Any:
    from slurm_hetsched.sim.report import Progress

    return _ProgressAdapter(Progress(total=total, label=label, stream=sys.stderr), enabled)


class _ProgressAdapter:
    """The simulator's progress callback on top of the report's progress bar."""

    def __init__(self, bar: Any, enabled: bool) -> None:
        self.bar = bar
        self.enabled = enabled

    def __enter__(self) -> _ProgressAdapter:
        if self.enabled:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.bar.__exit__(*exc)

    def __call__(self, done: int, total: int, sim_time_s: float) -> None:
        if self.enabled:
            self.bar.update(done, sim_time_s=sim_time_s)
