"""Which Slurm the backend talks to: the release is read from `sinfo --version` (recorded from
both clusters), remembered, and a Slurm older than 22.05 is refused with a message that says
what was found and what to do, by the backend and by the commands that use it."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hetsched.cli import main
from slurm_hetsched.errors import SlurmParseError
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.slurm.cli import SlurmCli
from slurm_hetsched.slurm.version import (
    OLDEST_SUPPORTED,
    SlurmVersion,
    UnsupportedSlurmError,
    check_supported,
    parse_version,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.mark.parametrize(
    ("folder", "release"),
    [("slurm-22.05", SlurmVersion(22, 5, 8)), ("slurm-26.05", SlurmVersion(26, 5, 5))],
)
def test_the_recorded_releases_are_read(folder: str, release: SlurmVersion) -> None:
    assert parse_version((GOLDEN / folder / "version.txt").read_text()) == release


def test_each_recording_folder_holds_the_release_it_is_named_after() -> None:
    folders = sorted(GOLDEN.glob("slurm-*"))
    assert len(folders) >= 2
    for folder in folders:
        release = parse_version((folder / "version.txt").read_text())
        assert folder.name == f"slurm-{release.major}.{release.minor:02d}", folder


def test_a_release_prints_as_slurm_writes_it_and_compares_with_short_tuples() -> None:
    assert str(SlurmVersion(22, 5, 8)) == "22.05.8"
    assert str(parse_version("slurm 24.11")) == "24.11.0"
    assert SlurmVersion(23, 2, 0) >= (23, 2) and SlurmVersion(22, 5, 8) < (23, 2)


def test_text_without_a_release_is_a_parse_error() -> None:
    with pytest.raises(SlurmParseError, match="cannot read the Slurm version"):
        parse_version("no digits here")


def test_22_05_and_newer_pass_and_older_is_refused() -> None:
    assert check_supported(OLDEST_SUPPORTED) == OLDEST_SUPPORTED
    assert check_supported(SlurmVersion(26, 5, 5)) == (26, 5, 5)
    with pytest.raises(UnsupportedSlurmError) as refused:
        check_supported(SlurmVersion(21, 8, 5), "sinfo --version on PATH")
    message = str(refused.value)
    assert "Slurm 21.08.5 found (sinfo --version on PATH) is too old" in message
    assert "needs Slurm 22.05 or newer" in message and "slurm.bin_dir" in message


def fake_slurm(folder: Path, release: str) -> Path:
    """A bin folder whose `sinfo --version` prints `release` and counts its calls."""
    folder.mkdir()
    sinfo = folder / "sinfo"
    sinfo.write_text(f'#!/bin/sh\necho called >> "{folder}/calls"\necho "slurm-wlm {release}"\n')
    sinfo.chmod(0o755)
    return folder


def test_the_backend_refuses_a_slurm_older_than_22_05(tmp_path: Path) -> None:
    backend = CliSlurmBackend(SlurmCli(bin_dir=str(fake_slurm(tmp_path / "bin", "21.08.5"))))
    with pytest.raises(UnsupportedSlurmError, match=r"Slurm 21\.08\.5 found .* too old"):
        backend.version()
    with pytest.raises(UnsupportedSlurmError):
        backend.list_nodes()  # chooses its command by the version: refused as well


def test_the_backend_asks_once_and_remembers(tmp_path: Path) -> None:
    bin_dir = fake_slurm(tmp_path / "bin", "22.05.8")
    backend = CliSlurmBackend(SlurmCli(bin_dir=str(bin_dir)))
    assert backend.version() == (22, 5, 8) and backend.version() == (22, 5, 8)
    assert (bin_dir / "calls").read_text().count("called") == 1


@pytest.mark.parametrize(
    "command", [["status"], ["controller", "--once"], ["controller", "--dry-run"]]
)
def test_status_and_the_controller_refuse_an_old_slurm_and_say_why(
    tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    bin_dir = fake_slurm(tmp_path / "bin", "21.08.5")
    config = tmp_path / "hetsched.toml"
    config.write_text(
        '[controller]\nstore = "rounds.sqlite"\nstate_root = "state"\n'
        f'[slurm]\nbin_dir = "{bin_dir}"\nretries = 0\n'
    )
    status = main([*command, "--config", str(config)])
    assert status != 0
    err = capsys.readouterr().err
    assert "Slurm 21.08.5 found" in err and "needs Slurm 22.05 or newer" in err
    assert not (tmp_path / "rounds.sqlite").exists(), "no round ran"
    assert not (tmp_path / "state").exists(), "nothing was made"
