"""The accounts, users and GPU quotas the dev cluster's accounting holds (`up --accounting`),
made with sacctmgr so that a second `up` finds them and changes nothing.

Three accounts (tenants): acct-a owns the GPUs of the layout's first node (GrpTRES
gres/gpu:v100=2 on the default layout), acct-b those of its last node (gres/gpu:k80=4), and
acct-c none: it only borrows. root and the test users (hetsched-alice, hetsched-bob: system
users made with useradd when missing, as tests/users.py does) are in all three, with acct-c as
their default account, so a job without --account runs (as a borrower). Quotas are GrpTRES
only: slurm.conf enforces associations but no limits, so they are never caps.
"""

from __future__ import annotations

import logging
import pwd
import subprocess
import time
from collections.abc import Mapping

from slurm_hetsched.devcluster.install import which
from slurm_hetsched.errors import DevClusterError, SlurmError
from slurm_hetsched.nodelayout import DevClusterConfig
from slurm_hetsched.slurm.accounts import CommandRunner, parse_grp_tres

logger = logging.getLogger(__name__)

ACCOUNTS = ("acct-a", "acct-b", "acct-c")
DEFAULT_ACCOUNT = "acct-c"
USERS = ("root", "hetsched-alice", "hetsched-bob")
# slurmdbd answers within a second of its start; slurmctld registers the GPU TRES at its start.
ANSWER_TIMEOUT_S = 30.0
_LIST = ("sacctmgr", "--parsable2", "--noheader", "show")


def tenant_quotas(config: DevClusterConfig) -> dict[str, dict[str, int]]:
    """The quotas `up --accounting` gives: acct-a the first node's GPUs, acct-b the last
    node's (when there are two nodes or more), acct-c none."""
    quotas = {"acct-a": dict(config.nodes[0].gpus)}
    if len(config.nodes) > 1:
        quotas["acct-b"] = dict(config.nodes[-1].gpus)
    return quotas


def grp_tres(wanted: Mapping[str, int], current: Mapping[str, int]) -> str:
    """The GrpTRES assignment that turns the GPU quota `current` into `wanted` (-1 clears a
    type `wanted` lacks)."""
    values = {gpu_type: -1 for gpu_type in current if gpu_type not in wanted} | dict(wanted)
    return ",".join(f"gres/gpu:{gpu_type}={count}" for gpu_type, count in sorted(values.items()))


def ensure_users(names: tuple[str, ...] = USERS) -> list[str]:
    """Make the Unix users that are missing (system users, no home, no login shell); sacctmgr
    refuses a user the system does not know. Returns the users made."""
    made = []
    for name in names:
        try:
            pwd.getpwnam(name)
            continue
        except KeyError:
            pass
        argv = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
        program = which(argv[0])
        done = subprocess.run(
            [program or argv[0], *argv[1:]], capture_output=True, text=True, timeout=30, check=False
        )
        if done.returncode != 0:
            raise DevClusterError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")
        made.append(name)
    return made


class Tenants:
    """The dev cluster's accounts in its slurmdbd, through sacctmgr."""

    def __init__(self, config: DevClusterConfig, cli: CommandRunner, log_hint: str) -> None:
        self.config = config
        self.cli = cli
        self.cluster = config.name
        self.log_hint = log_hint  # which log to read when sacctmgr fails

    def _sacctmgr(self, *argv: str) -> str:
        try:
            return self.cli.run(["sacctmgr", *argv])
        except SlurmError as exc:
            raise DevClusterError(f"{exc}\n(see {self.log_hint})") from exc

    def _list(self, *argv: str) -> list[list[str]]:
        text = self._sacctmgr(*_LIST[1:], *argv)
        return [line.split("|") for line in text.splitlines() if line.strip()]

    def wait_answers(self) -> None:
        """Wait until slurmdbd answers sacctmgr (it has just been started)."""
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while True:
            try:
                self.cli.run([*_LIST, "cluster", "format=Cluster"])
                return
            except SlurmError as exc:
                if time.monotonic() > deadline:
                    raise DevClusterError(
                        f"slurmdbd does not answer after {ANSWER_TIMEOUT_S:.0f} s: {exc}\n"
                        f"(see {self.log_hint})"
                    ) from exc
            time.sleep(0.2)

    def ensure_cluster(self) -> bool:
        """Register the cluster (before slurmctld first reports to slurmdbd); True if new."""
        if [self.cluster] in self._list("cluster", "format=Cluster"):
            return False
        self._sacctmgr("-i", "add", "cluster", self.cluster)
        return True

    def ensure_accounts(self) -> list[str]:
        """Accounts, users' associations, default accounts and quotas as this module says;
        returns what was changed (nothing on a second run). Run once slurmctld has started:
        the GPU TRES a quota names exist from its registration on."""
        changes = []
        made = ensure_users()
        if made:
            changes.append("made Unix users " + ", ".join(made))
        rows = self._list("associations", f"cluster={self.cluster}", "format=Account,User,GrpTRES")
        accounts = {row[0]: row[2] for row in rows if len(row) == 3 and not row[1]}
        pairs = {(row[0], row[1]) for row in rows if len(row) == 3 and row[1]}
        missing = [account for account in ACCOUNTS if account not in accounts]
        if missing:
            self._sacctmgr("-i", "add", "account", ",".join(missing), f"cluster={self.cluster}")
            changes.append("added accounts " + ", ".join(missing))
        users = [u for u in USERS if any((a, u) not in pairs for a in ACCOUNTS)]
        if users:
            # Adds only the associations that are missing.
            self._sacctmgr(
                "-i",
                "add",
                "user",
                ",".join(users),
                f"account={','.join(ACCOUNTS)}",
                f"cluster={self.cluster}",
                f"defaultaccount={DEFAULT_ACCOUNT}",
            )
            changes.append("added users " + ", ".join(users))
        defaults = dict(row[:2] for row in self._list("user", "format=User,DefaultAccount"))
        others = [user for user in USERS if defaults.get(user) != DEFAULT_ACCOUNT]
        if others:
            self._sacctmgr(
                "-i",
                "modify",
                "user",
                "where",
                f"name={','.join(others)}",
                "set",
                f"defaultaccount={DEFAULT_ACCOUNT}",
            )
            changes.append(f"default account {DEFAULT_ACCOUNT} for " + ", ".join(others))
        for account, quota in tenant_quotas(self.config).items():
            current = parse_grp_tres(accounts.get(account, ""), f"account {account}")
            if current != quota:
                self._set_quota(account, grp_tres(quota, current))
                changes.append(f"{account} GrpTRES={grp_tres(quota, {})}")
        return changes

    def _set_quota(self, account: str, value: str) -> None:
        argv = ["-i", "modify", "account", "where", f"name={account}"]
        argv += [f"cluster={self.cluster}", "set", f"GrpTRES={value}"]
        # A GPU TRES appears in the database once slurmctld registered with it.
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while True:
            try:
                self.cli.run(["sacctmgr", *argv])
                return
            except SlurmError as exc:
                if "tres" not in str(exc).lower() or time.monotonic() > deadline:
                    raise DevClusterError(f"{exc}\n(see {self.log_hint})") from exc
                logger.info("GPU TRES not registered yet (%s); retrying", exc)
            time.sleep(0.3)
