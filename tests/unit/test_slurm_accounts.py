"""Reading each Slurm account's GPU quota (GrpTRES) and whether Slurm enforces it, replayed
from the dev cluster's real output with accounting (tests/golden/slurm-22.05/, recorded by
tests/golden/record_accounting.sh), then with odd and hostile values."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_hetsched.errors import SlurmCommandError, SlurmParseError
from slurm_hetsched.slurm.accounts import (
    ASSOCIATIONS_ARGV,
    CONFIG_ARGV,
    MAX_QUOTA,
    AccountingDisabledError,
    accounting_enabled,
    enforces_limits,
    limits_warning,
    parse_associations,
    parse_config,
    parse_grp_tres,
    read_config,
    read_quotas,
    unknown_types,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm-22.05"
ASSOCIATIONS = (GOLDEN / "sacctmgr_associations.txt").read_text()
CONFIG = (GOLDEN / "scontrol_config_accounting.txt").read_text()
QUOTAS = {"acct-a": {"v100": 2}, "acct-b": {"k80": 4}}


class Recorded:
    """Answers each command with recorded output, and remembers what was run."""

    def __init__(self, answers: dict[tuple[str, ...], str]) -> None:
        self.answers = answers
        self.ran: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str]) -> str:
        self.ran.append(tuple(argv))
        answer = self.answers[tuple(argv)]
        if answer.startswith("FAIL:"):
            raise SlurmCommandError(argv, 1, answer.removeprefix("FAIL:"))
        return answer


def with_setting(key: str, value: str) -> str:
    """The recorded configuration with one setting changed."""
    lines = [
        f"{key:<23} = {value}" if line.split(" ")[0] == key else line
        for line in CONFIG.splitlines()
    ]
    return "\n".join(lines) + "\n"


# --- the recorded dev cluster ------------------------------------------------------------------


def test_the_recorded_associations_give_the_dev_clusters_quotas() -> None:
    assert parse_associations(ASSOCIATIONS, "hetsched") == QUOTAS


def test_other_clusters_and_user_rows_are_left_out() -> None:
    text = ASSOCIATIONS + "other|acct-x||gres/gpu:a100=8\nhetsched|acct-c|root|gres/gpu:v100=9\n"
    assert parse_associations(text, "hetsched") == QUOTAS
    assert parse_associations(text, "other") == {"acct-x": {"a100": 8}}
    assert parse_associations(ASSOCIATIONS, "nosuchcluster") == {}


def test_the_recorded_config_has_accounting_without_limits() -> None:
    settings = parse_config(CONFIG)
    assert settings["ClusterName"] == "hetsched"
    assert settings["AccountingStorageEnforce"] == "associations"
    assert settings["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert "gres/gpu:v100" in settings["AccountingStorageTRES"].split(",")
    assert accounting_enabled(settings)
    assert not enforces_limits(settings)
    assert limits_warning(settings) is None


@pytest.mark.parametrize(
    ("enforce", "limits"),
    [
        ("associations", False),
        ("none", False),
        ("associations,qos", False),
        ("associations,limits", True),
        ("associations,limits,safe", True),
        ("safe", True),
        ("Associations, Limits", True),
        ("nolimits", False),
    ],
)
def test_limits_are_enforced_with_limits_or_safe(enforce: str, limits: bool) -> None:
    settings = parse_config(with_setting("AccountingStorageEnforce", enforce))
    assert enforces_limits(settings) is limits
    warning = limits_warning(settings)
    assert (warning is not None) is limits
    if warning:
        assert "borrow" in warning and enforce in warning


def test_read_quotas_runs_scontrol_then_sacctmgr() -> None:
    runner = Recorded({CONFIG_ARGV: CONFIG, ASSOCIATIONS_ARGV: ASSOCIATIONS})
    assert read_quotas(runner) == QUOTAS
    assert runner.ran == [CONFIG_ARGV, ASSOCIATIONS_ARGV]
    assert ASSOCIATIONS_ARGV == (
        "sacctmgr",
        "--parsable2",
        "--noheader",
        "show",
        "associations",
        "format=Cluster,Account,User,GrpTRES",
    )


def test_read_quotas_reuses_settings_it_is_given() -> None:
    runner = Recorded({ASSOCIATIONS_ARGV: ASSOCIATIONS})
    assert read_quotas(runner, read_config(Recorded({CONFIG_ARGV: CONFIG}))) == QUOTAS
    assert runner.ran == [ASSOCIATIONS_ARGV]


def test_without_accounting_reading_quotas_says_why() -> None:
    config = with_setting("AccountingStorageType", "accounting_storage/none")
    runner = Recorded({CONFIG_ARGV: config})
    with pytest.raises(AccountingDisabledError, match="accounting_storage/none"):
        read_quotas(runner)
    assert runner.ran == [CONFIG_ARGV], "sacctmgr is not asked"


def test_a_failing_sacctmgr_is_a_slurm_error_naming_it() -> None:
    runner = Recorded({CONFIG_ARGV: CONFIG, ASSOCIATIONS_ARGV: "FAIL:Problem talking to db"})
    with pytest.raises(SlurmCommandError, match=r"sacctmgr.*Problem talking to db"):
        read_quotas(runner)


def test_a_config_without_cluster_name_is_refused() -> None:
    with pytest.raises(SlurmParseError, match="ClusterName"):
        read_config(Recorded({CONFIG_ARGV: "Configuration data as of now\n"}))


# --- odd and hostile GrpTRES values ------------------------------------------------------------


@pytest.mark.parametrize(
    ("grp_tres", "quota"),
    [
        ("", {}),
        ("gres/gpu:v100=2", {"v100": 2}),
        ("cpu=8,gres/gpu:a100=1,mem=100G,gres/gpu:t4=4", {"a100": 1, "t4": 4}),
        ("gres/gpu:v100=0", {}),  # zero: no quota
        ("gres/gpu:v100=007", {"v100": 7}),
        ("license/matlab=3,gres/shard=4,billing=9,node=2", {}),  # no GPU quota
        ("gres/gpumem=4,gres/gpu:v100=2", {"v100": 2}),  # another GRES named gpu-something
        (" gres/gpu:v100=2 , ,", {"v100": 2}),
    ],
)
def test_gpu_quotas_are_read_from_grp_tres(grp_tres: str, quota: dict[str, int]) -> None:
    assert parse_grp_tres(grp_tres) == quota


@pytest.mark.parametrize(
    ("grp_tres", "warning"),
    [
        ("gres/gpu=4", "names no GPU type"),
        ("gres/gpu:v100=two", "not a whole number"),
        ("gres/gpu:v100=-1", "not a whole number"),
        ("gres/gpu:v100=2.5", "not a whole number"),
        ("gres/gpu:v100=", "not a whole number"),
        ("gres/gpu:v100=+3", "not a whole number"),
        ("gres/gpu:v100=1_000", "not a whole number"),
        ("gres/gpu:v100", "not name=value"),
        ("gres/gpu:=3", "no valid GPU type"),
        ("gres/gpu:v 100=3", "no valid GPU type"),
        ("gres/gpu:v100:x=3", "no valid GPU type"),
        ("gres/gpu:" + "x" * 65 + "=3", "no valid GPU type"),
    ],
)
def test_unreadable_gpu_entries_are_ignored_with_a_warning(
    grp_tres: str, warning: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="slurm_hetsched.slurm.accounts"):
        assert parse_grp_tres(grp_tres + ",gres/gpu:k80=1", "account 'x'") == {"k80": 1}
    assert warning in caplog.text and "account 'x'" in caplog.text


@pytest.mark.parametrize(
    "count", [str(MAX_QUOTA + 1), "18446744073709551615", "9" * 5000, "0" * 5000 + "12"]
)
def test_a_huge_count_is_bounded_quickly(count: str, caplog: pytest.LogCaptureFixture) -> None:
    started = time.monotonic()
    quota = parse_grp_tres(f"gres/gpu:v100={count}")
    assert time.monotonic() - started < 0.1
    expected = 12 if count.endswith("12") else MAX_QUOTA
    assert quota == {"v100": expected}
    assert ("read as" in caplog.text) is (expected == MAX_QUOTA)


def test_a_type_given_twice_keeps_the_last_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    assert parse_grp_tres("gres/gpu:v100=2,gres/gpu:v100=3") == {"v100": 3}
    assert "twice" in caplog.text


def test_malformed_rows_are_left_out_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    text = (
        "hetsched|acct-a||gres/gpu:v100=2\n"
        "hetsched|acct-z|gres/gpu:v100=2\n"  # a field missing
        "hetsched|acct-y|||gres/gpu:v100=2\n"  # one too many
        "\n"
        "hetsched|||gres/gpu:v100=2\n"  # no account
        "garbage\n"
    )
    assert parse_associations(text, "hetsched") == {"acct-a": {"v100": 2}}
    assert caplog.text.count("not Cluster|Account|User|GrpTRES") == 3


def test_config_lines_are_read_whatever_their_padding() -> None:
    settings = parse_config("Configuration data as of x\nA = 1\nBb          = two words\nC=\n")
    assert settings == {"A": "1", "Bb": "two words", "C": ""}


def test_unknown_types_are_named_against_the_clusters() -> None:
    quotas = {"acct-a": {"v100": 2, "h100": 1}, "acct-b": {"k80": 4}}
    assert unknown_types(quotas, ["v100", "k80"]) == ["acct-a: h100"]
    assert unknown_types(quotas, ["v100", "k80", "h100"]) == []
