"""Render the dev cluster's slurm.conf, gres.conf and plugstack.conf (pure text, no I/O).

The recipe (one slurmd per node on one machine, each with its own fake NodeHostname and port,
fake GPU character devices, node Features = GPU types) is the tested one for Slurm 22.05 on
Debian 12; see docs/devcluster.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_hetsched.nodelayout import DevClusterConfig


@dataclass(frozen=True, slots=True)
class ClusterPaths:
    """Where everything of one dev cluster lives, all under one folder."""

    root: Path

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def gres_conf(self) -> Path:
        return self.etc / "gres.conf"

    @property
    def plugstack_conf(self) -> Path:
        return self.etc / "plugstack.conf"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def job_state(self) -> Path:
        """slurmctld's saved jobs; present once a slurmctld of this folder saved its state."""
        return self.state / "job_state"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def fakedev(self) -> Path:
        return self.root / "fakedev"

    @property
    def jobs(self) -> Path:
        """Default output folder for jobs of the demo and the tests."""
        return self.root / "jobs"

    @property
    def slurmctld_pid(self) -> Path:
        return self.run / "slurmctld.pid"

    def slurmd_pid(self, node: str) -> Path:
        return self.run / f"slurmd-{node}.pid"

    @property
    def stopped_clean(self) -> Path:
        """Exists while the last stop was a `down` that cancelled every job."""
        return self.run / "stopped-clean"

    @property
    def munged_started(self) -> Path:
        """Pid of the munged this tool started (absent when munged was already running)."""
        return self.run / "munged.started"

    @property
    def slurmctld_log(self) -> Path:
        return self.log / "slurmctld.log"

    def slurmd_log(self, node: str) -> Path:
        return self.log / f"slurmd-{node}.log"

    @property
    def jobcomp(self) -> Path:
        return self.log / "jobcomp.txt"

    # --- accounting (`up --accounting`: devcluster/accounting.py) ---------------------------
    @property
    def accounting_marker(self) -> Path:
        """Exists from an `up --accounting` to the next `down`: a plain `up` in between (a
        restart after a crash) keeps accounting on."""
        return self.run / "accounting"

    @property
    def slurmdbd_conf(self) -> Path:
        """Next to slurm.conf, where slurmdbd and Slurm's commands look for it."""
        return self.etc / "slurmdbd.conf"

    @property
    def slurmdbd_pid(self) -> Path:
        return self.run / "slurmdbd.pid"

    @property
    def slurmdbd_log(self) -> Path:
        return self.log / "slurmdbd.log"

    @property
    def db(self) -> Path:
        """The private MariaDB's data folder."""
        return self.root / "db"

    @property
    def db_socket(self) -> Path:
        return self.run / "mariadbd.sock"

    @property
    def db_pid(self) -> Path:
        return self.run / "mariadbd.pid"

    @property
    def db_log(self) -> Path:
        return self.log / "mariadbd.log"


def slurmdbd_port(config: DevClusterConfig) -> int:
    """slurmdbd's port: two above slurmctld's (6819 for the default 6817, Slurm's own default;
    7819 for the sid cluster's layout), below the slurmds' (slurmd_port_base + 1 and up)."""
    return config.slurmctld_port + 2


def render_slurm_conf(
    config: DevClusterConfig, paths: ClusterPaths, controller_host: str, *, accounting: bool = False
) -> str:
    """slurm.conf for `config`, with every path absolute (Slurm does not expand variables);
    `accounting`: jobs are recorded by the cluster's slurmdbd (accounting_lines)."""
    lines = [
        "# Written by `hetsched devcluster up`; edit etc/devcluster.toml instead.",
        f"ClusterName={config.name}",
        f"SlurmctldHost={controller_host}(127.0.0.1)",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "MpiDefault=none",
        f"SlurmctldPort={config.slurmctld_port}",
        f"StateSaveLocation={paths.state}",
        f"SlurmdSpoolDir={paths.spool}/%n",
        f"SlurmctldPidFile={paths.slurmctld_pid}",
        f"SlurmdPidFile={paths.run}/slurmd-%n.pid",
        f"SlurmctldLogFile={paths.slurmctld_log}",
        f"SlurmdLogFile={paths.log}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        # No cgroups and no systemd on a dev machine: track processes by /proc.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        *(
            accounting_lines(config)
            if accounting
            else ["AccountingStorageType=accounting_storage/none"]
        ),
        # Finished jobs stay inspectable without a database (`sacct -c`).
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={paths.jobcomp}",
        "SchedulerType=sched/backfill",
        f"SchedulerParameters=sched_interval={config.sched_interval_s},"
        f"bf_interval={config.bf_interval_s}",
        # A requeued job waits cred_expire seconds (default 120) before it may start again.
        f"AuthInfo=cred_expire={config.cred_expire_s}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        # Lets each slurmd claim more CPUs than this machine has.
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "MessageTimeout=10",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "MinJobAge=300",
        f"KillWait={config.kill_wait_s}",
        "JobRequeue=1",
        f"PlugStackConfig={paths.plugstack_conf}",
        "GresTypes=gpu",
    ]
    lines += [f"{key}={value}" for key, value in config.extra.items()]
    for index, node in enumerate(config.nodes):
        gres = ",".join(f"gpu:{gpu_type}:{count}" for gpu_type, count in node.gpus.items())
        features = ",".join(node.gpu_types)
        # A distinct fake NodeHostname per node dodges the "Duplicated NodeHostName" check of
        # Slurm builds without --enable-multiple-slurmd (Debian's).
        lines.append(
            f"NodeName={node.name} NodeHostname={node.name} NodeAddr=127.0.0.1 "
            f"Port={config.slurmd_port(index)} CPUs={node.cpus} RealMemory={node.memory_mb} "
            f"Gres={gres} Features={features} State=UNKNOWN"
        )
    node_names = ",".join(node.name for node in config.nodes)
    lines.append(
        f"PartitionName={config.partition} Nodes={node_names} Default=YES MaxTime=INFINITE State=UP"
    )
    return "\n".join(lines) + "\n"


