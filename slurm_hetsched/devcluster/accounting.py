"""Slurm accounting for the dev cluster (`hetsched devcluster up --accounting`): a private
MariaDB and a slurmdbd, started and stopped with the cluster, everything in its folder.

MariaDB keeps its data in <folder>/db, its socket and pid file in run/, its log in
log/mariadbd.log. It starts with --no-defaults (no system option file is read) and
--skip-networking (reachable through its own socket only), so it never touches the system's
MariaDB service (/var/lib/mysql, /run/mysqld). Like the dev cluster's Slurm daemons it runs as
root, so the folder may be anywhere, even under /root. slurmdbd reads etc/slurmdbd.conf
(mode 600, next to slurm.conf), logs to log/slurmdbd.log, listens on slurmctld_port + 2 and
finds the database's socket through MYSQL_UNIX_PORT in its environment (it has no option for
it). The accounts, users and quotas in it are devcluster/tenants.py's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import slurm_hetsched.devcluster.install as install
import slurm_hetsched.devcluster.processes as processes
from slurm_hetsched.devcluster.render import ClusterPaths, render_slurmdbd_conf, slurmdbd_port
from slurm_hetsched.devcluster.tenants import Tenants
from slurm_hetsched.errors import DevClusterError
from slurm_hetsched.nodelayout import DevClusterConfig
from slurm_hetsched.slurm import SlurmCli

START_TIMEOUT_S = 30.0
# MariaDB writes pages it was given time to flush; killing it means a crash recovery next time.
STOP_TIMEOUT_S = 60.0
# A Unix socket's path has at most 107 bytes.
SOCKET_PATH_MAX = 107
# Written into the data folder once mariadb-install-db succeeded: a folder without it is the
# leftover of an interrupted first start, and is made again.
READY_MARKER = ".hetsched-initialized"


class Accounting:
    """The MariaDB and slurmdbd of one dev cluster."""

    def __init__(self, config: DevClusterConfig, paths: ClusterPaths) -> None:
        self.config = config
        self.paths = paths

    @property
    def port(self) -> int:
        return slurmdbd_port(self.config)

    def environment(self) -> dict[str, str]:
        """slurmdbd's: our slurm.conf (slurmdbd.conf is read next to it) and the socket."""
        return dict(
            os.environ,
            SLURM_CONF=str(self.paths.slurm_conf),
            MYSQL_UNIX_PORT=str(self.paths.db_socket),
        )

    # --- what runs -------------------------------------------------------------------------
    def mariadbd_pid(self) -> int | None:
        pid = processes.read_pid(self.paths.db_pid)
        ours = processes.is_our_process(pid, "mariadbd", f"--datadir={self.paths.db}")
        return pid if ours else None

    def slurmdbd_pid(self) -> int | None:
        pid = processes.read_pid(self.paths.slurmdbd_pid)
        if pid is None or not processes.is_our_process(pid, "slurmdbd"):
            return None
        return pid if processes.has_env(pid, "SLURM_CONF", str(self.paths.slurm_conf)) else None

    def running(self) -> dict[str, int]:
        """The accounting daemons of this cluster that are alive, by name."""
        found = {}
        if (pid := self.mariadbd_pid()) is not None:
            found["mariadbd"] = pid
        if (pid := self.slurmdbd_pid()) is not None:
            found["slurmdbd"] = pid
        return found

    def status_line(self) -> str:
        """One line for `status`: whether accounting is up, and where its logs are."""
        if not self.paths.accounting_marker.exists():
            return "accounting: off (`hetsched devcluster up --accounting` starts it)"
        running = self.running()
        if len(running) == 2:
            return (
                f"accounting: up (slurmdbd on port {self.port}, MariaDB in {self.paths.db}; "
                f"logs {self.paths.slurmdbd_log}, {self.paths.db_log})"
            )
        missing = sorted({"mariadbd", "slurmdbd"} - set(running))
        return (
            f"accounting: on, but {' and '.join(missing)} not running: "
            "`hetsched devcluster up` starts them"
        )

    # --- up --------------------------------------------------------------------------------
    def up(self, on: bool, *, slurmctld_runs: bool) -> str:
        """`up`'s part when accounting is `on` (else nothing): MariaDB and slurmdbd started
        if they do not run; before slurmctld starts, the cluster registered in slurmdbd; once
        it runs, the accounts, users and quotas of devcluster/tenants.py. Returns a line per
        thing done, each starting with a newline (nothing on a second run)."""
        if not on:
            return ""
        done = self.start()
        tenants = Tenants(
            self.config,
            SlurmCli(slurm_conf=str(self.paths.slurm_conf), timeout_s=20),
            f"{self.paths.slurmdbd_log} and {self.paths.db_log}",
        )
        tenants.wait_answers()
        if not slurmctld_runs:
            if tenants.ensure_cluster():
                done.append(f"cluster {self.config.name} registered")
        else:
            done += tenants.ensure_accounts()
        return "".join(f"\naccounting: {line}" for line in done)

    def start(self) -> list[str]:
        """Start MariaDB (making its data folder the first time) and slurmdbd unless they
        run; returns what was started. slurm.conf must be written already (slurmdbd.conf is
        found next to it, and sacctmgr reaches slurmdbd through it).

        Raises:
            DevClusterError: a program missing, a port taken, a daemon that does not start
                or answer (with the end of its log).
        """
        started = []
        self.paths.accounting_marker.parent.mkdir(parents=True, exist_ok=True)
        self.paths.accounting_marker.write_text("`hetsched devcluster up --accounting`\n")
        if self.mariadbd_pid() is None:
            if not (self.paths.db / READY_MARKER).exists():
                self._make_database()
                started.append(f"MariaDB data folder {self.paths.db} made")
            self._start_mariadbd()
            started.append(f"mariadbd started (log {self.paths.db_log})")
        if self.slurmdbd_pid() is None:
            self._start_slurmdbd()
            started.append(f"slurmdbd started on port {self.port} (log {self.paths.slurmdbd_log})")
        return started

    def _make_database(self) -> None:
        db = self.paths.db
        if db.exists():
            shutil.rmtree(db)  # an interrupted first start: nothing in it to keep
        db.mkdir(parents=True)
        argv = [
            _program("mariadb-install-db"),
            "--no-defaults",
            "--user=root",
            f"--datadir={db}",
            # root logs in through the socket as the Unix root user: no password anywhere.
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            output = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise DevClusterError(
                f"`{' '.join(argv)}` failed ({done.returncode}) making the dev cluster's "
                f"database:\n{output}"
            )
        (db / READY_MARKER).write_text("made by `hetsched devcluster up --accounting`\n")

    def _start_mariadbd(self) -> None:
        socket_path = str(self.paths.db_socket)
        if len(socket_path.encode()) > SOCKET_PATH_MAX:
            raise DevClusterError(
                f"MariaDB's socket {socket_path} would be longer than {SOCKET_PATH_MAX} bytes, "
                "more than a Unix socket's path may have: use a dev cluster folder with a "
                "shorter path (--dir)"
            )
        for folder in (self.paths.run, self.paths.log):
            folder.mkdir(parents=True, exist_ok=True)
        argv = [
            _program("mariadbd"),
            "--no-defaults",
            "--user=root",
            f"--datadir={self.paths.db}",
            f"--socket={socket_path}",
            f"--pid-file={self.paths.db_pid}",
            f"--log-error={self.paths.db_log}",
            "--skip-networking",
            # What slurmdbd's start-up check recommends (it warns otherwise).
            "--innodb-lock-wait-timeout=900",
        ]
        with open(self.paths.db_log, "ab") as log:
            # A daemon of its own: its own session, so that it outlives this command.
            server = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        ping = [
            _program("mariadb-admin"),
            "--no-defaults",
            f"--socket={socket_path}",
            "--connect-timeout=2",
            "ping",
        ]
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise DevClusterError(
                    f"mariadbd stopped at start (exit {server.returncode}); "
                    f"{self.paths.db_log} ends:\n{processes.tail(self.paths.db_log)}"
                )
            answer = subprocess.run(ping, capture_output=True, timeout=10, check=False)
            if answer.returncode == 0 and self.mariadbd_pid() == server.pid:
                return
            time.sleep(0.1)
        raise DevClusterError(
            f"mariadbd did not answer on {socket_path} within {START_TIMEOUT_S:.0f} s; "
            f"{self.paths.db_log} ends:\n{processes.tail(self.paths.db_log)}"
        )

    def _start_slurmdbd(self) -> None:
        if processes.port_in_use(self.port):
            raise DevClusterError(
                f"port {self.port} for slurmdbd (slurmctld_port + 2) is already in use (another "
                "slurmdbd?): stop that, or set [cluster] slurmctld_port in the layout file"
            )
        conf = self.paths.slurmdbd_conf
        descriptor = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            os.fchmod(out.fileno(), 0o600)  # slurmdbd refuses a file others may read
            out.write(render_slurmdbd_conf(self.config, self.paths))
        argv = [_program("slurmdbd")]  # daemonizes; reads slurmdbd.conf next to SLURM_CONF
        done = subprocess.run(
            argv, env=self.environment(), capture_output=True, text=True, timeout=30, check=False
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while done.returncode == 0 and time.monotonic() < deadline:
            if self.slurmdbd_pid() is not None:
                return
            time.sleep(0.05)
        raise DevClusterError(
            f"slurmdbd did not start (exit {done.returncode}). {done.stderr.strip()}\n"
            f"last lines of {self.paths.slurmdbd_log}:\n{processes.tail(self.paths.slurmdbd_log)}"
        )

    # --- down ------------------------------------------------------------------------------
    def stop(self) -> list[str]:
        """Stop slurmdbd, then MariaDB (after slurmctld, which reports to slurmdbd until it
        stops); returns what was stopped. Accounting is off for the next plain `up`."""
        stopped = []
        if (pid := self.slurmdbd_pid()) is not None:
            processes.stop([pid])
            stopped.append("slurmdbd")
        if (pid := self.mariadbd_pid()) is not None:
            processes.stop([pid], timeout_s=STOP_TIMEOUT_S)
            stopped.append("mariadbd")
        self.paths.accounting_marker.unlink(missing_ok=True)
        return stopped


def _program(name: str) -> str:
    path = install.which(name)
    if path is None:
        raise DevClusterError(
            f"{name} is not installed: `hetsched devcluster install --accounting` installs "
            f"{' '.join(install.ACCOUNTING_PACKAGES)}"
        )
    return path
