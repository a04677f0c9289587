"""`hetsched simulate` checks where it will write, and matplotlib for plots, before it simulates:
a run of minutes must not end in an error about its output."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim import command
from slurm_hetsched.sim.command import SimulateRequest, run_simulate


class Simulated(Exception):
    """Raised instead of simulating: the checks before it passed."""


@pytest.fixture(autouse=True)
def no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    def simulate(*args: Any, **kwargs: Any) -> None:
        raise Simulated

    monkeypatch.setattr(command, "simulate", simulate)


def request(**outputs: Any) -> SimulateRequest:
    return SimulateRequest(
        trace="small_test", policies=("max_min_fairness_perf",), cluster="v100=4,p100=4,k80=4",
        progress=False, **outputs,
    )  # fmt: skip


def test_outputs_that_can_be_written_pass(tmp_path: Path) -> None:
    with pytest.raises(Simulated):
        run_simulate(request(json_out=str(tmp_path / "r.json"), plots_dir=tmp_path / "new" / "p"))
    with pytest.raises(Simulated):
        run_simulate(request(json_out="-"))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: {"json_out": str(tmp)}, r"--json .*: is a folder; give the path of a file"),
        (
            lambda tmp: {"json_out": str(tmp / "missing" / "r.json")},
            r"missing does not exist; create it first",
        ),
        (lambda tmp: {"json_out": str(tmp / "file" / "r.json")}, r"file is not a folder"),
        (lambda tmp: {"plots_dir": tmp / "file"}, r"--plots .*file is a file, not a folder"),
        (lambda tmp: {"plots_dir": tmp / "file" / "p"}, r"file is a file, not a folder"),
        (lambda tmp: {"plots_dir": tmp / "busy"}, r"jct_cdf.png: is a folder"),
    ],
    ids=["json-folder", "json-no-parent", "json-parent-file", "plots-file", "plots-under-file",
         "plots-png-folder"],
)  # fmt: skip
def test_an_output_that_cannot_be_written_fails_before_simulating(
    tmp_path: Path, make: Any, message: str
) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "busy" / "jct_cdf.png").mkdir(parents=True)
    with pytest.raises(ConfigError, match=message):
        run_simulate(request(**make(tmp_path)))


def test_a_folder_without_write_permission_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # os.access, since root (the tests' usual user) may write anywhere.
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(ConfigError, match=r"--json .*r\.json: not writable \(permission denied\)"):
        run_simulate(request(json_out=str(tmp_path / "r.json")))
    with pytest.raises(ConfigError, match=r"--plots .*: cannot write in .* \(permission denied\)"):
        run_simulate(request(plots_dir=tmp_path / "p"))


def test_plots_without_matplotlib_fail_before_simulating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes the import fail, as if matplotlib were not installed.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(ConfigError, match=r"--plots needs matplotlib.*slurm-hetsched\[plots\]"):
        run_simulate(request(plots_dir=tmp_path / "p"))
    with pytest.raises(Simulated):  # only plots need it
        run_simulate(request(json_out=str(tmp_path / "r.json")))
