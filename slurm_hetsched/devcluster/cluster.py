"""Bring the local dev cluster up and down: munged, one slurmctld, one slurmd per node.

Everything lives under one folder (config, state, logs, pid files, fake GPU devices). Daemons
are started with `-f <our slurm.conf>`, so they can be recognised by command line and only
they are ever stopped.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import slurm_hetsched.devcluster.install as install
import slurm_hetsched.devcluster.processes as processes
import slurm_hetsched.devcluster.state as state
from slurm_hetsched.devcluster.accounting import Accounting
from slurm_hetsched.devcluster.files import write_cluster_files
from slurm_hetsched.devcluster.plugins import plugins_line, resolve_spank_plugins, write_plugstack
from slurm_hetsched.devcluster.render import (
    ClusterPaths,
    render_plugstack_conf,
    render_slurm_conf,
)
from slurm_hetsched.devcluster.tables import format_jobs, format_nodes
from slurm_hetsched.errors import DevClusterError, SlurmError
from slurm_hetsched.nodelayout import DevClusterConfig
from slurm_hetsched.slurm import CliSlurmBackend, SlurmCli, SlurmNode

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 60.0
# A daemon killed just before `up` shows as gone (its main thread a zombie) while its other
# threads finish their system calls, e.g. a state save's fsync, still holding its port.
PORT_RELEASE_S = 5.0


class DevCluster:
    """One dev cluster: a layout plus the folder it runs in."""

    def __init__(self, config: DevClusterConfig, folder: Path) -> None:
        self.config = config
        self.paths = ClusterPaths(folder)
        self.backend = CliSlurmBackend(SlurmCli(slurm_conf=str(self.slurm_conf), timeout_s=20))
        self.accounting = Accounting(config, self.paths)
        self.accounting_on = False  # what `up` renders slurm.conf with

    @property
    def slurm_conf(self) -> Path:
        return self.paths.slurm_conf

    # --- what runs -------------------------------------------------------------------------
    def _marker(self) -> str:
        return str(self.slurm_conf)

    def slurmctld_pid(self) -> int | None:
        pid = processes.read_pid(self.paths.slurmctld_pid)
        return pid if processes.is_our_process(pid, "slurmctld", self._marker()) else None

    def slurmd_pid(self, node: str) -> int | None:
        pid = processes.read_pid(self.paths.slurmd_pid(node))
        return pid if processes.is_our_process(pid, "slurmd", self._marker()) else None

    def running_daemons(self) -> dict[str, int]:
        """Daemons of this cluster that are alive, by name ('slurmctld', 'slurmd n1', ...)."""
        found = {}
        if (pid := self.slurmctld_pid()) is not None:
            found["slurmctld"] = pid
        for node in self.config.nodes:
            if (pid := self.slurmd_pid(node.name)) is not None:
                found[f"slurmd {node.name}"] = pid
        return found

    def is_running(self) -> bool:
        return len(self.running_daemons()) == 1 + len(self.config.nodes)

    # --- up --------------------------------------------------------------------------------
    def up(
        self,
        spank_plugins: Sequence[Path] | None = None,
        *,
        clean: bool = False,
        accounting: bool | None = None,
    ) -> str:
        """Install if needed, start what is not running, wait until every node is idle.

        slurmctld restarts from its saved state (jobs kept), unless the folder is new, the last
        stop was a `down` (which cancels every job) or `clean` is given (devcluster/state.py).

        Args:
            spank_plugins: SPANK plugin .so files to register (as `optional`) in
                etc/plugstack.conf, replacing the ones listed there. None keeps the file as it
                is (an empty one on the first start). When the list changes on a running
                cluster, `scontrol reconfigure` makes new job steps load it, and the slurmds
                are restarted so their job prolog runs it too (running jobs go on).
            clean: start slurmctld without its saved state (every saved job and node state
                is lost); only on a stopped cluster.
            accounting: also run slurmdbd and a private MariaDB, with the accounts and quotas
                of devcluster/tenants.py; None keeps what the last `up` chose until a `down`.

        Returns a report: the cluster's nodes and how to reach it. Idempotent.

        Raises:
            DevClusterError: not root, a plugin that does not exist, `clean` while a daemon
                runs, a port taken, a daemon that does not start (with the tail of its log),
                or nodes that never become idle.
        """
        _require_root()
        marked = self.paths.accounting_marker.exists()
        self.accounting_on = marked if accounting is None else accounting
        plugins = None if spank_plugins is None else resolve_spank_plugins(spank_plugins)
        running = self.running_daemons()
        if clean and running:
            raise DevClusterError(
                f"--clean starts slurmctld without its saved state, but {', '.join(running)} "
                f"of the dev cluster in {self.paths.root} still run: run `hetsched devcluster "
                "down` first (it cancels every job), then `hetsched devcluster up --clean`"
            )
        if len(running) == 1 + len(self.config.nodes):
            self._check_same_layout()
            report = "dev cluster already running"
            report += self.accounting.up(self.accounting_on, slurmctld_runs=True)
            if plugins is not None and write_plugstack(self.paths, plugins):
                report += "\n" + self._reload_plugins(running, plugins)
            elif plugins is not None:
                report += "\n" + plugins_line(plugins) + " (unchanged)"
            return report + "\n" + self.status()
        if running:
            self._check_same_layout()
        started = time.monotonic()
        install.ensure_installed()
        if self.accounting_on:
            install.ensure_installed(accounting=True)
        self._check_ports(running)
        install.ensure_munged(self.paths.munged_started)
        if "slurmctld" not in running:
            self._write_files()
        accounting_report = self.accounting.up(self.accounting_on, slurmctld_runs=False)
        changed = plugins is not None and write_plugstack(self.paths, plugins)
        mode = state.choose_start(self.paths, clean=clean)
        try:
            self._start_daemons(running, mode)
            drained = self._wait_ready()
        except DevClusterError as exc:
            if mode is state.StartMode.RESTORE and "slurmctld" not in running:
                raise DevClusterError(f"{exc}\n{state.restart_hint(self.paths)}") from exc
            raise
        accounting_report += self.accounting.up(self.accounting_on, slurmctld_runs=True)
        report = f"dev cluster up in {time.monotonic() - started:.1f} s ({self.paths.root})"
        report += accounting_report + "\n"
        if "slurmctld" not in running:
            report += state.describe(mode, self.paths) + "\n"
        if drained:
            report += (
                f"drained, so taking no jobs: {', '.join(drained)}; resume with "
                f"`scontrol update NodeName={','.join(drained)} State=RESUME`\n"
            )
        if changed and running:
            report += self._reload_plugins(running, plugins or ()) + "\n"
        elif plugins:
            report += plugins_line(plugins) + "\n"
        return report + self.status() + f"\nuse it with: export SLURM_CONF={self.slurm_conf}"

    def install(self, *, accounting: bool = False) -> str:
        """Install Slurm, its headers (for the SPANK plugin) and munge when missing; with
        `accounting`, slurmdbd and MariaDB's server too."""
        _require_root()
        done = "installed" if install.ensure_installed(accounting=accounting) else "already have"
        return f"{done} " + " ".join(install.packages(accounting=accounting))

    def _check_same_layout(self) -> None:
        host, on = _controller_host(), self.accounting_on
        wanted = render_slurm_conf(self.config, self.paths, host, accounting=on)
        try:
            current = self.slurm_conf.read_text()
        except OSError:
            current = ""
        if current == render_slurm_conf(self.config, self.paths, host, accounting=not on):
            raise DevClusterError(
                f"the dev cluster in {self.paths.root} runs {'without' if on else 'with'} "
                "accounting: run `hetsched devcluster down` first, then `up`"
                + (" --accounting" if on else "")
            )
        if current != wanted:
            raise DevClusterError(
                f"a dev cluster runs in {self.paths.root} with another layout or settings: "
                "run `hetsched devcluster down` first"
            )

    def _check_ports(self, running: dict[str, int]) -> None:
        wanted = []
        if "slurmctld" not in running:
            wanted.append(("slurmctld", self.config.slurmctld_port, "slurmctld_port"))
        for index, node in enumerate(self.config.nodes):
            if f"slurmd {node.name}" not in running:
                port = self.config.slurmd_port(index)
                wanted.append((f"slurmd {node.name}", port, "slurmd_port_base"))
        processes.wait_for_free_ports(wanted, PORT_RELEASE_S)

    def _write_files(self) -> None:
        host = _controller_host()
        write_cluster_files(self.config, self.paths, host, accounting=self.accounting_on)
        if not self.paths.plugstack_conf.exists():
            self.paths.plugstack_conf.write_text(render_plugstack_conf([]))

    def _reload_plugins(self, running: dict[str, int], plugins: Sequence[Path]) -> str:
        """Make daemons that were already running load the plugstack.conf just written.

        Each job step's slurmstepd and each sbatch read plugstack.conf afresh, but a Slurm
        22.05 slurmd decides when it starts whether any plugin has a job prolog, and
        `scontrol reconfigure` does not change that: the slurmds that ran before are
        restarted (their job steps keep running), then the cluster is reconfigured. In that
        order, since a slurmd still busy with a reconfigure can take seconds to stop.
        """
        restarted = []
        for node in self.config.nodes:
            pid = running.get(f"slurmd {node.name}")
            if pid is None or self.slurmd_pid(node.name) != pid:
                continue  # started just now: it read the new plugstack.conf already
            processes.stop([pid])
            self._start_slurmd(node.name)
            restarted.append(node.name)
        if restarted:
            self._wait_ready()
        try:
            self.backend.reconfigure()
        except SlurmError as exc:
            raise DevClusterError(
                f"{self.paths.plugstack_conf} rewritten, but reconfigure failed: {exc}"
            ) from exc
        detail = "scontrol reconfigure"
        if restarted:
            detail = "restarted slurmd " + ", ".join(restarted) + ", " + detail
        return f"{plugins_line(plugins)} ({detail})"

    def _start_daemons(self, running: dict[str, int], mode: state.StartMode) -> None:
        if "slurmctld" not in running:
            self._start(
                "slurmctld",
                state.slurmctld_argv(self.slurm_conf, mode),
                self.paths.slurmctld_log,
                self.slurmctld_pid,
            )
            state.forget_stopped_clean(self.paths)
        for node in self.config.nodes:
            if f"slurmd {node.name}" not in running:
                self._start_slurmd(node.name)

    def _start_slurmd(self, node: str) -> None:
        self._start(
            f"slurmd {node}",
            ["slurmd", "-f", str(self.slurm_conf), "-N", node],
            self.paths.slurmd_log(node),
            functools.partial(self.slurmd_pid, node),
        )

    def _start(
        self, what: str, argv: list[str], log: Path, pid_of: Callable[[], int | None]
    ) -> None:
        env = dict(os.environ, SLURM_CONF=str(self.slurm_conf))
        program = install.which(argv[0])
        if program is None:
            raise DevClusterError(f"{argv[0]} is not installed")
        done = subprocess.run(
            [program, *argv[1:]], env=env, capture_output=True, text=True, check=False
        )
        deadline = time.monotonic() + 10
        while done.returncode == 0 and time.monotonic() < deadline:
            if pid_of() is not None:
                return
            time.sleep(0.05)
        raise DevClusterError(
            f"{what} did not start (exit {done.returncode}). {done.stderr.strip()}\n"
            f"last lines of {log}:\n{processes.tail(log)}"
        )

    def _wait_ready(self) -> list[str]:
        """Wait until every node answers; returns the drained ones (ready, but taking no jobs)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        nodes: list[SlurmNode] = []
        last_error = ""
        while time.monotonic() < deadline:
            try:
                nodes = self.backend.list_nodes()
                last_error = ""
            except SlurmError as exc:
                last_error = str(exc)
            # Nodes that already run jobs (a partial restart) count as ready too, and so do
            # drained ones: a drain restored from the saved state is an admin's decision.
            drained = [n.name for n in nodes if state.drained_but_answering(n)]
            ready = [n for n in nodes if n.available or n.name in drained]
            if nodes and len(ready) == len(self.config.nodes):
                return drained
            if self.slurmctld_pid() is None:
                tail = processes.tail(self.paths.slurmctld_log)
                raise DevClusterError(
                    f"slurmctld stopped; {self.paths.slurmctld_log} ends:\n{tail}"
                )
            time.sleep(0.2)
        states = ", ".join(f"{n.name}={n.state}" for n in nodes) or last_error or "no nodes"
        logs = "\n".join(
            f"--- {log}:\n{processes.tail(log, 10)}"
            for log in [self.paths.slurmctld_log]
            + [self.paths.slurmd_log(n.name) for n in self.config.nodes]
        )
        raise DevClusterError(f"nodes not ready after {READY_TIMEOUT_S:.0f} s ({states})\n{logs}")

    # --- down ------------------------------------------------------------------------------
    def down(self) -> str:
        """Cancel every job, stop our daemons (and munged if we started it); idempotent.

        After a `down` that cancelled every job the next `up` starts clean; when slurmctld
        was not running (or did not answer), its saved jobs are left for the next `up`.
        """
        report = []
        cancelled = None
        if self.slurmctld_pid() is not None:
            cancelled = self._cancel_all_jobs()
            if cancelled:
                report.append(f"cancelled {cancelled} job(s)")
        daemons = self.running_daemons()
        stragglers = processes.pids_with_env("SLURM_CONF", str(self.slurm_conf), "slurmstepd")
        # slurmds first, so none reports to a slurmctld that is already gone.
        order = sorted(daemons, key=lambda name: name == "slurmctld")
        for name in order:
            processes.stop([daemons[name]])
        if stragglers:
            processes.stop(stragglers)
            report.append(f"stopped {len(stragglers)} leftover slurmstepd")
        if daemons:
            report.append("stopped " + ", ".join(order))
        if cancelled is not None and "slurmctld" in daemons:
            state.mark_stopped_clean(self.paths)  # written once slurmctld saved its last state
        elif (note := state.unsaved_jobs_note(self.paths)) is not None:
            report.append(note)
        if stopped := self.accounting.stop():  # slurmctld reports to slurmdbd until it stops
            report.append("stopped " + ", ".join(stopped))
        munged = processes.read_pid(self.paths.munged_started)
        if processes.is_our_process(munged, "munged"):
            assert munged is not None
            processes.stop([munged])
            report.append("stopped munged")
        self.paths.munged_started.unlink(missing_ok=True)
        return "; ".join(report) if report else "dev cluster was not running"

    def _cancel_all_jobs(self) -> int | None:
        """Cancel every active job; the number cancelled, None if the jobs cannot be listed."""
        try:
            jobs = [j for j in self.backend.list_jobs() if j.state.is_active]
        except SlurmError as exc:
            logger.warning("cannot list jobs before stopping: %s", exc)
            return None
        ids = sorted({j.het_job_id or j.job_id for j in jobs})
        for job_id in ids:
            try:
                self.backend.cancel(job_id)
            except SlurmError as exc:
                logger.info("cancel %s: %s", job_id, exc)
        # Wait for the job steps to end: a slurmstepd outlives a killed slurmd otherwise.
        deadline = time.monotonic() + self.config.kill_wait_s + 15
        while time.monotonic() < deadline:
            try:
                if not any(j.state.is_active for j in self.backend.list_jobs()):
                    break
            except SlurmError:
                break
            time.sleep(0.2)
        return len(ids)

    # --- status ----------------------------------------------------------------------------
    def status(self) -> str:
        """Nodes with GPU types and use, then jobs; or why the cluster is not reachable."""
        if self.slurmctld_pid() is None:
            return f"dev cluster not running ({self.paths.root}); start it: hetsched devcluster up"
        try:
            nodes = self.backend.list_nodes()
            jobs = self.backend.list_jobs()
        except SlurmError as exc:
            return f"dev cluster in {self.paths.root} does not answer: {exc}"
        status = format_nodes(nodes) + "\n\n" + format_jobs(jobs)
        return status + "\n" + self.accounting.status_line()


def _require_root() -> None:
    if os.geteuid() != 0:
        raise DevClusterError(
            "the dev cluster runs Slurm's daemons as root: run `sudo hetsched devcluster up` "
            "(or as root in a container or VM)"
        )


def _controller_host() -> str:
    # slurmctld only runs on the host named in SlurmctldHost: this machine's short name.
    return socket.gethostname().split(".")[0]
