"""`hetsched devcluster up --accounting` without Slurm: the rendered slurm.conf and
slurmdbd.conf, the tenants' quotas, the sacctmgr commands of a first and a second `up`, when
accounting stays on, and the refusal on the sid cluster."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_hetsched.cli import build_parser, main
from slurm_hetsched.devcluster import DevCluster, cluster, install, processes, tenants
from slurm_hetsched.devcluster.accounting import Accounting
from slurm_hetsched.devcluster.render import (
    ClusterPaths,
    render_slurm_conf,
    render_slurmdbd_conf,
    slurmdbd_port,
)
from slurm_hetsched.devcluster.sidfiles import sid_config
from slurm_hetsched.devcluster.tenants import Tenants, grp_tres, tenant_quotas
from slurm_hetsched.errors import DevClusterError
from slurm_hetsched.nodelayout import NodeSpec, default_devcluster_config

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm-22.05"
CONFIG = default_devcluster_config()


def settings(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


# --- what is written -------------------------------------------------------------------------


def test_slurm_conf_with_accounting_counts_gpus_per_type_and_enforces_no_limits() -> None:
    paths = ClusterPaths(Path("/d"))
    conf = settings(render_slurm_conf(CONFIG, paths, "host", accounting=True))
    assert conf["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert conf["AccountingStoragePort"] == "6819"
    assert conf["AccountingStorageTRES"] == "gres/gpu,gres/gpu:v100,gres/gpu:p100,gres/gpu:k80"
    assert conf["AccountingStorageEnforce"] == "associations"  # no limits, no safe


def test_slurm_conf_without_accounting_has_none_of_it() -> None:
    text = render_slurm_conf(CONFIG, ClusterPaths(Path("/d")), "host")
    assert settings(text)["AccountingStorageType"] == "accounting_storage/none"
    assert "AccountingStorageTRES" not in text and "AccountingStorageEnforce" not in text
    assert text == render_slurm_conf(CONFIG, ClusterPaths(Path("/d")), "host", accounting=False)


def test_slurmdbd_conf_keeps_everything_in_the_folder_and_has_no_password() -> None:
    paths = ClusterPaths(Path("/d"))
    conf = settings(render_slurmdbd_conf(CONFIG, paths))
    assert conf["DbdPort"] == "6819" and conf["StorageType"] == "accounting_storage/mysql"
    assert (conf["LogFile"], conf["PidFile"]) == ("/d/log/slurmdbd.log", "/d/run/slurmdbd.pid")
    assert (conf["StorageHost"], conf["StorageUser"]) == ("localhost", "root")
    assert "StoragePass" not in conf
    assert paths.slurmdbd_conf == paths.slurm_conf.parent / "slurmdbd.conf"
    assert paths.db_socket.parent == paths.run and paths.db == Path("/d/db")


def test_slurmdbd_port_is_two_above_slurmctlds() -> None:
    assert slurmdbd_port(CONFIG) == 6819
    assert slurmdbd_port(sid_config(CONFIG)) == 7819


def test_the_tenants_own_the_first_and_the_last_node() -> None:
    assert tenant_quotas(CONFIG) == {"acct-a": {"v100": 2}, "acct-b": {"k80": 4}}
    single = dataclasses.replace(CONFIG, nodes=(NodeSpec("s1", {"a100": 1, "t4": 2}, 4, 2000),))
    assert tenant_quotas(single) == {"acct-a": {"a100": 1, "t4": 2}}


def test_grp_tres_clears_the_types_no_longer_wanted() -> None:
    assert grp_tres({"v100": 2}, {}) == "gres/gpu:v100=2"
    assert grp_tres({"v100": 2}, {"a100": 1, "v100": 1}) == "gres/gpu:a100=-1,gres/gpu:v100=2"


# --- sacctmgr: a first `up`, then a second one -------------------------------------------------


class FakeSacctmgr:
    """Answers the listing commands with `associations` and `users`; records the rest."""

    def __init__(self, associations: str, users: str) -> None:
        self.associations, self.users = associations, users
        self.changes: list[list[str]] = []

    def run(self, argv: Sequence[str]) -> str:
        argv = list(argv)
        if argv[:5] == ["sacctmgr", "--parsable2", "--noheader", "show", "associations"]:
            # format=Account,User,GrpTRES of the recorded Cluster|Account|User|GrpTRES rows
            return "".join(line.split("|", 1)[1] + "\n" for line in self.associations.splitlines())
        if argv[:5] == ["sacctmgr", "--parsable2", "--noheader", "show", "user"]:
            return self.users
        if argv[:5] == ["sacctmgr", "--parsable2", "--noheader", "show", "cluster"]:
            return "hetsched\n"
        self.changes.append(argv)
        return ""


def set_quota(account: str, grp_tres: str) -> list[str]:
    where = ["where", f"name={account}", "cluster=hetsched"]
    return ["sacctmgr", "-i", "modify", "account", *where, "set", f"GrpTRES={grp_tres}"]


def test_a_first_up_adds_accounts_users_defaults_and_quotas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tenants, "ensure_users", lambda names=(): [])
    fake = FakeSacctmgr("hetsched|root||\nhetsched|root|root|\n", "root|root\n")
    done = Tenants(CONFIG, fake, "log").ensure_accounts()
    assert fake.changes == [
        ["sacctmgr", "-i", "add", "account", "acct-a,acct-b,acct-c", "cluster=hetsched"],
        [
            "sacctmgr",
            "-i",
            "add",
            "user",
            "root,hetsched-alice,hetsched-bob",
            "account=acct-a,acct-b,acct-c",
            "cluster=hetsched",
            "defaultaccount=acct-c",
        ],
        [
            "sacctmgr",
            "-i",
            "modify",
            "user",
            "where",
            "name=root,hetsched-alice,hetsched-bob",
            "set",
            "defaultaccount=acct-c",
        ],
        set_quota("acct-a", "gres/gpu:v100=2"),
        set_quota("acct-b", "gres/gpu:k80=4"),
    ]
    assert done[-2:] == ["acct-a GrpTRES=gres/gpu:v100=2", "acct-b GrpTRES=gres/gpu:k80=4"]


def test_a_second_up_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded associations are what a first `up --accounting` made."""
    monkeypatch.setattr(tenants, "ensure_users", lambda names=(): [])
    recorded = (GOLDEN / "sacctmgr_associations.txt").read_text()
    users = "hetsched-alice|acct-c\nhetsched-bob|acct-c\nroot|acct-c\n"
    fake = FakeSacctmgr(recorded, users)
    assert Tenants(CONFIG, fake, "log").ensure_accounts() == []
    assert fake.changes == []
    assert Tenants(CONFIG, fake, "log").ensure_cluster() is False