def accounting_lines(config: DevClusterConfig) -> list[str]:
    """slurm.conf's accounting through the cluster's slurmdbd: GPUs counted per type
    (gres/gpu and gres/gpu:<type> TRES), and associations required (a job needs a valid
    account) but no limits enforced: an account's GrpTRES is its quota, which the scheduler
    lets it exceed by borrowing, never a cap (docs/admin.md, "Tenants and quotas")."""
    tres = ",".join(["gres/gpu", *(f"gres/gpu:{gpu_type}" for gpu_type in config.gpu_types)])
    return [
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=localhost",
        f"AccountingStoragePort={slurmdbd_port(config)}",
        f"AccountingStorageTRES={tres}",
        # associations, not limits (nor safe, which implies limits): GrpTRES is no cap.
        "AccountingStorageEnforce=associations",
    ]


def render_slurmdbd_conf(config: DevClusterConfig, paths: ClusterPaths) -> str:
    """slurmdbd.conf: slurmdbd as root, storing into the private MariaDB as its root user,
    who logs in through the socket (unix_socket authentication): no password anywhere. Slurm
    wants the file readable by its owner only (mode 600)."""
    lines = [
        "# Written by `hetsched devcluster up --accounting`.",
        "AuthType=auth/munge",
        "DbdHost=localhost",
        f"DbdPort={slurmdbd_port(config)}",
        "SlurmUser=root",
        "DebugLevel=info",
        f"LogFile={paths.slurmdbd_log}",
        f"PidFile={paths.slurmdbd_pid}",
        "StorageType=accounting_storage/mysql",
        # localhost: through the socket named by MYSQL_UNIX_PORT in slurmdbd's environment.
        "StorageHost=localhost",
        "StorageUser=root",
        "StorageLoc=slurm_acct_db",
    ]
    return "\n".join(lines) + "\n"


def render_gres_conf(config: DevClusterConfig, paths: ClusterPaths) -> str:
    """gres.conf: each node's GPUs are fake device files numbered from 0 on that node."""
    lines = ["# Written by `hetsched devcluster up`.", "AutoDetect=off"]
    for node in config.nodes:
        first = 0
        for gpu_type, count in node.gpus.items():
            last = first + count - 1
            files = f"nvidia{first}" if count == 1 else f"nvidia[{first}-{last}]"
            lines.append(
                f"NodeName={node.name} Name=gpu Type={gpu_type} File={paths.fakedev}/{files}"
            )
            first = last + 1
    return "\n".join(lines) + "\n"


def render_plugstack_conf(spank_plugins: Sequence[Path]) -> str:
    """plugstack.conf; plugins are `optional`, since a failing required one can drain a node.

    Args:
        spank_plugins: absolute paths of SPANK plugin .so files, in load order.

    Raises:
        ValueError: a path is relative, or has whitespace or '#', which plugstack.conf
            cannot hold (it splits lines on whitespace and '#' starts a comment).
    """
    lines = ["# Written by `hetsched devcluster up`. format: optional <plugin.so> [args]"]
    for plugin in spank_plugins:
        text = str(plugin)
        if not plugin.is_absolute():
            raise ValueError(f"SPANK plugin path {text!r} must be absolute")
        if "#" in text or any(c.isspace() for c in text):
            raise ValueError(
                f"SPANK plugin path {text!r} has whitespace or '#', which plugstack.conf "
                "cannot hold: move the plugin to a plainer path"
            )
        lines.append(f"optional {text}")
    return "\n".join(lines) + "\n"


def fake_device_count(config: DevClusterConfig) -> int:
    """How many fake GPU device files the largest node needs."""
    return max(node.total_gpus for node in config.nodes)
