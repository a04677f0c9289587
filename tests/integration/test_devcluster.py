"""`hetsched devcluster` for real: a second, throw-away cluster on other ports, next to the one
the other integration tests use."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hetsched.devcluster import DevCluster
from slurm_hetsched.devcluster.config import DevClusterConfig, NodeSpec
from slurm_hetsched.devcluster.processes import pids_with_env
from slurm_hetsched.errors import DevClusterError
from slurm_hetsched.slurm import GpuRequest, JobOptions

from .conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
SPARE = DevClusterConfig(
    name="spare",
    nodes=(NodeSpec("s1", {"a100": 1, "t4": 2}, 4, 2000), NodeSpec("s2", {"k80": 2}, 4, 2000)),
    slurmctld_port=6917,
    slurmd_port_base=6920,
)


def processes_using(conf: Path) -> list[str]:
    """Command lines of every process started with our slurm.conf (argv or environment)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(conf).encode() in argv:
            found.append(b" ".join(argv).decode())
    return found + [str(pid) for pid in pids_with_env("SLURM_CONF", str(conf), "slurmstepd")]


@pytest.fixture
def spare(tmp_path: Path, slurm_conf: str) -> DevCluster:
    cluster = DevCluster(SPARE, tmp_path / "spare")
    yield cluster
    cluster.down()


def test_up_runs_every_node_with_its_gpu_types_then_down_leaves_nothing(
    spare: DevCluster, tmp_path: Path
) -> None:
    report = spare.up()
    assert "s1" in report and "s2" in report
    nodes = {n.name: n for n in spare.backend.list_nodes()}
    assert {name: dict(n.gpus) for name, n in nodes.items()} == {
        "s1": {"a100": 1, "t4": 2},
        "s2": {"k80": 2},
    }
    assert nodes["s1"].features == ("a100", "t4")
    assert len(spare.running_daemons()) == 3

    again = spare.up()  # idempotent: reports the running cluster
    assert again.startswith("dev cluster already running")
    assert "s2" in spare.status()

    # A running job is cancelled by down, and no daemon or job step is left behind.
    job_id = spare.backend.submit(
        "#!/bin/bash\nsleep 600\n",
        [JobOptions(gpus=GpuRequest(2, "t4"), output=str(tmp_path / "out-%j"))],
    )
    wait_for(lambda: spare.backend.job(job_id).state.value == "RUNNING", "job running")
    assert processes_using(spare.slurm_conf)
    summary = spare.down()
    assert "cancelled 1 job" in summary
    assert processes_using(spare.slurm_conf) == []
    assert spare.running_daemons() == {}
    assert "not running" in spare.status()
    assert spare.down() == "dev cluster was not running"


def test_a_taken_port_is_reported_with_what_to_change(tmp_path: Path, slurm_conf: str) -> None:
    with socket.socket() as blocker:
        blocker.bind(("0.0.0.0", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        cluster = DevCluster(dataclasses.replace(SPARE, slurmctld_port=port), tmp_path / "c")
        with pytest.raises(DevClusterError, match=f"port {port} for slurmctld.*slurmctld_port"):
            cluster.up()
    assert cluster.running_daemons() == {}


def test_a_daemon_that_fails_to_start_shows_its_log(tmp_path: Path, slurm_conf: str) -> None:
    broken = dataclasses.replace(SPARE, extra={"NoSuchSlurmKey": "1"})
    cluster = DevCluster(broken, tmp_path / "broken")
    try:
        with pytest.raises(DevClusterError) as caught:
            cluster.up()
        message = str(caught.value)
        assert "slurmctld did not start" in message
        assert "NoSuchSlurmKey" in message  # the tail of slurmctld's log or its stderr
    finally:
        cluster.down()
    assert processes_using(cluster.slurm_conf) == []


def test_cli_reports_the_running_dev_cluster(slurm_conf: str) -> None:
    env = dict(os.environ, SLURM_CONF=slurm_conf)
    folder = Path(slurm_conf).parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "slurm_hetsched.cli", "devcluster", "--dir", str(folder), "status"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["NODE", "STATE", "GPUS"]
    assert any(line.startswith("n3 ") and "k80:" in line for line in lines)