def test_a_sacctmgr_failure_names_the_log_to_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_hetsched.errors import SlurmCommandError

    class Failing:
        def run(self, argv: Sequence[str]) -> str:
            raise SlurmCommandError(argv, 1, "sacctmgr: error: Problem talking to the database")

    with pytest.raises(DevClusterError, match=r"Problem talking.*\n\(see /d/log/slurmdbd.log\)"):
        Tenants(CONFIG, Failing(), "/d/log/slurmdbd.log").ensure_cluster()


# --- when accounting is on ---------------------------------------------------------------------


@pytest.fixture
def dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DevCluster:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(processes, "stop", lambda pids, timeout_s=10.0: [])
    monkeypatch.setattr(processes, "pids_with_env", lambda *args: [])
    return DevCluster(CONFIG, tmp_path / "cluster")


def started_with(dev: DevCluster, monkeypatch: pytest.MonkeyPatch, **up: object) -> list[bool]:
    """What accounting each `dev.up(**up)` wanted (the daemons' start is left out)."""
    wanted: list[bool] = []
    monkeypatch.setattr(install, "ensure_installed", lambda accounting=False: False)
    monkeypatch.setattr(install, "ensure_munged", lambda started: None)
    monkeypatch.setattr(dev, "running_daemons", lambda: {})
    monkeypatch.setattr(dev, "_check_ports", lambda running: None)

    def accounting_up(on: bool, *, slurmctld_runs: bool) -> str:
        wanted.append(on)
        raise DevClusterError("stop here")

    monkeypatch.setattr(dev.accounting, "up", accounting_up)
    with pytest.raises(DevClusterError, match="stop here"):
        dev.up(**up)
    return wanted


def test_a_plain_up_keeps_accounting_until_a_down(
    dev: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert started_with(dev, monkeypatch) == [False]
    assert "accounting_storage/none" in dev.slurm_conf.read_text()
    dev.paths.accounting_marker.parent.mkdir(parents=True, exist_ok=True)
    dev.paths.accounting_marker.touch()  # what `up --accounting` leaves
    assert started_with(dev, monkeypatch) == [True]
    assert "accounting_storage/slurmdbd" in dev.slurm_conf.read_text()
    monkeypatch.setattr(dev, "slurmctld_pid", lambda: None)
    dev.down()
    assert not dev.paths.accounting_marker.exists()
    assert started_with(dev, monkeypatch) == [False]
    assert started_with(dev, monkeypatch, accounting=True) == [True]


def test_a_running_cluster_without_accounting_asks_for_a_down(
    dev: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev.paths.etc.mkdir(parents=True)
    host = cluster._controller_host()
    dev.slurm_conf.write_text(render_slurm_conf(CONFIG, dev.paths, host))
    monkeypatch.setattr(dev, "running_daemons", lambda: {"slurmctld": 1, "slurmd n1": 2})
    with pytest.raises(DevClusterError, match=r"runs without accounting: .*down.*--accounting"):
        dev.up(accounting=True)
    dev.slurm_conf.write_text(render_slurm_conf(CONFIG, dev.paths, host, accounting=True))
    with pytest.raises(DevClusterError, match=r"runs with accounting: run .*down"):
        dev.up(accounting=False)


def test_status_says_whether_accounting_is_up(tmp_path: Path) -> None:
    accounting = Accounting(CONFIG, ClusterPaths(tmp_path))
    assert accounting.status_line().startswith("accounting: off")
    accounting.paths.run.mkdir()
    accounting.paths.accounting_marker.touch()
    assert "mariadbd and slurmdbd not running" in accounting.status_line()


def test_a_folder_too_deep_for_a_socket_is_refused(tmp_path: Path) -> None:
    deep = Accounting(CONFIG, ClusterPaths(tmp_path / ("x" * 120)))
    with pytest.raises(DevClusterError, match="shorter path"):
        deep._start_mariadbd()


# --- the command line --------------------------------------------------------------------------


def test_up_and_install_take_accounting() -> None:
    parse = build_parser().parse_args
    assert parse(["devcluster", "up", "--accounting"]).accounting is True
    assert parse(["devcluster", "up"]).accounting is None  # keeps what was chosen
    assert parse(["devcluster", "install", "--accounting"]).accounting is True


def test_accounting_is_refused_on_the_sid_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    for action in ("up", "install"):
        argv = ["devcluster", "--dir", str(tmp_path), action, "--slurm", "sid", "--accounting"]
        assert main(argv) == 1
        assert "only for the system Slurm's dev cluster" in capsys.readouterr().err
