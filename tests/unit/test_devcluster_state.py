"""How `devcluster up` starts slurmctld (keeping or discarding its saved state), without Slurm."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_hetsched.cli import build_parser
from slurm_hetsched.devcluster import DevCluster, cluster, install, processes
from slurm_hetsched.devcluster.render import ClusterPaths
from slurm_hetsched.devcluster.state import StartMode, choose_start, slurmctld_argv
from slurm_hetsched.errors import DevClusterError
from slurm_hetsched.nodelayout import default_devcluster_config
from slurm_hetsched.slurm import SlurmNode


def saved_state(paths: ClusterPaths) -> None:
    paths.state.mkdir(parents=True)
    paths.job_state.write_bytes(b"saved by slurmctld")


def test_a_new_folder_starts_clean(tmp_path: Path) -> None:
    assert choose_start(ClusterPaths(tmp_path), clean=False) is StartMode.FIRST


def test_saved_state_of_a_slurmctld_that_died_is_restored(tmp_path: Path) -> None:
    paths = ClusterPaths(tmp_path)
    saved_state(paths)
    assert choose_start(paths, clean=False) is StartMode.RESTORE


def test_after_a_down_that_cancelled_every_job_it_starts_clean(tmp_path: Path) -> None:
    paths = ClusterPaths(tmp_path)
    saved_state(paths)
    paths.run.mkdir()
    paths.stopped_clean.touch()
    assert choose_start(paths, clean=False) is StartMode.AFTER_DOWN


def test_clean_wins_over_saved_state(tmp_path: Path) -> None:
    paths = ClusterPaths(tmp_path)
    saved_state(paths)
    assert choose_start(paths, clean=True) is StartMode.CLEAN


def test_only_a_restore_starts_slurmctld_without_c() -> None:
    conf = Path("/d/etc/slurm.conf")
    # -i would silently drop jobs whose state cannot be read: not on a restore either.
    assert slurmctld_argv(conf, StartMode.RESTORE) == ["slurmctld", "-f", str(conf)]
    for mode in (StartMode.FIRST, StartMode.AFTER_DOWN, StartMode.CLEAN):
        assert slurmctld_argv(conf, mode) == ["slurmctld", "-f", str(conf), "-c", "-i"]


def test_the_cli_has_a_clean_flag() -> None:
    assert build_parser().parse_args(["devcluster", "up", "--clean"]).clean is True
    assert build_parser().parse_args(["devcluster", "up"]).clean is False


@pytest.fixture
def dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DevCluster:
    """A DevCluster that starts and stops nothing for real."""
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(processes, "stop", lambda pids, timeout_s=10.0: [])
    monkeypatch.setattr(processes, "pids_with_env", lambda *args: [])
    return DevCluster(default_devcluster_config(), tmp_path / "cluster")


def test_up_clean_refuses_a_running_cluster(
    dev: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dev, "running_daemons", lambda: {"slurmd n1": 12})
    with pytest.raises(DevClusterError, match=r"slurmd n1 .*`hetsched devcluster down` first"):
        dev.up(clean=True)


def test_down_that_cancelled_every_job_makes_the_next_up_start_clean(
    dev: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved_state(dev.paths)
    monkeypatch.setattr(dev, "slurmctld_pid", lambda: 10)
    monkeypatch.setattr(dev, "running_daemons", lambda: {"slurmctld": 10, "slurmd n1": 11})
    monkeypatch.setattr(dev, "_cancel_all_jobs", lambda: 2)
    assert dev.down() == "cancelled 2 job(s); stopped slurmd n1, slurmctld"
    assert choose_start(dev.paths, clean=False) is StartMode.AFTER_DOWN


@pytest.mark.parametrize("slurmctld", ["dead", "not answering"])
def test_down_that_cancelled_nothing_leaves_the_saved_jobs_and_says_so(
    dev: DevCluster, monkeypatch: pytest.MonkeyPatch, slurmctld: str
) -> None:
    saved_state(dev.paths)
    daemons = {"slurmd n1": 11}
    if slurmctld == "not answering":
        daemons["slurmctld"] = 10
        monkeypatch.setattr(dev, "slurmctld_pid", lambda: 10)
        monkeypatch.setattr(dev, "_cancel_all_jobs", lambda: None)
    else:
        monkeypatch.setattr(dev, "slurmctld_pid", lambda: None)
    monkeypatch.setattr(dev, "running_daemons", lambda: dict(daemons))
    assert "the next `up` restores them (`hetsched devcluster up --clean`" in dev.down()
    assert choose_start(dev.paths, clean=False) is StartMode.RESTORE


def node(name: str, state: str, *flags: str) -> SlurmNode:
    return SlurmNode(name, state, flags, {"v100": 2}, {}, ("v100",), ("v100",), ("gpu",), "", 8, 0)


class _Nodes:
    def __init__(self, nodes: list[SlurmNode]) -> None:
        self.nodes = nodes

    def list_nodes(self) -> list[SlurmNode]:
        return self.nodes


def test_a_drain_restored_from_the_saved_state_does_not_block_up(
    dev: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = [node("n1", "IDLE", "DRAIN"), node("n2", "MIXED"), node("n3", "IDLE")]
    monkeypatch.setattr(dev, "backend", _Nodes(nodes))
    assert dev._wait_ready() == ["n1"]


def test_a_node_that_does_not_answer_is_not_ready(
    dev: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = [node("n1", "IDLE", "DRAIN", "NOT_RESPONDING"), node("n2", "IDLE"), node("n3", "IDLE")]
    monkeypatch.setattr(dev, "backend", _Nodes(nodes))
    monkeypatch.setattr(dev, "slurmctld_pid", lambda: 10)
    monkeypatch.setattr(cluster, "READY_TIMEOUT_S", 0.5)  # a few polls, not a minute
    with pytest.raises(DevClusterError, match=r"nodes not ready .*n1=IDLE"):
        dev._wait_ready()


def test_a_slurmctld_that_stops_while_starting_shows_its_log(
    dev: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev.paths.log.mkdir(parents=True)
    dev.paths.slurmctld_log.write_text("fatal: Incomplete job state save file\n")
    monkeypatch.setattr(dev, "backend", _Nodes([]))
    monkeypatch.setattr(dev, "slurmctld_pid", lambda: None)
    with pytest.raises(DevClusterError, match=r"slurmctld stopped; .*\n.*Incomplete job state"):
        dev._wait_ready()


def test_a_restore_that_fails_says_how_to_start_without_the_state(
    dev: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved_state(dev.paths)
    modes = []

    def start_daemons(running: dict[str, int], mode: StartMode) -> None:
        modes.append(mode)
        raise DevClusterError("slurmctld stopped; fatal: Incomplete job state save file")

    monkeypatch.setattr(install, "ensure_installed", lambda: False)
    monkeypatch.setattr(install, "ensure_munged", lambda started: None)
    monkeypatch.setattr(dev, "running_daemons", lambda: {})
    monkeypatch.setattr(dev, "_check_ports", lambda running: None)
    monkeypatch.setattr(dev, "_start_daemons", start_daemons)
    with pytest.raises(
        DevClusterError, match=r"Incomplete job.*\n.*`hetsched devcluster up --clean`"
    ):
        dev.up()
    with pytest.raises(DevClusterError) as clean:  # a clean start has nothing to say about it
        dev.up(clean=True)
    assert "--clean" not in str(clean.value)
    assert modes == [StartMode.RESTORE, StartMode.CLEAN]
