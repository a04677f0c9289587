"""Slurm accounts as tenants: each account's GPU quota per type, read from its association's
GrpTRES (`sacctmgr`), and whether the cluster enforces such limits (`scontrol show config`).

An account's quota is the `gres/gpu:<type>=<n>` entries of the GrpTRES of its account-level
association on this cluster (the row with no user). Other TRES (cpu, mem, licenses, ...) are
no GPU quota and are ignored; an untyped `gres/gpu=<n>` names no type and is ignored with a
warning, and so is a value that is not a whole number >= 0. A value above MAX_QUOTA is read as
MAX_QUOTA (with a warning): no cluster has that many GPUs of one type.

Astraea lets a tenant borrow GPUs beyond its quota, so the quota must not be a cap in Slurm:
with AccountingStorageEnforce containing `limits` (or `safe`, which implies it) slurmctld
enforces GrpTRES and never starts a job over it. `limits_warning` says so for the caller to
warn (docs/admin.md, "Tenants and quotas").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Protocol

from slurm_hetsched.errors import SlurmError, SlurmParseError

logger = logging.getLogger(__name__)

# The account-level and user-level associations of every cluster, one `|`-separated row each.
ASSOCIATIONS_ARGV = (
    "sacctmgr",
    "--parsable2",
    "--noheader",
    "show",
    "associations",
    "format=Cluster,Account,User,GrpTRES",
)
CONFIG_ARGV = ("scontrol", "show", "config")
MAX_QUOTA = 100_000
# A GPU type as Slurm's gres.conf takes it (no ',', ':', '=' or spaces).
GPU_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
_COUNT = re.compile(r"[0-9]+")
_CONFIG_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)\s*=\s?(.*)$")
_GPU_TRES = "gres/gpu"
# Tokens of AccountingStorageEnforce under which slurmctld enforces association limits.
_LIMIT_TOKENS = frozenset({"limits", "safe"})

Quotas = dict[str, dict[str, int]]


class CommandRunner(Protocol):
    """What runs Slurm's commands: SlurmCli (the backend's `cli`), or a recording in tests."""

    def run(self, argv: Sequence[str]) -> str: ...


class AccountingDisabledError(SlurmError):
    """The cluster keeps no accounting database (AccountingStorageType is not slurmdbd), so
    it has no accounts to read quotas from."""


def parse_grp_tres(text: str, where: str = "GrpTRES") -> dict[str, int]:
    """The GPU quota in one GrpTRES value ('cpu=8,gres/gpu:v100=2'): GPU type -> count.

    Entries that are not `gres/gpu:<type>=<whole number>` are left out (with a warning for
    GPU entries that cannot be read); a count above MAX_QUOTA is read as MAX_QUOTA; a zero
    is no quota. `where` names the association in the warnings.
    """
    quota: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, equals, value = item.partition("=")
        if not equals:
            logger.warning("%s: %r is not name=value; ignored", where, item)
            continue
        if name == _GPU_TRES:
            logger.warning(
                "%s: %r names no GPU type (a quota is gres/gpu:<type>=<count>); ignored",
                where,
                item,
            )
            continue
        prefix, _, gpu_type = name.partition(":")
        if prefix != _GPU_TRES:
            logger.debug("%s: %r is no GPU quota; ignored", where, item)
            continue
        if not GPU_TYPE.fullmatch(gpu_type):
            logger.warning("%s: %r names no valid GPU type; ignored", where, item)
            continue
        count = _count(value, f"{where}: {item!r}")
        if count is None:
            continue
        if gpu_type in quota:
            logger.warning("%s: gres/gpu:%s is given twice; the last one counts", where, gpu_type)
        quota[gpu_type] = count
    return {gpu_type: count for gpu_type, count in quota.items() if count}


def _count(value: str, where: str) -> int | None:
    if not _COUNT.fullmatch(value):
        logger.warning("%s: the count is not a whole number >= 0; ignored", where)
        return None
    # Compared as text first: int() of thousands of digits is slow, then refused.
    digits = value.lstrip("0") or "0"
    if len(digits) > len(str(MAX_QUOTA)) or int(digits) > MAX_QUOTA:
        logger.warning("%s: more GPUs than any cluster has; read as %d", where, MAX_QUOTA)
        return MAX_QUOTA
    return int(digits)


def parse_associations(text: str, cluster: str) -> Quotas:
    """{account: {GPU type: count}} from `sacctmgr --parsable2 --noheader show associations
    format=Cluster,Account,User,GrpTRES`: the account-level rows (empty User) of `cluster`
    with a GPU quota. Rows of other clusters and of users are left out; a row without the four
    fields is left out with a warning."""
    quotas: Quotas = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != 4:
            logger.warning(
                "sacctmgr associations, line %d: %d fields, not Cluster|Account|User|GrpTRES; "
                "ignored: %r",
                number,
                len(fields),
                line[:200],
            )
            continue
        row_cluster, account, user, grp_tres = (field.strip() for field in fields)
        if row_cluster != cluster or user or not account:
            continue
        quota = parse_grp_tres(grp_tres, f"account {account!r} GrpTRES")
        if quota:
            quotas.setdefault(account, {}).update(quota)
    return quotas


def parse_config(text: str) -> dict[str, str]:
    """`scontrol show config`'s `Key = value` lines as a mapping (other lines are left out)."""
    settings = {}
    for line in text.splitlines():
        if match := _CONFIG_LINE.match(line.strip()):
            settings[match.group(1)] = match.group(2).strip()
    return settings


