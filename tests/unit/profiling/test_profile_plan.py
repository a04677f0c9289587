"""`hetsched profile`'s plan: the request's checks, the cases the cluster can run, and what
each job is submitted with (no Slurm)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from profile_fakes import NODES, node, request

from slurm_hetsched.errors import ConfigError
from slurm_hetsched.profiling.plan import (
    JOB_SCRIPT,
    ProfileCase,
    ProfileError,
    job_options,
    parse_export,
    parse_gpu_counts,
    parse_gpu_types,
    plan_cases,
)


def test_steps_replace_the_placeholder_in_any_word(tmp_path: Path) -> None:
    asked = request(tmp_path, command=("python", "t.py", "--steps={steps}", "--log", "x{steps}"))
    assert asked.training_argv() == ["python", "t.py", "--steps=200", "--log", "x200"]


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"command": ()}, "no training command"),
        ({"command": ("python", "t.py")}, "must contain {steps}"),
        ({"command": ("python", "a\0b", "{steps}")}, "NUL"),
        ({"steps": 0}, "--steps 0"),
        ({"timeout_s": 0.0}, "--timeout 0"),
        ({"gpu_counts": ()}, "--gpus"),
        ({"gpu_types": ("v100", "V 100")}, "not a GPU type"),
        ({"job_class": "a;steps=3"}, "--class"),
        ({"job_class": " padded "}, "--class"),
        ({"job_class": 'say "hi"'}, "--class"),
        ({"job_class": ""}, "--class"),
        ({"export": {"HETSCHED_STATE_DIR": "/x"}}, "the profile sets it"),
        ({"export": {"HETSCHED_PROFILE_ARGC": "9"}}, "the profile sets it"),
        ({"export": {"1BAD": "x"}}, "variable name"),
    ],
)
def test_a_bad_request_is_refused_naming_the_option(
    tmp_path: Path, overrides: dict[str, object], says: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        request(tmp_path, **overrides)
    assert says in str(raised.value)


def test_class_names_of_the_shipped_kind_are_fine(tmp_path: Path) -> None:
    assert request(tmp_path, job_class="ResNet-50 (batch size 64)").job_class.startswith("ResNet")


def test_flag_values() -> None:
    assert parse_gpu_counts("1, 2,4") == (1, 2, 4)
    assert parse_gpu_types("v100,k80") == ("v100", "k80")
    assert parse_export(["A=1", "HETSCHED_EMULATE_RATES=v100=3,k80=1"]) == {
        "A": "1",
        "HETSCHED_EMULATE_RATES": "v100=3,k80=1",
    }
    for bad in ("0", "1,1", "two", "1,", "\u0663", "99999"):
        with pytest.raises(ConfigError, match="--gpus"):
            parse_gpu_counts(bad)
    with pytest.raises(ConfigError, match="given twice"):
        parse_gpu_types("v100,v100")
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_export(["NOVALUE"])


def test_every_type_of_the_cluster_by_default_at_the_counts_its_nodes_have(
    tmp_path: Path,
) -> None:
    cases, notes = plan_cases(NODES, request(tmp_path, gpu_counts=(1, 4)))
    assert cases == [
        ProfileCase("k80", 1),
        ProfileCase("k80", 4),
        ProfileCase("p100", 1),
        ProfileCase("v100", 1),
    ]
    assert notes == [
        "skipping p100 x4: no node has 4 p100 GPUs",
        "skipping v100 x4: no node has 4 v100 GPUs",
    ]


def test_named_types_must_exist_with_the_counts_asked_for(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"unknown GPU type 'a100'.*no node has it") as raised:
        plan_cases(NODES, request(tmp_path, gpu_types=("v100", "a100")))
    assert "k80 (up to 4 on a node), p100 (up to 2 on a node)" in str(raised.value)
    with pytest.raises(ProfileError, match="no node of the cluster has 4 v100 GPUs"):
        plan_cases(NODES, request(tmp_path, gpu_types=("v100",), gpu_counts=(4,)))


def test_nodes_that_take_no_jobs_do_not_count(tmp_path: Path) -> None:
    nodes = [*NODES[1:], node("n1", {"v100": 2}, state="IDLE", flags=("DRAIN",))]
    with pytest.raises(ProfileError, match=r"every node with it takes no jobs now: n1 \(DRAIN\)"):
        plan_cases(nodes, request(tmp_path, gpu_types=("v100",)))
    cases, _ = plan_cases(nodes, request(tmp_path))
    assert {c.gpu_type for c in cases} == {"k80", "p100"}


def test_a_partition_limits_the_nodes(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="no node of partition 'debug'"):
        plan_cases(NODES, request(tmp_path, partition="debug"))


def test_a_job_asks_for_typed_gpus_on_one_node_without_a_hetsched_comment(
    tmp_path: Path,
) -> None:
    asked = request(tmp_path, export={"HETSCHED_EMULATE_GPU_SPEED": "1"}, partition="gpu")
    options = job_options(
        ProfileCase("k80", 2),
        asked,
        state_dir=tmp_path / "state" / "0" / "k80x2",
        output=tmp_path / "k80x2-%j.out",
        chdir=tmp_path,
    )
    assert options.gpus is not None and options.gpus.gres() == "gpu:k80:2"
    assert (options.nodes, options.partition, options.requeue) == (1, "gpu", False)
    assert options.comment is None and not options.hold
    assert options.export == {
        "HETSCHED_JOB_CLASS": "my-model",
        "HETSCHED_EMULATE_GPU_SPEED": "1",
        "HETSCHED_PROFILE_ARGC": "4",
        "HETSCHED_PROFILE_ARG_0": "python",
        "HETSCHED_PROFILE_ARG_1": "train.py",
        "HETSCHED_PROFILE_ARG_2": "--steps",
        "HETSCHED_PROFILE_ARG_3": "200",
        "HETSCHED_PROFILE_STATE_DIR": str(tmp_path / "state" / "0" / "k80x2"),
    }


def test_the_job_script_runs_the_words_as_given_without_a_shell_reading_them(
    tmp_path: Path,
) -> None:
    words = ["printf", "[%s]\\n", "two words", "$(touch pwned)", "'quoted'", "a;b", "*", ""]
    env = {
        "PATH": os.environ["PATH"],
        "HETSCHED_PROFILE_ARGC": str(len(words)),
        "HETSCHED_PROFILE_STATE_DIR": str(tmp_path / "state"),
        "HETSCHED_STATE_ROOT": "/site/root",
        "HETSCHED_JOB_KEY": "planted",
        **{f"HETSCHED_PROFILE_ARG_{i}": w for i, w in enumerate(words)},
    }
    script = tmp_path / "job.sh"
    script.write_text(JOB_SCRIPT)
    done = subprocess.run(
        ["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
    )
    printed = done.stdout.splitlines()[1:]
    assert printed == ["[two words]", "[$(touch pwned)]", "['quoted']", "[a;b]", "[*]", "[]"]
    assert not (tmp_path / "pwned").exists()
    shown = subprocess.run(
        ["bash", str(script)],
        env={**env, "HETSCHED_PROFILE_ARGC": "1", "HETSCHED_PROFILE_ARG_0": "env"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"HETSCHED_STATE_DIR={tmp_path / 'state'}" in shown
    assert "HETSCHED_STATE_ROOT" not in shown and "HETSCHED_JOB_KEY" not in shown
    assert "HETSCHED_PROFILE_" not in shown


def test_a_type_name_that_cannot_name_a_folder_is_skipped_with_a_note(tmp_path: Path) -> None:
    cases, notes = plan_cases([*NODES, node("n4", {"odd/type": 1})], request(tmp_path))
    assert "odd/type" not in {c.gpu_type for c in cases} and len(cases) == 3
    assert notes == ["skipping GPU type 'odd/type': not a name profiles take"]
