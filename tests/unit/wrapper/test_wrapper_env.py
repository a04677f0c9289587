"""JobEnvironment: the contract of environment variables the wrapper reads."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from slurm_hetsched.wrapper.env import (
    DEFAULT_LEASE_TIMEOUT_S,
    JobEnvironment,
    WrapperConfigError,
    default_state_root,
    parse_signal,
)

UID = str(os.geteuid())


def test_outside_slurm_everything_has_a_default() -> None:
    env = JobEnvironment.from_environ({})
    assert env.job_id is None and not env.in_slurm
    assert env.job_key == "local"
    assert env.restart_count == 0
    assert (env.rank, env.local_rank, env.world_size) == (0, 0, 1)
    assert env.state_dir == default_state_root() / UID / "local"
    assert env.checkpoint_signal is signal.SIGUSR2
    assert env.lease_timeout_s == DEFAULT_LEASE_TIMEOUT_S
    assert env.checkpoint_every_steps is None and env.checkpoint_every_s == 1800
    assert env.num_gpus == 0 and not env.emulate_gpu_speed


def test_slurm_variables() -> None:
    env = JobEnvironment.from_environ(
        {
            "SLURM_JOB_ID": "17",
            "SLURM_RESTART_COUNT": "2",
            "SLURM_PROCID": "3",
            "SLURM_LOCALID": "1",
            "SLURM_NTASKS": "4",
            "SLURM_STEP_NUM_TASKS": "4",  # what srun sets in each of the job's ranks
            "SLURMD_NODENAME": "n1",
            "SLURM_GPUS_ON_NODE": "2",
            "SLURM_JOB_NUM_NODES": "2",
            "HETSCHED_STATE_ROOT": "/shared/state",
        }
    )
    assert (env.job_id, env.job_key, env.restart_count) == ("17", "17", 2)
    assert (env.rank, env.local_rank, env.world_size, env.node) == (3, 1, 4, "n1")
    assert env.num_gpus == 4
    assert env.state_dir == Path("/shared/state", UID, "17"), "<root>/<uid>/<key>"


def test_missing_restart_count_is_zero() -> None:
    # Slurm <= 26.05 sets SLURM_RESTART_COUNT only from the first restart on.
    assert JobEnvironment.from_environ({"SLURM_JOB_ID": "5"}).restart_count == 0


def test_heterogeneous_job_uses_the_leaders_id() -> None:
    env = JobEnvironment.from_environ(
        {"SLURM_JOB_ID": "8", "SLURM_JOB_ID_HET_GROUP_0": "7", "SLURM_JOB_ID_HET_GROUP_1": "8"}
    )
    assert (env.job_id, env.job_key) == ("7", "7")


def test_job_key_and_state_dir_precedence() -> None:
    base = {"SLURM_JOB_ID": "9", "HETSCHED_STATE_ROOT": "/r"}
    assert JobEnvironment.from_environ(base).state_dir == Path("/r", UID, "9")
    keyed = JobEnvironment.from_environ({**base, "HETSCHED_JOB_KEY": "k-1"})
    assert (keyed.job_id, keyed.job_key, keyed.state_dir) == ("9", "k-1", Path("/r", UID, "k-1"))
    explicit = JobEnvironment.from_environ({**base, "HETSCHED_STATE_DIR": "/elsewhere/x"})
    assert explicit.state_dir == Path("/elsewhere/x")


def test_torchrun_style_rank_variables() -> None:
    env = JobEnvironment.from_environ({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"})
    assert (env.rank, env.local_rank, env.world_size) == (1, 1, 2)


def test_gpu_count_from_cuda_visible_devices() -> None:
    assert JobEnvironment.from_environ({"CUDA_VISIBLE_DEVICES": "0,2"}).num_gpus == 2
    assert JobEnvironment.from_environ({"CUDA_VISIBLE_DEVICES": "-1"}).num_gpus == 0


def test_wrapper_settings() -> None:
    env = JobEnvironment.from_environ(
        {
            "HETSCHED_SIGNAL": "USR1",
            "HETSCHED_LEASE_TIMEOUT_S": "2.5",
            "HETSCHED_CHECKPOINT_EVERY_STEPS": "100",
            "HETSCHED_CHECKPOINT_EVERY_S": "0",
            "HETSCHED_KEEP_CHECKPOINTS": "5",
            "HETSCHED_PROGRESS_EVERY_S": "1",
            "HETSCHED_EMULATE_GPU_SPEED": "1",
            "HETSCHED_JOB_CLASS": "A3C",
            "HETSCHED_TEST_CHECKPOINT_STALL_S": "3",
        }
    )
    assert env.checkpoint_signal is signal.SIGUSR1
    assert env.lease_timeout_s == 2.5
    assert (env.checkpoint_every_steps, env.checkpoint_every_s) == (100, None)
    assert (env.keep_checkpoints, env.progress_every_s) == (5, 1.0)
    assert env.emulate_gpu_speed and env.job_class == "A3C"
    assert env.test_checkpoint_stall_s == 3.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("USR2", signal.SIGUSR2),
        ("sigusr1", signal.SIGUSR1),
        ("10", signal.Signals(10)),
        ("none", None),
        ("off", None),
    ],
)
def test_parse_signal(text: str, expected: signal.Signals | None) -> None:
    assert parse_signal(text) == expected


@pytest.mark.parametrize("text", ["USR3", "TERM", "SIGKILL", "-1"])
def test_parse_signal_refuses(text: str) -> None:
    with pytest.raises(WrapperConfigError, match="HETSCHED_SIGNAL"):
        parse_signal(text)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SLURM_RESTART_COUNT", "x"),
        ("HETSCHED_LEASE_TIMEOUT_S", "ten"),
        ("HETSCHED_LEASE_TIMEOUT_S", "-1"),
        ("HETSCHED_EMULATE_GPU_SPEED", "maybe"),
        ("HETSCHED_JOB_KEY", "../up"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(WrapperConfigError, match=name):
        JobEnvironment.from_environ({name: value})


def test_the_shipped_template_is_filled_in_on_its_marked_lines_only() -> None:
    from slurm_hetsched.wrapper.template import TemplateError, render_template

    shipped = (
        Path(__file__).resolve().parents[3] / "sbatch_templates" / "train.sbatch"
    ).read_text()
    text = render_template(
        shipped, ["train.py", "--name", "a b; rm -rf /"], comment="hetsched:class=A3C;steps=5"
    )
    assert "TRAIN=(\"$PYTHON\" -u train.py --name 'a b; rm -rf /')" in text
    assert '#SBATCH --comment="hetsched:class=A3C;steps=5"' in text
    changed = [a for a, b in zip(shipped.splitlines(), text.splitlines(), strict=True) if a != b]
    assert len(changed) == 2, "only the two marked lines change"
    with pytest.raises(TemplateError, match="double quote"):
        render_template(shipped, ["t.py"], comment='hetsched:class="x"')
    with pytest.raises(TemplateError, match="marked lines moved"):
        render_template("#!/bin/bash\n", ["t.py"], comment="hetsched:class=A3C")
