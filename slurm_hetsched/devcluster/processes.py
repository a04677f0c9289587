"""Start, find and stop the dev cluster's daemons, by pid file and command line.

A pid is trusted only if /proc shows the expected program with our config file on its command
line, so a stale pid file never makes us signal an unrelated process.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Sequence
from pathlib import Path

from slurm_hetsched.errors import DevClusterError

logger = logging.getLogger(__name__)


def read_pid(pid_file: Path) -> int | None:
    try:
        text = pid_file.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def is_our_process(pid: int | None, program: str, marker: str | None = None) -> bool:
    """True when `pid` is alive, runs `program` and (if given) has `marker` in its argv."""
    if pid is None:
        return False
    argv = cmdline(pid)
    if not argv or os.path.basename(argv[0]) != program:
        return False
    if _is_zombie(pid):
        return False
    return marker is None or marker in argv


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def has_env(pid: int, name: str, value: str) -> bool:
    """True when process `pid`'s environment has name=value (slurmdbd has no -f option: it
    is told apart from another cluster's by the SLURM_CONF it was started with)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{name}={value}".encode() in env


def pids_with_env(name: str, value: str, program_prefix: str) -> list[int]:
    """Processes whose environment has name=value and whose argv[0] starts with the prefix.

    Used to find slurmstepd processes of our cluster (they inherit slurmd's SLURM_CONF).
    """
    wanted = f"{name}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        argv = cmdline(pid)
        if not argv or not os.path.basename(argv[0]).startswith(program_prefix):
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in env:
            found.append(pid)
    return found


def stop(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    """SIGTERM the pids, wait, SIGKILL what is left; returns the pids that had to be killed."""
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)
    killed = [pid for pid in pids if _alive(pid)]
    for pid in killed:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(_alive(pid) for pid in killed):
        time.sleep(0.05)
    return killed


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def wait_for_free_ports(wanted: Sequence[tuple[str, int, str]], timeout_s: float) -> None:
    """Wait up to `timeout_s` for each (daemon, port, layout key) port to be free; a daemon
    killed a moment ago may hold its port while its last threads end.

    Raises:
        DevClusterError: a port still taken, naming the daemon and the layout key to change.
    """
    deadline = time.monotonic() + timeout_s
    for daemon, port, key in wanted:
        if port_in_use(port) and time.monotonic() < deadline:
            logger.info("port %d for %s is taken; waiting for it to be released", port, daemon)
        while port_in_use(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        if port_in_use(port):
            raise DevClusterError(
                f"port {port} for {daemon} is already in use (another Slurm, or a dev cluster "
                f"started from another folder?): stop that, or set [cluster] {key} in the "
                "layout file to free ports"
            )


def port_in_use(port: int) -> bool:
    """True when something already listens on TCP `port` on this machine."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR: a port left in TIME_WAIT by our own last run is free for Slurm too.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log file, or a note that it does not exist."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])
