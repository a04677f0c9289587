"""`hetsched devcluster` for real: a second, throw-away cluster on other ports, next to the one
the other integration tests use."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from slurm_hetsched.devcluster import DevCluster
from slurm_hetsched.devcluster.processes import pids_with_env
from slurm_hetsched.errors import DevClusterError
from slurm_hetsched.nodelayout import DevClusterConfig, NodeSpec
from slurm_hetsched.slurm import GpuRequest, JobOptions

from .conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")
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
def spare(tmp_path: Path, slurm_conf: str) -> Iterator[DevCluster]:
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


def poll(probe: Callable[[], T | None], what: str, polls: int = 600, pause_s: float = 0.2) -> T:
    """`probe()` once it is truthy; fails after `polls` tries (a generous bound, not a timing)."""
    last = None
    for _ in range(polls):
        last = probe()
        if last:
            return last
        time.sleep(pause_s)
    pytest.fail(f"gave up after {polls} polls waiting for {what} (last: {last!r})")


def slurm_runner(cluster: DevCluster) -> Callable[..., str]:
    """Runs a Slurm command (argv) against `cluster`; fails the test if it fails."""
    env = dict(os.environ, SLURM_CONF=str(cluster.slurm_conf))

    def run(*argv: str) -> str:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{argv}: {done.stderr}"
        return done.stdout.strip()

    return run


def wait_for_state_save(cluster: DevCluster, job_id: str) -> None:
    """Make slurmctld save its state and wait until it did.

    A SIGKILLed slurmctld keeps only what it saved, and it saves within seconds of a change:
    make one (the job's comment) and wait for the save, so the saved state is the current one.
    """

    def saved_at() -> int | None:  # None until slurmctld saved its jobs a first time
        try:
            return cluster.paths.job_state.stat().st_mtime_ns
        except FileNotFoundError:
            return None

    before = saved_at()
    slurm_runner(cluster)("scontrol", "update", f"JobId={job_id}", "Comment=saved")
    poll(lambda: saved_at() not in (None, before), "slurmctld's state save")


def kill_slurmctld(cluster: DevCluster) -> None:
    pid = cluster.slurmctld_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    poll(lambda: cluster.slurmctld_pid() is None, "slurmctld to die")


def test_up_after_slurmctld_was_killed_keeps_the_running_job(
    spare: DevCluster, tmp_path: Path
) -> None:
    assert "no saved state yet" in spare.up()
    slurm = slurm_runner(spare)

    def job_state() -> str:
        return slurm("squeue", "--noheader", "--jobs", job_id, "--format", "%T")

    def slurmds() -> dict[str, int]:
        return {n: pid for n, pid in spare.running_daemons().items() if n.startswith("slurmd ")}

    out = str(tmp_path / "out-%j")
    job_id = slurm("sbatch", "--parsable", "--output", out, "--wrap", "sleep 600").split(";")[0]
    try:
        poll(lambda: job_state() == "RUNNING", f"job {job_id} to run")
        # RUNNING comes a moment before the batch script has started its `sleep`.
        sleeping = poll(
            lambda: pids_with_env("SLURM_CONF", str(spare.slurm_conf), "sleep"), "the job's sleep"
        )
        wait_for_state_save(spare, job_id)
        before = slurmds()

        kill_slurmctld(spare)
        report = spare.up()

        assert "restarted from the state saved" in report
        assert job_state() == "RUNNING"
        # The very job went on: its slurmd was never restarted and its process still runs.
        assert slurmds() == before
        assert pids_with_env("SLURM_CONF", str(spare.slurm_conf), "sleep") == sleeping
    finally:
        env = dict(os.environ, SLURM_CONF=str(spare.slurm_conf))
        subprocess.run(["scancel", job_id], env=env, capture_output=True, check=False)
        if spare.slurmctld_pid() is None:  # failed with slurmctld down: no one cancels the job
            for pid in pids_with_env("SLURM_CONF", str(spare.slurm_conf), "sleep"):
                os.kill(pid, signal.SIGKILL)

    # `down` cancels every job, so the next `up` starts clean again.
    spare.down()
    assert "the last `down` had cancelled every job" in spare.up()
    assert spare.backend.list_jobs() == []


def test_up_clean_needs_a_stopped_cluster_and_discards_the_saved_jobs(spare: DevCluster) -> None:
    spare.up()
    slurm = slurm_runner(spare)
    job_id = slurm("sbatch", "--parsable", "--hold", "--wrap", "true").split(";")[0]
    wait_for_state_save(spare, job_id)
    kill_slurmctld(spare)

    with pytest.raises(DevClusterError, match=r"run `hetsched devcluster down` first"):
        spare.up(clean=True)  # the slurmds still run
    # With slurmctld dead, down cannot cancel the job, and says what becomes of it.
    assert "the next `up` restores them" in spare.down()

    assert "started clean (--clean)" in spare.up(clean=True)
    assert spare.backend.list_jobs() == []
