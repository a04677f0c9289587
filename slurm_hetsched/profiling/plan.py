"""What `hetsched profile` submits: the checked request, the (GPU type, GPU count) cases the
cluster can run, and each case's sbatch options, environment and job script.

Pure: no Slurm and no files; `run` does the submitting. A profile job asks for a typed GRES
(`--gres=gpu:TYPE:N`, on one node) and carries no `hetsched:` comment, so the controller
leaves it to Slurm. The training command never passes through a shell: its words travel one
per environment variable and the fixed job script rebuilds the argv from them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path

from slurm_hetsched.core.jobspec import GPUS_MAX, JobSpecError, parse_job_spec
from slurm_hetsched.errors import ConfigError, HetschedError
from slurm_hetsched.slurm import GpuRequest, JobOptions, SlurmNode

STEPS_PLACEHOLDER = "{steps}"
DEFAULT_STEPS = 300
MAX_STEPS = 10**9
DEFAULT_TIMEOUT_S = 1800.0
MAX_TIMEOUT_S = 7 * 86400.0
MAX_COMMAND_WORDS = 1000
# A Slurm GRES type, short enough that "<type>x<count>" is a state folder name (64 at most).
_GPU_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,57}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Set by the job script itself (after any SPANK plugin), so an --export-env of them could
# only be overridden: refused instead.
_RESERVED_ENV = ("HETSCHED_STATE_DIR", "HETSCHED_STATE_ROOT", "HETSCHED_JOB_KEY")
_RESERVED_PREFIX = "HETSCHED_PROFILE_"

JOB_SCRIPT = """#!/bin/bash
# hetsched profile: one short measuring run of a training command (docs/throughput.md).
# The command's words arrive one per variable (HETSCHED_PROFILE_ARG_0, _1, ...), so no shell
# parses them. The state folder is set here, after any SPANK plugin has set the site's one:
# the profile reads the job's progress report from its own folder.
set -euo pipefail
argv=()
for ((i = 0; i < HETSCHED_PROFILE_ARGC; i++)); do
    word="HETSCHED_PROFILE_ARG_$i"
    argv+=("${!word}")
done
export HETSCHED_STATE_DIR="$HETSCHED_PROFILE_STATE_DIR"
unset HETSCHED_STATE_ROOT HETSCHED_JOB_KEY "${!HETSCHED_PROFILE_@}"
echo "hetsched profile: job ${SLURM_JOB_ID:-local} on ${SLURMD_NODENAME:-$(hostname)}" \\
    "at $(date +%s)"
exec "${argv[@]}"
"""


class ProfileError(HetschedError):
    """The profile cannot be run as asked, or a profile job did not measure a rate."""


@dataclass(frozen=True, slots=True, order=True)
class ProfileCase:
    """One profile job: `num_gpus` GPUs of `gpu_type` on one node."""

    gpu_type: str
    num_gpus: int

    @property
    def name(self) -> str:
        """'v100x2': the job's state folder and output file name."""
        return f"{self.gpu_type}x{self.num_gpus}"


@dataclass(frozen=True, slots=True)
class ProfileRequest:
    """What to measure and where to write it; checked when built.

    Attributes:
        job_class: the class name the table gets (one a job spec's `class=` can name).
        command: the training command, run through the wrapper; `{steps}` in any word is
            replaced by `steps`.
        output: the throughput file to write or merge into (our own format).
        gpu_types: the GPU types to measure; None = every type of the cluster's nodes.
        gpu_counts: the GPU counts to measure each type at (one node each).
        steps: training steps of each profile job.
        partition: the partition to submit to (and whose nodes count); None = the default.
        timeout_s: how long to wait for all the jobs, queueing included.
        export: extra variables for the jobs (e.g. the emulation knob).
        workdir: where the run folder (job outputs and state folders) is made; the compute
            nodes must see it at the same path.

    Raises:
        ConfigError: a value out of its range; the message names the option.
    """

    job_class: str
    command: tuple[str, ...]
    output: Path
    gpu_types: tuple[str, ...] | None = None
    gpu_counts: tuple[int, ...] = (1,)
    steps: int = DEFAULT_STEPS
    partition: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    export: Mapping[str, str] = field(default_factory=dict)
    workdir: Path = Path(".")

    def __post_init__(self) -> None:
        check_job_class(self.job_class)
        check_command(self.command)
        if not 1 <= self.steps <= MAX_STEPS:
            raise ConfigError(f"--steps {self.steps}: expected 1 to {MAX_STEPS}")
        if not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            raise ConfigError(f"--timeout {self.timeout_s:g}: expected 0 < S <= {MAX_TIMEOUT_S:g}")
        if not self.gpu_counts:
            raise ConfigError("--gpus: expected at least one GPU count")
        for gpu_type in self.gpu_types or ():
            check_gpu_type(gpu_type, "--gpu-types")
        check_export(self.export)

    def training_argv(self) -> list[str]:
        """The command with `{steps}` replaced."""
        return [word.replace(STEPS_PLACEHOLDER, str(self.steps)) for word in self.command]


