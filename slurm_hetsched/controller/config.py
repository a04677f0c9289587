"""The controller's configuration file (`etc/hetsched.toml`, documented key by key there and in
docs/admin.md): loading, defaults and validation with errors that name the key.

Relative paths in the file are resolved against the file's own folder, so a config next to its
store works from any working directory. Which keys there are, and how each value is checked, is
config_keys.py's.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_hetsched import data_files
from slurm_hetsched.controller.config_keys import KEYS, OLD_KEYS
from slurm_hetsched.controller.restart_cost import DEFAULT_MAX_RESTART_S, RestartSettings
from slurm_hetsched.core.catalog import merge_gpu_types
from slurm_hetsched.core.explore import ExploreSettings
from slurm_hetsched.core.mechanism import DEFAULT_RESTART_S, DEFAULT_RESTART_SHARE, RoundOptions
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.core.throughput.prior import with_estimates
from slurm_hetsched.errors import ConfigError as _BaseConfigError
from slurm_hetsched.errors import HetschedError
from slurm_hetsched.rounds.tick import TickSettings
from slurm_hetsched.slurm.accounts import (
    CommandRunner,
    limits_warning,
    read_config,
    read_quotas,
    unknown_types,
)

logger = logging.getLogger(__name__)


class ConfigError(_BaseConfigError, ValueError):
    """The config file is missing, not TOML, or has a bad key or value (named in the message)."""


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Every setting of `hetsched controller`; the defaults are those of etc/hetsched.toml."""

    # [controller]
    round_s: float = 360.0
    policy: str = "max_min_fairness_perf"
    policy_options: Mapping[str, str] = field(default_factory=dict)
    min_reset_interval_s: float = 1920.0
    round_queue: str = "per_type"
    work_conserving: bool = True
    # A job of a class in no table: "learn" (the neutral prior, learned online) or "refuse".
    unknown_classes: str = "learn"
    # Stints of a class in no table on each type it could use (core/explore.py).
    explore: bool = True
    explore_rounds_per_type: int = ExploreSettings().rounds_per_type
    store: Path = Path("/var/lib/hetsched/rounds.sqlite")
    lock: Path | None = None  # default: the store's path + ".lock"
    state_root: Path = Path("/var/lib/hetsched/state")
    ack_timeout_s: float = 120.0
    requeue_timeout_s: float = 120.0
    checkpoint_signal: str = "USR2"
    release_rejected: bool = True
    key_release_s: float = 86_400.0
    log_level: str = "info"
    resubmit_environment: Mapping[str, str] = field(default_factory=dict)
    # Forked copies (HadarE): a job's `fork=` (else fork_default), at most fork_max.
    fork_default: int = 1
    fork_max: int = 8
    fork_merge_timeout_s: float = 300.0
    # [slurm]
    slurm_conf: str | None = None
    bin_dir: str | None = None
    command_timeout_s: float = 60.0
    retries: int = 3
    retry_backoff_s: float = 1.0
    partitions: tuple[str, ...] = ()
    qos: tuple[str, ...] = ()
    # [site]
    throughputs: Path | None = None
    gpu_types: Path | None = None
    progress_max_age_s: float = 600.0
    # [metrics]
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    # [moves]
    moves: str = "amortized"
    restart_share: float = DEFAULT_RESTART_SHARE
    restart_s: float = DEFAULT_RESTART_S
    max_restart_s: float = DEFAULT_MAX_RESTART_S
    restart_s_by_class: Mapping[str, float] = field(default_factory=dict)
    # [watchdog]
    watchdog_after_s: float | None = None  # default: watchdog_after()
    # [tenants]: "config" (tenant_quotas) or "slurm" (each account's GrpTRES); effective_quotas
    quotas_from: str = "config"
    tenant_quotas: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # [testing]
    failpoint: str | None = None
    source: Path | None = None

    def watchdog_after(self) -> float:
        """Seconds without a heartbeat before the watchdog hands the jobs back: the configured
        watchdog.after_s, else 15 minutes or 3 rounds, whichever is longer."""
        if self.watchdog_after_s is not None:
            return self.watchdog_after_s
        return max(900.0, 3 * self.round_s)

    @property
    def lock_path(self) -> Path:
        return self.lock if self.lock is not None else Path(f"{self.store}.lock")

    def site_data(self) -> SiteData:
        """Throughput table and GPU type data, shipped or from the configured files."""
        try:
            table = (
                data_files.shipped_throughputs()
                if self.throughputs is None
                else data_files.load_throughputs(self.throughputs)
            )
            gpu_types = (
                data_files.shipped_gpu_types()
                if self.gpu_types is None
                else data_files.load_gpu_types(self.gpu_types)
            )
        except (HetschedError, OSError, ValueError) as exc:
            raise ConfigError(f"site.throughputs / site.gpu_types: {exc}") from exc
        # The site's GPU types field by field over the shipped ones: a site file that gives
        # only prices keeps the shipped memory sizes (core/memory_fit.py) and figures. Types
        # with figures but no column, and classes in no table, are estimated (docs/
        # throughput.md, "Estimates for unprofiled types"), then learned online.
        if self.gpu_types is not None:
            gpu_types = merge_gpu_types(data_files.shipped_gpu_types(), gpu_types)
        estimated = with_estimates(table, gpu_types, prior=self.unknown_classes == "learn")
        return SiteData(estimated, gpu_types, data_files.shipped_site_energy())

    def tick_settings(self) -> TickSettings:
        """How the rounds run: the settings the tick (and a replay of its rounds) uses."""
        return TickSettings(
            round_s=self.round_s,
            min_reset_interval_s=self.min_reset_interval_s,
            round_options=RoundOptions(
                queue=self.round_queue,
                work_conserving=self.work_conserving,
                moves=self.moves,
                restart_s=self.restart_s,
                restart_share=self.restart_share,
            ),
            explore=ExploreSettings(self.explore, self.explore_rounds_per_type),
        )

    def restart_settings(self) -> RestartSettings:
        """How the controller estimates each job's restart cost (controller/restart_cost.py)."""
        return RestartSettings(
            default_s=self.restart_s,
            by_class=dict(self.restart_s_by_class),
            max_s=self.max_restart_s,
        )

    def replace(self, **changes: Any) -> ControllerConfig:
        return dataclasses.replace(self, **changes)


