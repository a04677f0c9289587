"""[tenants] of the controller's config: where each Slurm account's GPU quota comes from, the
quota table and its checks, and the quotas in effect (configured, or read from Slurm's
GrpTRES through the backend's runner, replayed from tests/golden/slurm-22.05/)."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_hetsched.controller.config import (
    ConfigError,
    ControllerConfig,
    effective_quotas,
    load_config,
)
from slurm_hetsched.slurm.accounts import (
    ASSOCIATIONS_ARGV,
    CONFIG_ARGV,
    MAX_QUOTA,
    AccountingDisabledError,
)

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "slurm-22.05"
CONFIG = (GOLDEN / "scontrol_config_accounting.txt").read_text()
ASSOCIATIONS = (GOLDEN / "sacctmgr_associations.txt").read_text()


def load(tmp_path: Path, text: str) -> ControllerConfig:
    path = tmp_path / "hetsched.toml"
    path.write_text(text)
    return load_config(path)


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text)
    return str(caught.value)


class Recorded:
    def __init__(self, answers: dict[tuple[str, ...], str]) -> None:
        self.answers = answers
        self.ran: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str]) -> str:
        self.ran.append(tuple(argv))
        return self.answers[tuple(argv)]


def test_by_default_quotas_come_from_the_config_and_there_are_none() -> None:
    config = ControllerConfig()
    assert (config.quotas_from, dict(config.tenant_quotas)) == ("config", {})
    assert effective_quotas(config) == {}


def test_a_quota_table_is_read_as_account_to_type_to_count(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
        [tenants]
        quotas_from = "config"
        [tenants.quota]
        acct-a = { v100 = 2 }
        acct-b = { k80 = 4, p100 = 0 }
        acct-c = {}
        """,
    )
    assert config.quotas_from == "config"
    assert config.tenant_quotas == {
        "acct-a": {"v100": 2},
        "acct-b": {"k80": 4, "p100": 0},
        "acct-c": {},
    }
    assert effective_quotas(config, gpu_types=["v100", "p100", "k80"]) == config.tenant_quotas


def test_an_inline_quota_table_is_the_same(tmp_path: Path) -> None:
    config = load(tmp_path, "[tenants]\nquota = { acct-a = { v100 = 2 }, acct-b = { k80 = 4 } }\n")
    assert config.tenant_quotas == {"acct-a": {"v100": 2}, "acct-b": {"k80": 4}}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[tenants]\nquotas_from = "sacct"',
            r"tenants\.quotas_from: expected one of config, slurm",
        ),
        ("[tenants]\nquotas_from = 1", "tenants.quotas_from: expected one of"),
        ("[tenants]\nquota = 3", r"tenants\.quota: expected a table of account"),
        ("[tenants.quota]\nacct-a = 2", r"tenants\.quota: acct-a: expected a table of GPU type"),
        ("[tenants.quota]\nacct-a = { v100 = -1 }", r"acct-a\.v100: expected a whole number"),
        ("[tenants.quota]\nacct-a = { v100 = 1.5 }", r"acct-a\.v100: expected a whole number"),
        ("[tenants.quota]\nacct-a = { v100 = true }", r"acct-a\.v100: expected a whole number"),
        ("[tenants.quota]\nacct-a = { v100 = '2' }", r"acct-a\.v100: expected a whole number"),
        (f"[tenants.quota]\nacct-a = {{ v100 = {MAX_QUOTA + 1} }}", f"0 to {MAX_QUOTA}"),
        ("[tenants.quota]\nacct-a = { 'v 100' = 1 }", "'v 100' is not a GPU type name"),
        ("[tenants.quota]\nACCT-A = { v100 = 1 }", "lower case: 'acct-a'"),
        ("[tenants.quota]\n'a,b' = { v100 = 1 }", "'a,b' is not a Slurm account name"),
        ("[tenants]\nquotas = 'slurm'", r"unknown key tenants\.quotas \(did you mean quota"),
        (
            '[tenants]\nquotas_from = "slurm"\n[tenants.quota]\nacct-a = { v100 = 2 }',
            'tenants.quota is read only with tenants.quotas_from = "config"',
        ),
    ],
)
def test_mistakes_are_named_by_key(tmp_path: Path, text: str, message: str) -> None:
    error = error_of(tmp_path, text)
    assert str(tmp_path / "hetsched.toml") in error
    assert re.search(message, error), error


def test_configured_quotas_on_types_the_cluster_lacks_are_named(tmp_path: Path) -> None:
    config = load(
        tmp_path, "[tenants.quota]\nacct-a = { v100 = 2, h100 = 1 }\nacct-b = { a10 = 1 }\n"
    )
    with pytest.raises(ConfigError) as caught:
        effective_quotas(config, gpu_types=["v100", "p100", "k80"])
    message = str(caught.value)
    assert "acct-a: h100; acct-b: a10" in message and "(it has k80, p100, v100)" in message
    # Unknown to the config alone: the cluster's types are checked when they are known.
    assert effective_quotas(config) == {"acct-a": {"v100": 2, "h100": 1}, "acct-b": {"a10": 1}}


def test_quotas_from_slurm_are_the_accounts_grp_tres(tmp_path: Path) -> None:
    config = load(tmp_path, '[tenants]\nquotas_from = "slurm"\n')
    runner = Recorded({CONFIG_ARGV: CONFIG, ASSOCIATIONS_ARGV: ASSOCIATIONS})
    assert effective_quotas(config, runner, ["v100", "p100", "k80"]) == {
        "acct-a": {"v100": 2},
        "acct-b": {"k80": 4},
    }
    assert runner.ran == [CONFIG_ARGV, ASSOCIATIONS_ARGV]


def test_slurm_quotas_on_types_the_cluster_lacks_are_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = ControllerConfig(quotas_from="slurm")
    runner = Recorded({CONFIG_ARGV: CONFIG, ASSOCIATIONS_ARGV: ASSOCIATIONS})
    assert effective_quotas(config, runner, ["v100"]) == {"acct-a": {"v100": 2}}
    assert "acct-b: k80" in caplog.text


def test_slurm_enforcing_limits_is_warned(caplog: pytest.LogCaptureFixture) -> None:
    enforced = CONFIG.replace("= associations", "= associations,limits,safe")
    runner = Recorded({CONFIG_ARGV: enforced, ASSOCIATIONS_ARGV: ASSOCIATIONS})
    with caplog.at_level(logging.WARNING):
        quotas = effective_quotas(ControllerConfig(quotas_from="slurm"), runner)
    assert quotas == {"acct-a": {"v100": 2}, "acct-b": {"k80": 4}}
    assert "AccountingStorageEnforce=associations,limits,safe" in caplog.text
    assert "borrow" in caplog.text


def test_quotas_from_slurm_need_accounting_and_a_runner() -> None:
    config = ControllerConfig(quotas_from="slurm")
    plain = CONFIG.replace("accounting_storage/slurmdbd", "accounting_storage/none")
    with pytest.raises(AccountingDisabledError):
        effective_quotas(config, Recorded({CONFIG_ARGV: plain}))
    with pytest.raises(ValueError, match="runner"):
        effective_quotas(config)