def check_job_class(name: str) -> str:
    """A class name a job spec can name (`hetsched:class=NAME`) and the template can carry."""
    try:
        parsed = parse_job_spec(f"hetsched:class={name}", local_tz=UTC, now_s=0.0).job_class
    except JobSpecError as exc:
        raise ConfigError(f"--class {name!r}: {exc}") from None
    if parsed != name or '"' in name:
        raise ConfigError(
            f"--class {name!r}: a job spec could not name it (no ';', no '\"', no blanks at "
            "either end)"
        )
    return name


def check_command(command: Sequence[str]) -> None:
    """The training command: present, bounded, with the {steps} placeholder somewhere."""
    if not command:
        raise ConfigError(
            "no training command: give it after the options, e.g. "
            "`-- python train.py --steps {steps}`"
        )
    if len(command) > MAX_COMMAND_WORDS:
        raise ConfigError(f"the training command has more than {MAX_COMMAND_WORDS} words")
    if any("\0" in word for word in command):
        raise ConfigError("the training command contains a NUL character")
    if not any(STEPS_PLACEHOLDER in word for word in command):
        # Without it a profile job would train as long as the command's own default.
        raise ConfigError(
            f"the training command must contain {STEPS_PLACEHOLDER} where its step count goes "
            f"(e.g. `--steps {STEPS_PLACEHOLDER}`), so that each profile job trains --steps steps"
        )


def check_gpu_type(name: str, flag: str) -> str:
    if not _GPU_TYPE.fullmatch(name):
        raise ConfigError(
            f"{flag}: {name!r} is not a GPU type (a Slurm GRES type such as v100: 1 to 58 of "
            "A-Z a-z 0-9 . _ + -)"
        )
    return name


def check_export(export: Mapping[str, str]) -> None:
    for name, value in export.items():
        if not _ENV_NAME.fullmatch(name):
            raise ConfigError(f"--export-env {name!r}: a variable name is A-Z a-z 0-9 _")
        if name in _RESERVED_ENV or name.startswith(_RESERVED_PREFIX):
            raise ConfigError(
                f"--export-env {name}: the profile sets it for its jobs (each job's state folder "
                "is its own); leave it out"
            )
        if "\0" in value:
            raise ConfigError(f"--export-env {name}: the value contains a NUL character")


