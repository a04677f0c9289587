"""`hetsched` itself: help, version and errors as a user sees them."""

from __future__ import annotations

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
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert main(["devcluster", "--dir", str(tmp_path), "up"]) == 1
    assert "runs Slurm's daemons as root" in capsys.readouterr().err


def test_a_bad_layout_file_is_a_clear_error(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    layout = tmp_path / "layout.toml"
    layout.write_text("[[nodes]]\nname = 'n1'\ngpus = { v100 = -1 }\n")
    assert main(["devcluster", "--config", str(layout), "--dir", str(tmp_path), "status"]) == 1
    assert "gpus.v100" in capsys.readouterr().err
