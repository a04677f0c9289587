"""Registering SPANK plugins in the dev cluster: plugstack.conf, `up --spank`, reconfigure."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_hetsched.cli import build_parser
from slurm_hetsched.devcluster import DevCluster, cluster, processes
from slurm_hetsched.devcluster.cluster import resolve_spank_plugins
from slurm_hetsched.devcluster.render import render_plugstack_conf
from slurm_hetsched.errors import DevClusterError
from slurm_hetsched.nodelayout import default_devcluster_config
from slurm_hetsched.slurm import CliSlurmBackend, SlurmCli


def test_plugstack_lists_every_plugin_optional_in_order() -> None:
    text = render_plugstack_conf([Path("/a/hetsched_spank.so"), Path("/b/other.so")])
    lines = text.splitlines()
    assert lines[0].startswith("#")
    assert lines[1:] == ["optional /a/hetsched_spank.so", "optional /b/other.so"]
    assert render_plugstack_conf([]).splitlines()[1:] == []


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("spank/hetsched_spank.so", "must be absolute"),
        ("/my plugins/x.so", "whitespace or '#'"),
        ("/plugins#2/x.so", "whitespace or '#'"),
    ],
)
def test_plugstack_refuses_paths_it_cannot_hold(path: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render_plugstack_conf([Path(path)])


def test_plugin_paths_are_made_absolute_and_deduplicated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "spank").mkdir()
    so = tmp_path / "spank" / "hetsched_spank.so"
    so.write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    found = resolve_spank_plugins(
        [Path("spank/hetsched_spank.so"), Path("./spank/../spank/hetsched_spank.so")]
    )
    assert found == (so,)


def test_a_missing_plugin_names_the_file_and_how_to_build_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        DevClusterError, match=r"hetsched_spank\.so not found.*make -C spank"
    ) as err:
        resolve_spank_plugins([Path("spank/hetsched_spank.so")])
    assert str(tmp_path / "spank" / "hetsched_spank.so") in str(err.value)


def test_a_plugin_path_plugstack_cannot_hold_is_a_clear_error(tmp_path: Path) -> None:
    so = tmp_path / "with space.so"
    so.write_bytes(b"")
    with pytest.raises(DevClusterError, match="whitespace"):
        resolve_spank_plugins([so])


def test_cli_up_takes_repeated_spank_options() -> None:
    args = build_parser().parse_args(["devcluster", "up", "--spank", "a.so", "--spank", "/b/b.so"])
    assert args.spank == [Path("a.so"), Path("/b/b.so")]
    assert build_parser().parse_args(["devcluster", "up"]).spank is None


class _RecordingCli(SlurmCli):
    def __init__(self) -> None:
        super().__init__()
        object.__setattr__(self, "calls", [])

    def run(self, argv: Sequence[str], *, input_text: str | None = None) -> str:
        self.calls.append(list(argv))  # type: ignore[attr-defined]
        return ""


def test_backend_reconfigure_is_one_scontrol_call() -> None:
    cli = _RecordingCli()
    CliSlurmBackend(cli).reconfigure()
    assert cli.calls == [["scontrol", "reconfigure"]]  # type: ignore[attr-defined]


class _FakeBackend:
    def __init__(self) -> None:
        self.reconfigured = 0

    def reconfigure(self) -> None:
        self.reconfigured += 1


@pytest.fixture
def running_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[DevCluster, _FakeBackend, list[str]]:
    """A DevCluster whose daemons all 'run': nothing is started or stopped for real."""
    dev = DevCluster(default_devcluster_config(), tmp_path / "cluster")
    backend = _FakeBackend()
    restarted: list[str] = []
    pids = {"slurmctld": 100}
    pids |= {f"slurmd {node.name}": 101 + i for i, node in enumerate(dev.config.nodes)}
    monkeypatch.setattr(cluster.os, "geteuid", lambda: 0)
    monkeypatch.setattr(dev, "backend", backend)
    monkeypatch.setattr(dev, "running_daemons", lambda: dict(pids))
    monkeypatch.setattr(dev, "slurmd_pid", lambda node: pids[f"slurmd {node}"])
    monkeypatch.setattr(dev, "_check_same_layout", lambda: None)
    monkeypatch.setattr(dev, "_wait_ready", lambda: None)
    monkeypatch.setattr(dev, "status", lambda: "(status)")
    monkeypatch.setattr(dev, "_start_slurmd", restarted.append)
    monkeypatch.setattr(processes, "stop", lambda pids, timeout_s=10.0: [])
    return dev, backend, restarted


def test_up_on_a_running_cluster_registers_and_reloads_once(
    running_cluster: tuple[DevCluster, _FakeBackend, list[str]], tmp_path: Path
) -> None:
    dev, backend, restarted = running_cluster
    so = tmp_path / "hetsched_spank.so"
    so.write_bytes(b"")

    report = dev.up([so])
    assert dev.paths.plugstack_conf.read_text().splitlines()[-1] == f"optional {so}"
    assert backend.reconfigured == 1
    # A 22.05 slurmd only notices a new job prolog when it starts.
    assert restarted == ["n1", "n2", "n3"]
    assert "scontrol reconfigure" in report and str(so) in report

    report = dev.up([so])  # idempotent: same list, nothing to do
    assert backend.reconfigured == 1 and len(restarted) == 3
    assert "unchanged" in report

    dev.up()  # no --spank: the registered plugins stay
    assert f"optional {so}" in dev.paths.plugstack_conf.read_text()
    assert backend.reconfigured == 1

    dev.up([])  # an empty list unregisters them
    assert "optional" not in dev.paths.plugstack_conf.read_text().split("\n", 1)[1]
    assert backend.reconfigured == 2


def test_up_refuses_a_missing_plugin_before_touching_anything(
    running_cluster: tuple[DevCluster, _FakeBackend, list[str]], tmp_path: Path
) -> None:
    dev, backend, _ = running_cluster
    with pytest.raises(DevClusterError, match="make -C spank"):
        dev.up([tmp_path / "missing.so"])
    assert not dev.paths.plugstack_conf.exists()
    assert backend.reconfigured == 0
