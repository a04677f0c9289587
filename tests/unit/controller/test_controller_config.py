"""The controller's config file: the shipped etc/hetsched.toml documents the real defaults and
every key, relative paths follow the file, and each mistake is an error naming its key (also
through `hetsched controller`, without a traceback)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from slurm_hetsched.cli import DEFAULT_CONFIG, main
from slurm_hetsched.controller import config_keys
from slurm_hetsched.controller.commands import service_settings
from slurm_hetsched.controller.config import ConfigError, ControllerConfig, load_config
from slurm_hetsched.errors import HetschedError

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "etc" / "hetsched.toml"
# A commented-out key in the shipped file: `# key = value` right after the '#'.
_COMMENTED_KEY = re.compile(r"^#\s?([a-z_]+) = (.+)$")
_SECTION = re.compile(r"^\[([a-z_]+)\]$")


def _documented_keys() -> list[tuple[str, str, bool]]:
    """(section, key, commented out) of every key the shipped file shows."""
    keys: list[tuple[str, str, bool]] = []
    section = ""
    for line in SHIPPED.read_text().splitlines():
        if match := _SECTION.match(line):
            section = match.group(1)
        elif match := _COMMENTED_KEY.match(line):
            keys.append((section, match.group(1), True))
        elif line and not line.startswith("#") and "=" in line:
            keys.append((section, line.split("=")[0].strip(), False))
    return keys


def write(tmp_path: Path, text: str, name: str = "hetsched.toml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return str(caught.value)


# ----------------------------------------------------------------------------------------------
# The shipped file


def test_shipped_file_states_the_real_defaults() -> None:
    loaded = load_config(SHIPPED)
    defaults = ControllerConfig()
    for spec in dataclasses.fields(ControllerConfig):
        if spec.name == "source":
            continue
        assert getattr(loaded, spec.name) == getattr(defaults, spec.name), spec.name
    assert loaded.source == SHIPPED


def test_every_key_of_the_shipped_file_is_known_and_every_known_key_is_shown() -> None:
    shown = _documented_keys()
    known = {(section, key) for section, keys in config_keys.KEYS.items() for key in keys}
    assert {(section, key) for section, key, _ in shown} == known
    assert len(shown) == len(known), "a key is shown twice"


def test_the_commented_examples_of_the_shipped_file_load(tmp_path: Path) -> None:
    """Uncommenting every example gives a valid file with those values."""
    text = SHIPPED.read_text()
    lines = [
        line[1:].lstrip() if _COMMENTED_KEY.match(line) else line for line in text.splitlines()
    ]
    config = load_config(write(tmp_path, "\n".join(lines)))
    assert config.policy_options == {"energy_slack": "0.1"}
    assert config.lock == Path("/var/lib/hetsched/rounds.sqlite.lock")
    assert config.slurm_conf == "/etc/slurm/slurm.conf"
    assert (config.partitions, config.qos) == (("gpu",), ("normal",))
    assert config.metrics_port == 9877
    assert config.throughputs == Path("/etc/hetsched/throughputs.json")
    assert dict(config.resubmit_environment) == {"HETSCHED_PYTHON": "/opt/venvs/train/bin/python"}
    assert dict(config.restart_s_by_class) == {
        "ResNet-50 (batch size 64)": 60.0,
        "Transformer (batch size 64)": 45.0,
    }


def test_the_dev_cluster_config_loads_with_paths_under_the_checkout() -> None:
    config = load_config(ROOT / "etc" / "hetsched-devcluster.toml")
    assert config.round_s == 20.0 and config.min_reset_interval_s == 0.0
    assert config.store == ROOT / ".devcluster" / "controller" / "rounds.sqlite"
    assert config.slurm_conf == str(ROOT / ".devcluster" / "etc" / "slurm.conf")


def test_the_admin_guide_lists_every_key_with_its_default() -> None:
    rows = {}
    for line in (ROOT / "docs" / "admin.md").read_text().splitlines():
        if match := re.match(r"^\| `([a-z_]+\.[a-z_]+)` \| ([^|]+) \|", line):
            rows[match.group(1)] = match.group(2).strip()
    defaults = ControllerConfig()
    for section, keys in config_keys.KEYS.items():
        for key, (name, _) in keys.items():
            cell = rows.pop(f"{section}.{key}")
            value = getattr(defaults, name)
            if value is None:
                assert cell.startswith("unset"), (section, key, cell)
            elif isinstance(value, bool):
                assert cell == f"`{str(value).lower()}`", (section, key, cell)
            elif isinstance(value, str | Path):
                assert cell == f'`"{value}"`', (section, key, cell)
            elif isinstance(value, int | float):
                assert cell == f"`{value!r}`", (section, key, cell)
            elif isinstance(value, tuple):
                assert cell.startswith("`[]`") and value == (), (section, key, cell)
            else:
                assert cell == "`{}`" and dict(value) == {}, (section, key, cell)
    assert rows == {}, "the guide lists keys config.py does not know"


def test_the_systemd_unit_fits_the_defaults() -> None:
    unit: dict[str, str] = {}
    for line in (ROOT / "etc" / "hetsched-controller.service").read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            assert key not in unit, f"{key} set twice"
            unit[key] = value
    assert unit["ExecStart"].endswith(f"hetsched controller --config {DEFAULT_CONFIG}")
    assert (unit["Type"], unit["Restart"], unit["KillSignal"]) == (
        "simple",
        "on-failure",
        "SIGTERM",
    )
    defaults = ControllerConfig()
    # The store's folder is the one systemd creates.
    assert defaults.store.parent == Path("/var/lib") / unit["StateDirectory"]
    # SIGTERM lets the round under way finish: its waits must fit in the stop timeout.
    assert float(unit["TimeoutStopSec"]) > defaults.ack_timeout_s + defaults.requeue_timeout_s
    assert {"slurmctld.service", "munge.service"} <= set(unit["After"].split())


def test_no_file_means_every_default() -> None:
    assert load_config(None) == ControllerConfig()
    assert ControllerConfig().lock_path == Path("/var/lib/hetsched/rounds.sqlite.lock")


# ----------------------------------------------------------------------------------------------
# Values


def test_relative_paths_resolve_against_the_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(
        tmp_path,
        '[controller]\nstore = "db/rounds.sqlite"\nstate_root = "../state"\n'
        '[slurm]\nconf = "slurm.conf"\nbin_dir = "./bin"\n'
        '[site]\nthroughputs = "t.json"\ngpu_types = "/abs/gpu_types.toml"\n',
        name="etc/hetsched.toml",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(Path("..") / "etc" / "hetsched.toml")
    etc = tmp_path / "etc"
    assert config.store == etc / "db" / "rounds.sqlite"
    assert config.state_root == tmp_path / "state"
    assert config.slurm_conf == str(etc / "slurm.conf")
    assert config.bin_dir == str(etc / "bin")
    assert config.throughputs == etc / "t.json"
    assert config.gpu_types == Path("/abs/gpu_types.toml")
    assert config.lock_path == etc / "db" / "rounds.sqlite.lock"


def test_values_are_converted(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            "[controller]\nround_s = 30\ncheckpoint_signal = 'sigusr1'\nlog_level = 'DEBUG'\n"
            "release_rejected = false\npolicy_options = { energy_slack = 0.2 }\n"
            "resubmit_environment = { A = 1, B = true }\n"
            "[metrics]\nport = 0\n",
        )
    )
    assert config.round_s == 30.0 and isinstance(config.round_s, float)
    assert config.checkpoint_signal == "USR1"
    assert config.log_level == "debug"
    assert config.release_rejected is False
    assert dict(config.policy_options) == {"energy_slack": "0.2"}
    assert dict(config.resubmit_environment) == {"A": "1", "B": "true"}
    assert config.metrics_port == 0


def test_scope_keys_reach_the_observation(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, "[slurm]\npartitions = ['gpu', 'a100']\nqos = ['normal', 'high']\n")
    )
    assert (config.partitions, config.qos) == (("gpu", "a100"), ("normal", "high"))
    observe = service_settings(config).observe
    assert (observe.partitions, observe.qos) == (("gpu", "a100"), ("normal", "high"))
    assert (ControllerConfig().partitions, ControllerConfig().qos) == ((), ())


def test_the_older_single_partition_key_is_a_one_name_list(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "[slurm]\npartition = 'gpu'\n"))
    assert config.partitions == ("gpu",)


# ----------------------------------------------------------------------------------------------
# Errors name the key


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[controler]\nround_s = 1\n", ["unknown section [controler]", "did you mean controller"]),
        ("[nonsense]\n", ["unknown section [nonsense]", "valid: controller, slurm, site, metrics"]),
        ("[controller]\nround = 1\n", ["unknown key controller.round", "did you mean round_s"]),
        ("[slurm]\nretrys = 1\n", ["slurm.retrys", "did you mean retries"]),
        ("[controller]\nround_s = 'fast'\n", ["controller.round_s", "'fast'", "number > 0"]),
        ("[controller]\nround_s = true\n", ["controller.round_s", "True"]),
        ("[controller]\nround_s = 0\n", ["controller.round_s", "> 0"]),
        ("[controller]\nround_s = nan\n", ["controller.round_s", "nan"]),
        ("[controller]\nack_timeout_s = -5\n", ["controller.ack_timeout_s", "-5"]),
        ("[controller]\nmin_reset_interval_s = -1\n", ["controller.min_reset_interval_s", ">= 0"]),
        ("[slurm]\nretries = -1\n", ["slurm.retries", "whole number >= 0", "-1"]),
        ("[slurm]\nretries = 1.5\n", ["slurm.retries", "1.5"]),
        ("[slurm]\nretry_backoff_s = -0.5\n", ["slurm.retry_backoff_s", "-0.5"]),
        ("[site]\nprogress_max_age_s = -1\n", ["site.progress_max_age_s"]),
        ("[metrics]\nport = 70000\n", ["metrics.port", "0..65535", "70000"]),
        ("[slurm]\npartitions = 'gpu'\n", ["slurm.partitions", "list of names", "'gpu'"]),
        ("[slurm]\npartitions = ['gpu', '']\n", ["slurm.partitions", "list of names"]),
        ("[slurm]\npartitions = ['gpu', 'gpu']\n", ["slurm.partitions", "listed twice"]),
        ("[slurm]\nqos = [1]\n", ["slurm.qos", "list of names", "[1]"]),
        ("[slurm]\npartition = ['gpu']\n", ["slurm.partition:", "non-empty string"]),
        (
            "[slurm]\npartitions = ['gpu']\npartition = 'gpu'\n",
            ["slurm.partitions and slurm.partition set the same thing", "only slurm.partitions"],
        ),
        ("[slurm]\npartitons = ['gpu']\n", ["slurm.partitons", "did you mean partitions"]),
        ("[metrics]\nport = '9877'\n", ["metrics.port", "'9877'"]),
        ("[controller]\ncheckpoint_signal = 'USR3'\n", ["controller.checkpoint_signal", "USR3"]),
        ("[controller]\nlog_level = 'verbose'\n", ["controller.log_level", "'verbose'"]),
        ("[controller]\nrelease_rejected = 'yes'\n", ["controller.release_rejected", "true or"]),
        ("[controller]\nstore = ''\n", ["controller.store", "non-empty string"]),
        ("[controller]\nresubmit_environment = 'A=1'\n", ["controller.resubmit_environment"]),
        ("[controller]\nresubmit_environment = { A = [1] }\n", ["resubmit_environment", "A:"]),
        ("[controller]\npolicy = 'fastest'\n", ["controller.policy", "unknown policy 'fastest'"]),
        (
            "[controller]\npolicy = 'fastest'\npolicy_options = { energy_slack = 0.1 }\n",
            ["controller.policy:", "unknown policy 'fastest'"],
        ),
        (
            "[controller]\npolicy_options = { bogus = 1 }\n",
            ["controller.policy_options", "bogus", "energy_slack"],
        ),
        (
            "[controller]\npolicy = 'fifo'\npolicy_options = { energy_slack = 0.1 }\n",
            ["controller.policy_options", "energy_slack"],
        ),
        ("[moves]\nmechanism = 'lazy'\n", ["moves.mechanism", "amortized, plain", "'lazy'"]),
        ("[moves]\nrestart_share = 0\n", ["moves.restart_share", "> 0"]),
        ("[moves]\nrestart_share = 1.5\n", ["moves.restart_share", "(0, 1]", "1.5"]),
        ("[moves]\nrestart_s = -1\n", ["moves.restart_s", ">= 0", "-1"]),
        ("[moves]\nrestart_s = nan\n", ["moves.restart_s", "nan"]),
        ("[moves]\nmax_restart_s = 0\n", ["moves.max_restart_s", "> 0"]),
        (
            "[moves]\nrestart_s = 1000\n",
            ["moves.restart_s: 1000 s is above moves.max_restart_s (900 s)"],
        ),
        (
            "[moves]\nmax_restart_s = 20\n",
            ["moves.restart_s: 30 s is above moves.max_restart_s (20 s)"],
        ),
        ("[moves]\nrestart_s_by_class = 5\n", ["moves.restart_s_by_class", "job class = seconds"]),
        (
            "[moves]\nrestart_s_by_class = { A3C = 'slow' }\n",
            ["moves.restart_s_by_class", "'A3C'", "'slow'"],
        ),
        (
            "[moves]\nrestart_s_by_class = { A3C = true }\n",
            ["moves.restart_s_by_class", "'A3C'", "True"],
        ),
        (
            "[moves.restart_s_by_class]\nA3C = 1000\n",
            ["moves.restart_s_by_class: 'A3C' = 1000 s is above moves.max_restart_s (900 s)"],
        ),
        ("[moves]\nrestart_s_by_class = { '' = 10 }\n", ["moves.restart_s_by_class", "1 to 128"]),
        ("[moves]\nrestart = 10\n", ["unknown key moves.restart", "did you mean restart_s"]),
        ("round_s = 30\n", ["round_s is outside any section", "[controller]"]),
        ("controller = 5\n", ["controller must be a [controller] table"]),
        ("[controller]\nround_s = \n", ["not valid TOML", "line 2"]),
    ],
)
def test_errors_name_the_key(tmp_path: Path, text: str, expected: list[str]) -> None:
    message = error_of(tmp_path, text)
    for part in expected:
        assert part in message, message


def test_config_errors_are_hetsched_errors(tmp_path: Path) -> None:
    with pytest.raises(HetschedError):
        load_config(write(tmp_path, "[controller]\nround_s = -1\n"))


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=r"cannot read the config file .*nope\.toml"):
        load_config(missing)


def test_a_folder_or_a_binary_file_is_an_error_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(tmp_path)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe[controller]\n")
    with pytest.raises(ConfigError, match="not a UTF-8 text file"):
        load_config(binary)


# ----------------------------------------------------------------------------------------------
# Through the command line


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[controller]\nround_s = -1\n", "controller.round_s"),
        ("[controller]\npolicy = 'fastest'\n", "controller.policy"),
        ("[slurm]\nretrys = 2\n", "slurm.retrys"),
    ],
)
@pytest.mark.parametrize("command", ["controller", "rounds", "status"])
def test_commands_report_a_bad_config_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, text: str, key: str
) -> None:
    path = write(tmp_path, text, name="bad.toml")
    assert main([command, "--config", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("hetsched: error: ")
    assert key in captured.err and "bad.toml" in captured.err
    assert "Traceback" not in captured.err + captured.out


def test_controller_reports_a_binary_config_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(b"\xff\xfe")
    assert main(["controller", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert "bad.toml" in err and "UTF-8" in err and "Traceback" not in err


def test_controller_policy_override_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "[controller]\nround_s = 30\n")
    assert main(["controller", "--config", str(path), "--policy", "fastest"]) == 1
    err = capsys.readouterr().err
    assert "controller.policy" in err and "unknown policy 'fastest'" in err


def test_controller_round_override_must_be_positive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "[controller]\nround_s = 30\n")
    assert main(["controller", "--config", str(path), "--round", "0"]) == 1
    assert "--round 0" in capsys.readouterr().err


def test_config_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "[controller]\nround_s = -2\n")
    monkeypatch.setenv("HETSCHED_CONFIG", str(path))
    assert main(["rounds"]) == 1
    assert "controller.round_s" in capsys.readouterr().err


def test_rounds_without_a_store_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, f"[controller]\nstore = {str(tmp_path / 'none.sqlite')!r}\n")
    assert main(["rounds", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert "no rounds recorded yet" in err and "none.sqlite" in err


@pytest.mark.parametrize("command", ["rounds", "tenants"])
def test_last_must_be_positive(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "[controller]\nround_s = 30\n")
    assert main([command, "--config", str(path), "--last", "0"]) == 1
    assert "--last must be >= 1, got 0" in capsys.readouterr().err


def test_round_mechanism_keys_reach_the_tick(tmp_path: Path) -> None:
    path = tmp_path / "h.toml"
    path.write_text('[controller]\nround_queue = "global"\nwork_conserving = false\nround_s = 30\n')
    tick = load_config(path).tick_settings()
    assert (tick.round_s, tick.round_options.queue, tick.round_options.work_conserving) == (
        30.0,
        "global",
        False,
    )
    path.write_text('[controller]\nround_queue = "fastest"\n')
    with pytest.raises(ConfigError, match=r"controller\.round_queue.*per_type, global"):
        load_config(path)


def test_the_moves_keys_reach_the_round_mechanism_and_the_restart_costs(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[moves]\nmechanism = "plain"\nrestart_share = 0.25\nrestart_s = 12.5\n'
        "max_restart_s = 300\n"
        '[moves.restart_s_by_class]\n"ResNet-50 (batch size 64)" = 40\nA3C = 0\n',
    )
    config = load_config(path)
    options = config.tick_settings().round_options
    assert (options.moves, options.restart_s, options.restart_share) == ("plain", 12.5, 0.25)
    restarts = config.restart_settings()
    assert (restarts.default_s, restarts.max_s) == (12.5, 300.0)
    assert dict(restarts.by_class) == {"ResNet-50 (batch size 64)": 40.0, "A3C": 0.0}
    assert service_settings(config).restarts == restarts


def test_the_default_moves_are_amortized_at_the_mechanisms_defaults() -> None:
    options = ControllerConfig().tick_settings().round_options
    assert (options.moves, options.restart_s, options.restart_share) == ("amortized", 30.0, 0.1)
    assert ControllerConfig().restart_settings().max_s == 900.0


def test_restart_costs_of_classes_the_table_does_not_know_are_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, '[moves]\nrestart_s_by_class = { "ResNet-5O" = 40, A3C = 10 }\n')
    service_settings(load_config(path))
    assert "'ResNet-5O'" in caplog.text and "'A3C'" not in caplog.text


def test_a_site_chooses_what_happens_to_classes_in_no_table(tmp_path: Path) -> None:
    learn = load_config(write(tmp_path, "[site]\n")).site_data().table
    assert learn.is_prior("my-own-model") and "a100" in learn.estimated_types
    refuse = load_config(write(tmp_path, '[site]\nunknown_classes = "refuse"\n'))
    table = refuse.site_data().table
    assert not table.is_prior("my-own-model") and "a100" in table.estimated_types
    assert "site.unknown_classes" in error_of(tmp_path, '[site]\nunknown_classes = "maybe"\n')
    off = load_config(write(tmp_path, "[site]\nexplore = false\nexplore_rounds_per_type = 5\n"))
    assert off.tick_settings().explore.enabled is False
    assert off.tick_settings().explore.rounds_per_type == 5


def test_a_site_gpu_types_file_is_read_over_the_shipped_one(tmp_path: Path) -> None:
    types = write(tmp_path, "[v100]\nprice_per_hour = 9.0\n", name="gpu_types.toml")
    site = load_config(write(tmp_path, f'[site]\ngpu_types = "{types}"\n')).site_data()
    assert site.gpu_types["v100"].price_per_hour == 9.0
    assert site.gpu_types["v100"].mem_gib == 16.0  # the shipped memory size stays
    assert "a100" in site.gpu_types