def accounting_enabled(settings: Mapping[str, str]) -> bool:
    """Whether the cluster keeps accounts: AccountingStorageType is slurmdbd."""
    return settings.get("AccountingStorageType", "").endswith("/slurmdbd")


def enforces_limits(settings: Mapping[str, str]) -> bool:
    """Whether slurmctld enforces association limits such as GrpTRES (AccountingStorageEnforce
    has `limits` or `safe`): then a quota read from GrpTRES is a cap, and borrowing beyond it
    is impossible."""
    tokens = settings.get("AccountingStorageEnforce", "").lower().replace(" ", "").split(",")
    return bool(_LIMIT_TOKENS & set(tokens))


def limits_warning(settings: Mapping[str, str]) -> str | None:
    """What to warn when the cluster enforces limits (None when it does not)."""
    if not enforces_limits(settings):
        return None
    return (
        f"AccountingStorageEnforce={settings.get('AccountingStorageEnforce')} enforces "
        "association limits: each account's GrpTRES is a cap in Slurm, so no tenant can "
        "borrow GPUs beyond its quota; keep AccountingStorageEnforce without limits and safe "
        "(e.g. associations) to let Astraea lend idle GPUs (docs/admin.md, 'Tenants and quotas')"
    )


def read_config(runner: CommandRunner) -> dict[str, str]:
    """The cluster's running configuration (`scontrol show config`)."""
    settings = parse_config(runner.run(list(CONFIG_ARGV)))
    if "ClusterName" not in settings:
        raise SlurmParseError("`scontrol show config` printed no ClusterName")
    return settings


def read_quotas(runner: CommandRunner, settings: Mapping[str, str] | None = None) -> Quotas:
    """Each account's GPU quota on this cluster (the one `settings` describes, else the
    one `scontrol show config` reports), from its association's GrpTRES.

    Raises:
        AccountingDisabledError: the cluster keeps no accounting (no slurmdbd).
        SlurmError: sacctmgr or scontrol failed (the error carries the command and stderr).
    """
    settings = read_config(runner) if settings is None else settings
    if not accounting_enabled(settings):
        raise AccountingDisabledError(
            "quotas from Slurm need its accounting (AccountingStorageType="
            "accounting_storage/slurmdbd); this cluster has AccountingStorageType="
            f"{settings.get('AccountingStorageType') or '(unset)'}"
        )
    return parse_associations(runner.run(list(ASSOCIATIONS_ARGV)), settings["ClusterName"])


def unknown_types(quotas: Mapping[str, Mapping[str, int]], gpu_types: Sequence[str]) -> list[str]:
    """'account: type' for each quota on a GPU type the cluster does not have."""
    known = set(gpu_types)
    return [
        f"{account}: {gpu_type}"
        for account, quota in sorted(quotas.items())
        for gpu_type in sorted(quota)
        if gpu_type not in known
    ]