def load_config(path: str | Path | None) -> ControllerConfig:
    """The configuration in `path` (None: every default).

    Raises:
        ConfigError: a missing or unreadable file, invalid TOML (with its line), an unknown
            section or key (with the closest valid one), or a bad value (with the full key and
            what was expected), or a policy / policy option the core does not accept.
    """
    if path is None:
        return ControllerConfig()
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a UTF-8 text file (TOML is UTF-8): {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    base = path.resolve().parent
    values: dict[str, Any] = {"source": path}
    set_by: dict[str, str] = {}  # field -> the key that set it
    for section, table in raw.items():
        if section not in KEYS:
            owners = [s for s, keys in KEYS.items() if section in keys]
            if owners and not isinstance(table, dict):
                # A key written above every [section] header.
                raise ConfigError(
                    f"{path}: key {section} is outside any section; move it under "
                    f"[{owners[0]}] ({owners[0]}.{section})"
                )
            raise ConfigError(f"{path}: unknown section [{section}]{_hint(section, KEYS)}")
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: {section} must be a [{section}] table")
        for key, value in table.items():
            known = KEYS[section]
            if key not in known and key not in OLD_KEYS.get(section, {}):
                raise ConfigError(f"{path}: unknown key {section}.{key}{_hint(key, known)}")
            name, parse = known[key] if key in known else OLD_KEYS[section][key]
            if name in set_by:  # an old key and its successor both set
                raise ConfigError(
                    f"{path}: {section}.{set_by[name]} and {section}.{key} set the same thing; "
                    f"keep only {section}.{name}"
                )
            set_by[name] = key
            try:
                values[name] = parse(value, base)
            except ValueError as exc:
                raise ConfigError(f"{path}: {section}.{key}: {exc}") from exc
    config = ControllerConfig(**values)
    try:
        check_policy(config)
        check_restart_costs(config)
        check_tenants(config)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    return config


def check_policy(config: ControllerConfig) -> None:
    """The policy and its options are ones the core accepts (raises ConfigError)."""
    # The name first: with an unknown policy, its options cannot be judged.
    try:
        get_policy(config.policy)
    except (HetschedError, KeyError, ValueError) as exc:
        raise ConfigError(f"controller.policy: {exc}") from exc
    try:
        get_policy(config.policy, dict(config.policy_options))
    except (HetschedError, KeyError, ValueError) as exc:
        raise ConfigError(f"controller.policy_options: {exc}") from exc


def check_restart_costs(config: ControllerConfig) -> None:
    """The restart costs an admin sets stay within the cap of measured ones (raises
    ConfigError): a default above it would rank a job never measured above every measured
    one."""
    cap = f"moves.max_restart_s ({config.max_restart_s:g} s)"
    if config.restart_s > config.max_restart_s:
        raise ConfigError(f"moves.restart_s: {config.restart_s:g} s is above {cap}")
    for job_class, seconds in sorted(config.restart_s_by_class.items()):
        if seconds > config.max_restart_s:
            raise ConfigError(
                f"moves.restart_s_by_class: {job_class!r} = {seconds:g} s is above {cap}"
            )


def check_tenants(config: ControllerConfig) -> None:
    """[tenants.quota] only with quotas_from = "config" (raises ConfigError): with "slurm" the
    quotas are the accounts' GrpTRES, and a table that is never read would mislead."""
    if config.quotas_from == "slurm" and config.tenant_quotas:
        raise ConfigError(
            'tenants.quota is read only with tenants.quotas_from = "config"; with "slurm" '
            "each account's quota is the GrpTRES of its association (sacctmgr): remove the "
            '[tenants.quota] table, or set quotas_from = "config"'
        )


def effective_quotas(
    config: ControllerConfig,
    runner: CommandRunner | None = None,
    gpu_types: Sequence[str] | None = None,
) -> dict[str, dict[str, int]]:
    """Each tenant's GPU quota, {account: {GPU type: count}}: tenants.quota as configured, or
    (quotas_from = "slurm") each account's GrpTRES on the cluster, read through `runner` (the
    backend's SlurmCli) with one `scontrol show config` and one `sacctmgr` call: cheap enough
    to call every round, so that a quota changed with sacctmgr counts from the next round.

    `gpu_types`, the cluster's GPU types when known, checks the quotas: a configured one on
    another type is an error naming it; one read from Slurm is dropped with a warning. When
    Slurm enforces association limits, GrpTRES is a cap and no tenant can borrow beyond it:
    that is logged as a warning (slurm_hetsched/slurm/accounts.py).

    Raises:
        ConfigError: a configured quota on a GPU type the cluster does not have.
        SlurmError: quotas_from = "slurm" and scontrol or sacctmgr failed, or the cluster has
            no accounting (AccountingDisabledError); a caller reading every round may keep
            the quotas it read last.
        ValueError: quotas_from = "slurm" without a runner.
    """
    if config.quotas_from == "config":
        quotas = {account: dict(quota) for account, quota in config.tenant_quotas.items()}
        unknown = [] if gpu_types is None else unknown_types(quotas, gpu_types)
        if unknown:
            raise ConfigError(
                f"tenants.quota: GPU types the cluster does not have: {'; '.join(unknown)} "
                f"(it has {', '.join(sorted(gpu_types or ())) or 'none'})"
            )
        return quotas
    if runner is None:
        raise ValueError('tenants.quotas_from = "slurm" reads Slurm: pass the backend\'s runner')
    settings = read_config(runner)
    if (warning := limits_warning(settings)) is not None:
        logger.warning("%s", warning)
    quotas = read_quotas(runner, settings)
    if gpu_types is not None and (unknown := unknown_types(quotas, gpu_types)):
        logger.warning(
            "GrpTRES quotas on GPU types the cluster does not have are ignored: %s",
            "; ".join(unknown),
        )
        known = set(gpu_types)
        quotas = {
            account: kept
            for account, quota in quotas.items()
            if (kept := {t: n for t, n in quota.items() if t in known})
        }
    return quotas


def _hint(name: str, valid: Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(name, list(valid), n=1)
    if close:
        return f" (did you mean {close[0]}?)"
    return f"; valid: {', '.join(valid)}"
