"""`hetsched` itself: help, version and errors as a user sees them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hetsched import __version__
from slurm_hetsched.cli import main


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"hetsched {__version__}"


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "devcluster" in capsys.readouterr().out


def test_devcluster_up_as_non_root_is_refused_clearly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert main(["devcluster", "--dir", str(tmp_path), "up"]) == 1
    assert "runs Slurm's daemons as root" in capsys.readouterr().err


def test_a_bad_layout_file_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = tmp_path / "layout.toml"
    layout.write_text("[[nodes]]\nname = 'n1'\ngpus = { v100 = -1 }\n")
    assert main(["devcluster", "--config", str(layout), "--dir", str(tmp_path), "status"]) == 1
    assert "gpus.v100" in capsys.readouterr().err


ROOT = Path(__file__).resolve().parents[2]


def test_allocate_solves_gavels_worked_example(capsys: pytest.CaptureFixture[str]) -> None:
    problem = ROOT / "examples" / "gavel_worked_example.json"
    assert main(["allocate", "--problem", str(problem), "--policy", "max_min_fairness_perf"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["policy"] == "max_min_fairness_perf"
    assert result["allocation"]["j2"] == {"v100": 0.091, "k80": 0.909}
    assert result["objective"] == pytest.approx(0.727, abs=1e-3)


def test_allocate_lists_the_policies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["allocate", "--list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert {"max_min_fairness_perf", "max_min_fairness_water_filling"} <= set(names)


def test_allocate_errors_name_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    problem = ROOT / "examples" / "gavel_worked_example.json"
    assert main(["allocate", "--problem", str(problem), "--policy", "no_such_policy"]) == 1
    assert "no_such_policy" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text('{"gpus": {"v100": 1},')
    assert main(["allocate", "--problem", str(broken)]) == 1
    assert "not valid JSON" in capsys.readouterr().err


def test_a_bad_log_level_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HETSCHED_LOG_LEVEL", "loud")
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "hetsched: error: HETSCHED_LOG_LEVEL='loud' is not a log level; "
        "use one of DEBUG, INFO, WARNING, ERROR, CRITICAL (any case)"
    ]


def run_hetsched(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`hetsched` in a process of its own (the controller configures the process's logging)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HETSCHED_CONFIG", "SLURM_CONF")}
    env["PYTHONPATH"] = str(ROOT)  # this checkout, run from `cwd`
    return subprocess.run(
        [sys.executable, "-m", "slurm_hetsched.cli", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        check=False,
    )


@pytest.mark.parametrize("mode", ["--once", "--dry-run"])
def test_a_single_round_that_was_skipped_fails_with_why(tmp_path: Path, mode: str) -> None:
    config = tmp_path / "hetsched.toml"
    # Slurm's tools in a folder that does not exist: the round cannot read the queue.
    config.write_text(
        '[controller]\nstore = "rounds.sqlite"\nstate_root = "state"\n'
        '[slurm]\nbin_dir = "no-slurm-here"\nretries = 0\n'
    )
    done = run_hetsched(
        "controller", "--config", str(config), mode, "--log-level", "error", cwd=tmp_path
    )
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("hetsched: error: round skipped (slurm-unavailable): ")
    assert "no-slurm-here/squeue not found" in line
    assert "nothing was changed" not in done.stdout  # a dry run that saw nothing plans nothing
