"""`hetsched devcluster`: its arguments, and bringing the local Slurm dev cluster up or down."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from slurm_hetsched.devcluster import DevCluster
    from slurm_hetsched.devcluster.sid import SidCluster
    from slurm_hetsched.nodelayout import DevClusterConfig


def add_devcluster(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "devcluster",
        help="bring a local Slurm 22.05 cluster with fake typed GPUs up or down",
        description=(
            "A real slurmctld and one slurmd per node on this machine, with fake typed GPUs, "
            "for the demo, the tests and trying the controller. Needs root; installs Slurm "
            "and munge from Debian's packages when they are missing."
        ),
    )
    p.add_argument(
        "--config",
        type=Path,
        help="node layout (TOML); default: etc/devcluster.toml of this checkout, "
        "else the built-in n1=2xv100, n2=2xp100, n3=4xk80",
    )
    p.add_argument(
        "--dir",
        type=Path,
        help="folder holding the cluster's config, state, logs and pid files; default: "
        "$HETSCHED_DEVCLUSTER_DIR, else .devcluster/ of this checkout, else a folder in the "
        "system temp dir",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser(
        "up",
        help="install if needed, start, wait until every node is idle",
        description=(
            "Install Slurm and munge if missing, start the daemons that are not running and "
            "wait until every node is idle. A slurmctld that died is restarted from the state "
            "it saved, so queued and running jobs are kept; after `down` (which cancels every "
            "job) and on the first start, slurmctld starts clean."
        ),
    )
    up.add_argument(
        "--spank",
        action="append",
        type=Path,
        metavar="PATH",
        help="register this SPANK plugin .so as `optional` in etc/plugstack.conf (repeatable; "
        "the list replaces the registered one; build ours with `make -C spank`). On a running "
        "cluster new jobs get it at once",
    )
    up.add_argument(
        "--clean",
        action="store_true",
        help="start slurmctld without the state it saved, discarding every saved job and node "
        "state (a stopped cluster only: run `down` first). Without it, a cluster whose "
        "slurmctld died is restarted with its jobs; after `down` it starts clean anyway",
    )
    install = actions.add_parser(
        "install",
        help="only install Slurm, its headers and munge from Debian's packages if missing",
    )
    for action in (up, install):
        _add_accounting_choice(action)
    down = actions.add_parser("down", help="cancel all jobs and stop the daemons this tool started")
    status = actions.add_parser("status", help="print nodes, GPU types and jobs")
    env = actions.add_parser(
        "env", help="print `export SLURM_CONF=...` for this cluster (for eval)"
    )
    for action in (up, install, down, status, env):
        _add_slurm_choice(action)


def _add_accounting_choice(action: argparse.ArgumentParser) -> None:
    action.add_argument(
        "--accounting",
        action="store_true",
        default=None,
        help="with --slurm system only: also install (slurmdbd, mariadb-server) and, for `up`, "
        "run Slurm accounting: a private MariaDB and slurmdbd in the cluster's folder, with "
        "accounts acct-a, acct-b (GPU quotas as GrpTRES, not enforced) and acct-c "
        "(docs/devcluster.md). Without it `up` keeps what the last `up` chose until a `down`",
    )


def _add_slurm_choice(action: argparse.ArgumentParser) -> None:
    action.add_argument(
        "--slurm",
        choices=("system", "sid"),
        help="system: this machine's Slurm (Debian 12: 22.05); sid: the newest Slurm of Debian "
        "sid (24.11 or later), in a chroot, on ports 1000 higher, next to the system one "
        "(docs/devcluster-sid.md). Default: sid when $SLURM_CONF is the sid cluster's "
        'slurm.conf (a shell that ran `eval "$(hetsched devcluster env --slurm sid)"`), '
        "else system",
    )
    action.add_argument(
        "--chroot",
        type=Path,
        metavar="DIR",
        help="with --slurm sid: the chroot folder (default $HETSCHED_SID_CHROOT, else "
        "/var/tmp/hetsched-sid-chroot); kept across `down`",
    )


def devcluster_command(args: argparse.Namespace) -> int:
    from slurm_hetsched.devcluster import DevCluster, default_config_path, default_dir
    from slurm_hetsched.nodelayout import load_devcluster_config

    config_path = args.config or default_config_path()
    config = load_devcluster_config(config_path)
    folder = args.dir or (
        Path(os.environ["HETSCHED_DEVCLUSTER_DIR"])
        if os.environ.get("HETSCHED_DEVCLUSTER_DIR")
        else default_dir()
    )
    if (args.slurm or _slurm_of_environment(folder.resolve())) == "sid":
        return _sid_command(args, config, folder.resolve())
    cluster = DevCluster(config, folder.resolve())
    env = [f"export SLURM_CONF={shlex.quote(str(cluster.slurm_conf))}"]
    accounting = getattr(args, "accounting", None)

    def up() -> str:
        return cluster.up(spank_plugins=args.spank, clean=args.clean, accounting=accounting)

    return _act(args.action, cluster, up, env, lambda: cluster.install(accounting=bool(accounting)))


def _act(
    action: str,
    cluster: DevCluster | SidCluster,
    up: Callable[[], str],
    env: list[str],
    install: Callable[[], str] | None = None,
) -> int:
    """Run one action on either Slurm's cluster and print what it reports; `up`, `env` (the
    shell lines that point Slurm's commands at it) and `install` are each cluster's own."""
    steps: dict[str, Callable[[], str]] = {
        "up": up,
        "install": install or cluster.install,
        "down": cluster.down,
        "status": cluster.status,
        "env": lambda: "\n".join(env),
    }
    print(steps[action]())
    return 0


def _slurm_of_environment(folder: Path) -> str:
    """ "sid" when $SLURM_CONF is the sid cluster's slurm.conf in `folder`, else "system": a
    plain `hetsched devcluster up` in a shell set up for the sid cluster (a test that restarts
    slurmctld) acts on the sid cluster."""
    conf = os.environ.get("SLURM_CONF")
    sid_conf = folder / "sid" / "etc" / "slurm.conf"
    try:
        return "sid" if conf and os.path.samefile(conf, sid_conf) else "system"
    except OSError:
        return "system"


def _sid_command(args: argparse.Namespace, config: DevClusterConfig, folder: Path) -> int:
    from slurm_hetsched.devcluster.sid import SidCluster
    from slurm_hetsched.errors import DevClusterError

    cluster = SidCluster(config, folder, args.chroot)
    if getattr(args, "accounting", None):
        raise DevClusterError(
            "--accounting is only for the system Slurm's dev cluster (--slurm system): the sid "
            "cluster runs without slurmdbd (docs/devcluster.md, 'Accounting')"
        )
    if args.action == "up":
        if args.spank:
            raise DevClusterError(
                "--spank registers plugins built for the system Slurm; with --slurm sid, `up` "
                "builds ours against the chroot's Slurm and registers it by itself"
            )
    return _act(args.action, cluster, lambda: cluster.up(clean=args.clean), cluster.env_lines())