def parse_gpu_counts(text: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4): whole numbers from 1 to GPUS_MAX, each once, in order."""
    counts: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not (
            item.isascii() and item.isdigit() and len(item) <= 4 and 1 <= int(item) <= GPUS_MAX
        ):
            raise ConfigError(
                f"--gpus {text!r}: expected GPU counts such as 1,2,4 (1 to {GPUS_MAX})"
            )
        if int(item) in counts:
            raise ConfigError(f"--gpus {text!r}: {item} is given twice")
        counts.append(int(item))
    return tuple(counts)


def parse_gpu_types(text: str) -> tuple[str, ...]:
    """'v100,k80' -> ('v100', 'k80'), each a GRES type, each once."""
    types = [check_gpu_type(t.strip(), "--gpu-types") for t in text.split(",")]
    repeated = sorted({t for t in types if types.count(t) > 1})
    if repeated:
        raise ConfigError(f"--gpu-types {text!r}: {', '.join(repeated)} given twice")
    return tuple(types)


def parse_export(items: Iterable[str]) -> dict[str, str]:
    """KEY=VALUE strings -> {KEY: VALUE} (the value may hold '=' and commas)."""
    export: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(
                f"--export-env {item!r}: expected KEY=VALUE, e.g. HETSCHED_EMULATE_GPU_SPEED=1"
            )
        export[name] = value
    check_export(export)
    return export


def plan_cases(
    nodes: Sequence[SlurmNode], request: ProfileRequest
) -> tuple[list[ProfileCase], list[str]]:
    """The cases to submit, and notes on the ones left out.

    A type named in --gpu-types must be on a node that takes jobs (in the partition, if one
    is given), with at least each asked-for count of it; types found on the nodes (no
    --gpu-types) are measured at the counts some node has, the others are noted and skipped.

    Raises:
        ProfileError: an unknown GPU type, a count no node has, or nothing to measure; the
            message lists what the cluster has.
    """
    where = f"partition {request.partition!r}" if request.partition else "the cluster"
    in_scope = [n for n in nodes if request.partition is None or request.partition in n.partitions]
    most: dict[str, int] = {}  # GPU type -> the most GPUs of it on one node that takes jobs
    down: dict[str, list[str]] = {}  # GPU type -> nodes with it that take no jobs now
    for node in in_scope:
        for gpu_type, count in node.gpus.items():
            if node.available:
                most[gpu_type] = max(most.get(gpu_type, 0), count)
            else:
                down.setdefault(gpu_type, []).append(f"{node.name} ({'+'.join(node.unplannable)})")
    have = ", ".join(f"{t} (up to {n} on a node)" for t, n in sorted(most.items())) or "none"
    named = request.gpu_types is not None
    notes: list[str] = []
    if request.gpu_types is not None:
        gpu_types = request.gpu_types
    else:
        gpu_types = tuple(t for t in sorted(most) if _GPU_TYPE.fullmatch(t))
        # A type name that cannot name a state folder: not measured, but said.
        notes += [
            f"skipping GPU type {t!r}: not a name profiles take" for t in most if t not in gpu_types
        ]
    if not gpu_types:
        raise ProfileError(f"no node of {where} that takes jobs has typed GPUs (gpu:TYPE:N)")
    errors: list[str] = []
    cases: list[ProfileCase] = []
    for gpu_type in gpu_types:
        if gpu_type not in most:
            why = (
                f"every node with it takes no jobs now: {', '.join(down[gpu_type])}"
                if gpu_type in down
                else "no node has it"
            )
            errors.append(f"unknown GPU type {gpu_type!r} in {where}: {why}")
            continue
        for count in request.gpu_counts:
            if count <= most[gpu_type]:
                cases.append(ProfileCase(gpu_type, count))
            elif named:
                errors.append(f"no node of {where} has {count} {gpu_type} GPUs")
            else:
                notes.append(f"skipping {gpu_type} x{count}: no node has {count} {gpu_type} GPUs")
    if errors:
        raise ProfileError("; ".join(errors) + f". GPU types of {where}: {have}")
    if not cases:
        raise ProfileError(f"nothing to measure: {'; '.join(notes)}. GPU types of {where}: {have}")
    return cases, notes


def job_environment(request: ProfileRequest, state_dir: Path) -> dict[str, str]:
    """The variables a profile job gets on top of the submitter's (sbatch --export=ALL)."""
    env = {"HETSCHED_JOB_CLASS": request.job_class, **request.export}
    argv = request.training_argv()
    env["HETSCHED_PROFILE_ARGC"] = str(len(argv))
    env.update({f"HETSCHED_PROFILE_ARG_{i}": word for i, word in enumerate(argv)})
    env["HETSCHED_PROFILE_STATE_DIR"] = str(state_dir)
    return env


def job_options(
    case: ProfileCase, request: ProfileRequest, *, state_dir: Path, output: Path, chdir: Path
) -> JobOptions:
    """sbatch options of one profile job: typed GRES on one node, no hetsched comment, no
    requeue (a restarted job would measure a rate over two runs)."""
    return JobOptions(
        job_name=f"hetsched-profile-{case.name}",
        gpus=GpuRequest(case.num_gpus, case.gpu_type),
        nodes=1,
        ntasks=1,
        partition=request.partition,
        output=str(output),
        chdir=str(chdir),
        requeue=False,
        export=job_environment(request, state_dir),
    )
