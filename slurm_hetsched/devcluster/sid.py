"""`hetsched devcluster ... --slurm sid`: the dev cluster's layout on the newest Slurm of Debian
sid, run inside a chroot on this machine, next to (never instead of) the system Slurm's one.

The cluster's folder is `<dev cluster folder>/sid` (config, state, logs, pid files, fake GPUs,
the wrapper scripts in bin/ and our SPANK plugin built for this Slurm). The chroot lives in
$HETSCHED_SID_CHROOT (default /var/tmp/hetsched-sid-chroot) and is kept across `down`. Only
processes whose root directory is the chroot are ever signalled. docs/devcluster-sid.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import slurm_hetsched.devcluster.chroot as chroot
import slurm_hetsched.devcluster.processes as processes
import slurm_hetsched.devcluster.sidfiles as sidfiles
import slurm_hetsched.devcluster.sidhost as sidhost
import slurm_hetsched.devcluster.state as state
from slurm_hetsched.devcluster.files import write_cluster_files
from slurm_hetsched.devcluster.plugins import write_plugstack
from slurm_hetsched.devcluster.render import (
    ClusterPaths,
)
from slurm_hetsched.devcluster.tables import format_jobs, format_nodes
from slurm_hetsched.errors import DevClusterError, SlurmError
from slurm_hetsched.nodelayout import DevClusterConfig
from slurm_hetsched.slurm import CliSlurmBackend, SlurmCli
from slurm_hetsched.slurm.version import parse_version

DEFAULT_CHROOT = Path("/var/tmp/hetsched-sid-chroot")
READY_TIMEOUT_S = 60.0
PROJECT = Path(__file__).resolve().parents[2]


def default_chroot() -> Path:
    return Path(os.environ.get("HETSCHED_SID_CHROOT") or DEFAULT_CHROOT)


class SidCluster:
    """The sid dev cluster of one dev cluster folder, in one chroot."""

    def __init__(self, config: DevClusterConfig, folder: Path, root: Path | None = None) -> None:
        self.config = sidfiles.sid_config(config)
        self.paths = ClusterPaths(folder / "sid")
        self.root = Path(os.path.abspath(root or default_chroot()))
        self.suite = os.environ.get("HETSCHED_SID_SUITE") or "sid"
        self.bin_dir = self.paths.root / "bin"
        self.spank_so = self.paths.root / "spank" / "hetsched_spank.so"
        self.backend = CliSlurmBackend(
            SlurmCli(slurm_conf=str(self.paths.slurm_conf), timeout_s=20, bin_dir=str(self.bin_dir))
        )

    # --- what is shared with the chroot ----------------------------------------------------
    def shared(self) -> list[Path]:
        """Folders bind-mounted at the same path: the checkout, the cluster's folder, the
        system temp dir (tests' and jobs' files) and the host's Python (jobs run it)."""
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        python = sidfiles.interpreter_paths(
            sys.prefix, sys.base_prefix, os.path.realpath(sys.executable), version
        )
        extra = [Path(p) for p in os.environ.get("HETSCHED_SID_SHARE", "").split(":") if p]
        candidates = [PROJECT, self.paths.root, Path(tempfile.gettempdir()), *python, *extra]
        return sidfiles.shared_paths(Path(os.path.realpath(p)) for p in candidates)

    def env_lines(self) -> list[str]:
        return sidfiles.env_lines(self.bin_dir, self.paths.slurm_conf)

    # --- building --------------------------------------------------------------------------
    def install(self) -> str:
        """Build the chroot if needed (debootstrap + Slurm packages); report its Slurm."""
        _require_root()
        self._check_location()
        took = chroot.build(self.root, self.suite, sidfiles.PACKAGES, sidfiles.CHROOT_MARKER)
        version = self._version()
        if not chroot.pids_in(self.root):
            chroot.unmount_all(self.root)  # nothing runs: leave no mount behind
        how = f"built in {took:.0f} s" if took else "already built"
        return f"chroot {self.root} ({self.suite}) {how}: Slurm {version}"

    def _check_location(self) -> None:
        problem = sidfiles.check_chroot_location(self.root, self.shared())
        if problem:
            raise DevClusterError(problem)

    def _version(self) -> str:
        chroot.mount_system(self.root)
        text = chroot.run_in(self.root, ["slurmd", "-V"]).stdout
        problem = sidfiles.version_problem(text)
        if problem:
            raise DevClusterError(problem)
        return str(parse_version(text))

    # --- what runs -------------------------------------------------------------------------
    def _our_pid(self, pid_file: Path, program: str) -> int | None:
        pid = processes.read_pid(pid_file)
        if pid is None or chroot.root_of(pid) != os.path.realpath(self.root):
            return None
        return pid if processes.is_our_process(pid, program) else None

    def running_daemons(self) -> dict[str, int]:
        found = {}
        if (pid := self._our_pid(self.paths.slurmctld_pid, "slurmctld")) is not None:
            found["slurmctld"] = pid
        for node in self.config.nodes:
            pid = self._our_pid(self.paths.slurmd_pid(node.name), "slurmd")
            if pid is not None:
                found[f"slurmd {node.name}"] = pid
        return found

    # --- up --------------------------------------------------------------------------------
    def up(self, *, clean: bool = False) -> str:
        """Build the chroot if needed, mount, start munged, slurmctld and the slurmds, build
        and register our SPANK plugin for this Slurm, wait until every node is idle.

        Raises:
            DevClusterError: not root, a bad chroot location, an old Slurm, a port taken, a
                daemon that does not start, nodes that never become idle.
        """
        _require_root()
        self._check_location()
        started = time.monotonic()
        built = chroot.build(self.root, self.suite, sidfiles.PACKAGES, sidfiles.CHROOT_MARKER)
        chroot.refresh_host_files(self.root)
        version = self._version()
        running = self.running_daemons()
        if clean and running:
            raise DevClusterError(
                f"--clean needs a stopped cluster, but {', '.join(running)} still run: "
                "run `hetsched devcluster down --slurm sid` first"
            )
        python = {Path(os.path.realpath(sys.prefix)), Path(os.path.realpath(sys.base_prefix))}
        # The host's Python is mounted read-only: a job in the chroot cannot change it.
        mounted = [
            p for p in self.shared() if chroot.bind_same_path(self.root, p, readonly=p in python)
        ]
        report = [f"Slurm {version} in the {self.suite} chroot {self.root}"]
        if built:
            report.append(f"chroot built in {built:.0f} s")
        if mounted:
            report.append("shared at the same paths: " + ", ".join(map(str, mounted)))
        report.append(sidhost.share_users(self.root))
        system_python = sidhost.share_system_python(self.root)
        if system_python:
            report.append(system_python)
        if len(running) == 1 + len(self.config.nodes):
            return "\n".join([*report, "sid dev cluster already running", self.status()])
        self._check_ports(running)
        self._start_munged()
        if "slurmctld" not in running:
            self._write_files()
        self._write_wrappers()
        report.append(self._build_spank())
        write_plugstack(self.paths, [self.spank_so])
        mode = state.choose_start(self.paths, clean=clean)
        if "slurmctld" not in running:
            self._start("slurmctld", state.slurmctld_argv(self.paths.slurm_conf, mode))
            state.forget_stopped_clean(self.paths)
            report.append(state.describe(mode, self.paths))
        for node in self.config.nodes:
            if f"slurmd {node.name}" not in running:
                self._start(
                    f"slurmd {node.name}",
                    ["slurmd", "-f", str(self.paths.slurm_conf), "-N", node.name],
                )
        self._wait_ready()
        report.append(sidhost.check_python(self.root, sys.executable))
        if system_python:
            report.append(
                sidhost.check_python(
                    self.root, str(sidhost.SYSTEM_PYTHON), {"PYTHONPATH": str(PROJECT)}
                )
            )
        report.insert(
            1, f"sid dev cluster up in {time.monotonic() - started:.1f} s ({self.paths.root})"
        )
        report += [self.status(), "use it with: " + "; ".join(self.env_lines())]
        return "\n".join(report)

    def _check_ports(self, running: dict[str, int]) -> None:
        wanted = [] if "slurmctld" in running else [("slurmctld", self.config.slurmctld_port)]
        wanted += [
            (f"slurmd {node.name}", self.config.slurmd_port(index))
            for index, node in enumerate(self.config.nodes)
            if f"slurmd {node.name}" not in running
        ]
        for daemon, port in wanted:
            deadline = time.monotonic() + 5
            while processes.port_in_use(port) and time.monotonic() < deadline:
                time.sleep(0.1)
            if processes.port_in_use(port):
                raise DevClusterError(f"port {port} for {daemon} of the sid cluster is in use")

    def _start_munged(self) -> None:
        if chroot.run_in(self.root, ["munge", "-n"], check=False).returncode == 0:
            return
        run_munge = self.root / "run" / "munge"
        run_munge.mkdir(parents=True, exist_ok=True)
        chroot.run_in(self.root, ["chown", "munge:munge", "/run/munge"])
        key = self.root / "etc" / "munge" / "munge.key"
        if not key.exists() or key.stat().st_size == 0:
            chroot.run_in(self.root, ["runuser", "-u", "munge", "--", "mungekey", "-c"])
        chroot.run_in(self.root, ["runuser", "-u", "munge", "--", "/usr/sbin/munged"])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if chroot.run_in(self.root, ["munge", "-n"], check=False).returncode == 0:
                return
            time.sleep(0.1)
        raise DevClusterError("munged did not start in the chroot")

    def _write_files(self) -> None:
        write_cluster_files(self.config, self.paths, os.uname().nodename.split(".")[0])

    def _write_wrappers(self) -> None:
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        program = chroot.which("chroot") or "/usr/sbin/chroot"
        for command in sidfiles.COMMANDS:
            target = self.bin_dir / command
            if not (self.root / "usr" / "bin" / command).exists():
                target.unlink(missing_ok=True)
                continue
            text = sidfiles.wrapper_script(command, self.root, self.paths.slurm_conf, program)
            partial = target.with_name(f".{command}.new")
            partial.write_text(text)
            partial.chmod(0o755)
            os.replace(partial, target)

    def _build_spank(self) -> str:
        """Our SPANK plugin, compiled by the host's compiler against the chroot's spank.h
        (a copy of the chroot's include/slurm, so no other chroot header is used)."""
        include = self.paths.root / "spank" / "include"
        shutil.rmtree(include, ignore_errors=True)
        shutil.copytree(self.root / "usr" / "include" / "slurm", include / "slurm")
        self.spank_so.unlink(missing_ok=True)
        make = chroot.which("make")
        if make is None:
            raise DevClusterError("make not found: the SPANK plugin is built with make and gcc")
        done = subprocess.run(
            [
                make,
                "-s",
                "-C",
                str(PROJECT / "spank"),
                f"SLURM_INCLUDE={include}",
                f"PLUGIN={self.spank_so}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not self.spank_so.is_file():
            raise DevClusterError(f"building the SPANK plugin for sid failed:\n{done.stderr}")
        return f"SPANK plugin (optional) built for this Slurm: {self.spank_so}"

    def _start(self, what: str, argv: list[str]) -> None:
        env = {"SLURM_CONF": str(self.paths.slurm_conf)}
        done = chroot.run_in(self.root, argv, env, check=False, timeout_s=60)
        if done.returncode != 0:
            raise DevClusterError(
                f"{what} did not start in the chroot (exit {done.returncode}): "
                f"{done.stderr.strip()}\n{processes.tail(self._log_of(what))}"
            )

    def _log_of(self, what: str) -> Path:
        if what == "slurmctld":
            return self.paths.slurmctld_log
        return self.paths.slurmd_log(what.split()[-1])

    def node_states(self) -> dict[str, str]:
        """Node -> state, from the chroot's sinfo (the plain text: no JSON parser involved)."""
        done = chroot.run_in(
            self.root,
            ["sinfo", "-h", "-N", "-o", "%N %T"],
            {"SLURM_CONF": str(self.paths.slurm_conf)},
            check=False,
            timeout_s=30,
        )
        pairs = (line.split() for line in done.stdout.splitlines())
        return {p[0]: p[1] for p in pairs if len(p) == 2}

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.node_states()
            if len(states) == len(self.config.nodes) and all(
                s.rstrip("*~#!%$@^-").startswith(("idle", "mixed", "alloc", "drain"))
                for s in states.values()
            ):
                return
            if "slurmctld" not in self.running_daemons():
                break
            time.sleep(0.2)
        logs = "\n".join(
            f"--- {log}:\n{processes.tail(log, 10)}"
            for log in [self.paths.slurmctld_log]
            + [self.paths.slurmd_log(n.name) for n in self.config.nodes]
        )
        raise DevClusterError(f"sid nodes not ready ({states or 'no answer'})\n{logs}")

    # --- down ------------------------------------------------------------------------------
    def down(self) -> str:
        """Cancel every job, stop every process of the chroot, unmount everything under it."""
        report = []
        daemons = self.running_daemons()
        env = {"SLURM_CONF": str(self.paths.slurm_conf)}
        if "slurmctld" in daemons:
            ids = chroot.run_in(
                self.root, ["squeue", "-h", "-o", "%A"], env, check=False, timeout_s=30
            ).stdout.split()
            if ids:
                chroot.run_in(self.root, ["scancel", "--full", *ids], env, check=False)
                deadline = time.monotonic() + self.config.kill_wait_s + 15
                while (
                    time.monotonic() < deadline
                    and chroot.run_in(
                        self.root, ["squeue", "-h", "-o", "%A"], env, check=False, timeout_s=30
                    ).stdout.strip()
                ):
                    time.sleep(0.2)
                report.append(f"cancelled {len(ids)} job(s)")
        order = sorted(daemons, key=lambda name: name == "slurmctld")
        for name in order:
            processes.stop([daemons[name]])
        if daemons:
            report.append("stopped " + ", ".join(order))
            if "slurmctld" in daemons:
                state.mark_stopped_clean(self.paths)
        rest = chroot.pids_in(self.root)
        if rest:
            processes.stop(rest)
            report.append(f"stopped {len(rest)} other process(es) of the chroot (munged, steps)")
        unmounted = chroot.unmount_all(self.root)
        if unmounted:
            report.append(f"unmounted {len(unmounted)}")
        return "; ".join(report) if report else "sid dev cluster was not running"

    # --- status ----------------------------------------------------------------------------
    def status(self) -> str:
        if "slurmctld" not in self.running_daemons():
            return (
                f"sid dev cluster not running ({self.paths.root}); start it: "
                "hetsched devcluster up --slurm sid"
            )
        try:
            return (
                format_nodes(self.backend.list_nodes())
                + "\n\n"
                + format_jobs(self.backend.list_jobs())
            )
        except SlurmError as exc:
            states = ", ".join(f"{n}={s}" for n, s in self.node_states().items())
            return f"nodes: {states}\n(the backend could not read this Slurm: {exc})"


def _require_root() -> None:
    if os.geteuid() != 0:
        raise DevClusterError("the sid dev cluster needs root (chroot, mounts, daemons)")
