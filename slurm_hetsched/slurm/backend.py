"""The Slurm backend: the protocol the rest of slurm-hetsched uses, and its CLI implementation.

Each method issues one Slurm command and is named after it. Every command is an argv list;
values that come from users (job names, comments) travel as single argv elements.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from slurm_hetsched.errors import SlurmCommandError, UnknownJobError
from slurm_hetsched.slurm.cli import SlurmCli
from slurm_hetsched.slurm.parse import parse_jobs, parse_nodes, parse_sbatch_job_id
from slurm_hetsched.slurm.records import JobOptions, JobUpdate, SlurmJob, SlurmNode
from slurm_hetsched.slurm.version import (
    SCONTROL_JSON,
    SlurmVersion,
    check_supported,
    parse_version,
)

logger = logging.getLogger(__name__)


class SlurmBackend(Protocol):
    """What slurm-hetsched needs from a Slurm cluster."""

    def list_jobs(self, job_ids: Sequence[str] | None = None) -> list[SlurmJob]: ...

    def list_nodes(self) -> list[SlurmNode]: ...

    def submit(
        self,
        script: str | Path,
        components: Sequence[JobOptions],
        *,
        uid: int | str | None = None,
        gid: int | str | None = None,
    ) -> str: ...

    def signal(self, job_id: str, signal: str, *, target: str = "batch") -> None: ...

    def requeue(self, job_id: str) -> None: ...

    def requeue_hold(self, job_id: str) -> None: ...

    def hold(self, job_id: str) -> None: ...

    def release(self, job_id: str) -> None: ...

    def update(self, job_id: str, update: JobUpdate) -> None: ...

    def cancel(self, job_id: str, *, signal: str | None = None) -> None: ...

    def write_batch_script(self, job_id: str) -> str: ...

    def reconfigure(self) -> None: ...


_SIGNAL_TARGETS = {
    "batch": ["--batch"],  # the batch shell only (what the template `exec`s into)
    "steps": [],  # every job step, not the batch shell
    "all": ["--full"],  # the batch shell and every step
}


def sbatch_argv(
    components: Sequence[JobOptions],
    script_path: str | None,
    *,
    uid: int | str | None = None,
    gid: int | str | None = None,
) -> list[str]:
    """The sbatch argv for a job; several components make a heterogeneous job.

    Components are separated by a lone ':' argument, as sbatch expects. The script is read
    from `script_path`, or from standard input when it is None.
    """
    if not components:
        raise ValueError("a job needs at least one component of options")
    argv = ["sbatch", "--parsable"]
    if uid is not None:
        argv.append(f"--uid={uid}")
    if gid is not None:
        argv.append(f"--gid={gid}")
    for index, options in enumerate(components):
        if index:
            argv.append(":")
        argv += _options_argv(options)
    if script_path is not None:
        argv.append(script_path)
    return argv


def _options_argv(options: JobOptions) -> list[str]:
    pairs: list[tuple[str, str | None]] = [
        ("job-name", options.job_name),
        ("gres", options.gpus.gres() if options.gpus else None),
        ("constraint", options.constraint),
        ("nodelist", options.nodelist),
        ("exclude", options.exclude),
        ("nodes", _str(options.nodes)),
        ("ntasks", _str(options.ntasks)),
        ("cpus-per-task", _str(options.cpus_per_task)),
        ("partition", options.partition),
        ("account", options.account),
        ("comment", options.comment),
        ("output", options.output),
        ("error", options.error),
        ("chdir", options.chdir),
        ("signal", options.signal),
    ]
    argv = [f"--{name}={value}" for name, value in pairs if value is not None]
    if options.hold:
        argv.append("--hold")
    if options.requeue is True:
        argv.append("--requeue")
    elif options.requeue is False:
        argv.append("--no-requeue")
    if options.open_mode_append:
        argv.append("--open-mode=append")
    if options.export is not None:
        argv.append("--export=ALL")  # the variables travel in sbatch's environment
    argv += [f"--{name}={value}" for name, value in options.extra]
    return argv


def submission_environment(components: Sequence[JobOptions]) -> tuple[dict[str, str], bool]:
    """The variables to add to sbatch's environment, and whether the submitter's own go too.

    Exported variables travel in sbatch's environment, with `--export=ALL`: any other
    --export (`ALL,NAME=value`, a list, NONE) makes slurmd build the job's environment by
    logging the user in (`su -`), which Slurm 26.05 holds the job for when it fails (a nologin
    user) and which adds the user's login environment where it works. So every component of
    a job exports the same variables, the same way.
    """
    exporting = [c for c in components if c.export is not None]
    if not exporting:
        return {}, True
    first = exporting[0]
    if len(exporting) != len(components) or any(
        dict(c.export or {}) != dict(first.export or {}) or c.export_all != first.export_all
        for c in exporting
    ):
        raise ValueError("the components of one job must export the same variables")
    for name in first.export or {}:
        if not name or not name.replace("_", "").isalnum() or name[0].isdigit():
            raise ValueError(f"cannot export {name!r}: names are A-Z, 0-9 and _")
    return dict(first.export or {}), first.export_all


def _str(value: int | None) -> str | None:
    return None if value is None else str(value)


def update_argv(job_id: str, update: JobUpdate) -> list[str]:
    """One `scontrol update` argv; each Key=value is its own element (no shell quoting).

    The GPU count is written as `gres:gpu:N`: Slurm 26.05 reads both spellings, while 22.05
    accepts `gres/gpu:N` silently but then gives the job a single GPU.
    """
    fields: list[tuple[str, str | None]] = [
        ("Features", update.features),
        (
            "TresPerNode",
            None if update.gpus_per_node is None else f"gres:gpu:{update.gpus_per_node}",
        ),
        ("ReqNodeList", update.required_nodes),
        ("ExcNodeList", update.excluded_nodes),
        ("Priority", _str(update.priority)),
        ("StartTime", "now" if update.start_now else None),
        ("AdminComment", update.admin_comment),
        ("Comment", update.comment),
        *update.extra.items(),
    ]
    assignments = [f"{key}={value}" for key, value in fields if value is not None]
    if not assignments:
        raise ValueError(f"nothing to update for job {job_id}")
    return ["scontrol", "update", f"JobId={job_id}", *assignments]


class CliSlurmBackend:
    """SlurmBackend over squeue/sinfo --json, scontrol, sbatch and scancel."""

    def __init__(self, cli: SlurmCli | None = None) -> None:
        self.cli = cli or SlurmCli()
        self._version: SlurmVersion | None = None

    def list_jobs(self, job_ids: Sequence[str] | None = None) -> list[SlurmJob]:
        """Every job slurmctld knows (finished ones until MinJobAge), or just `job_ids`.

        Raises:
            UnknownJobError: when one of `job_ids` is unknown.
        """
        # --states=all: finished jobs too (22.05 prints them anyway, 26.05 only when asked).
        argv = ["squeue", "--json", "--states=all"]
        if job_ids is not None:
            if not job_ids:
                return []
            argv.append("--jobs=" + ",".join(job_ids))
        jobs = parse_jobs(self.cli.run(argv))
        if job_ids is not None:
            # squeue --json ignores the -j filter on some versions: filter here too.
            wanted = set(job_ids)
            jobs = [j for j in jobs if {j.job_id, j.slurm_id, j.het_job_id} & wanted]
            if not jobs:
                raise UnknownJobError(argv, 1, "Invalid job id specified")
        return jobs

    def job(self, job_id: str) -> SlurmJob:
        """One job by id (the leader for a heterogeneous job's plain id)."""
        jobs = self.list_jobs([job_id])
        for job in jobs:
            if job.job_id == job_id or job.slurm_id == job_id:
                return job
        return jobs[0]

    def list_nodes(self) -> list[SlurmNode]:
        """Every node with its GPUs per type, GPUs in use, features, partitions and state."""
        if self.version() >= SCONTROL_JSON:
            # One record per node; newer `sinfo --json` groups nodes by partition and state.
            try:
                return parse_nodes(
                    self.cli.run(["scontrol", "show", "nodes", "--json"]), "scontrol show nodes"
                )
            except SlurmCommandError as exc:
                logger.debug("scontrol show nodes --json failed, using sinfo: %s", exc)
        return parse_nodes(self.cli.run(["sinfo", "--json"]))

    def submit(
        self,
        script: str | Path,
        components: Sequence[JobOptions],
        *,
        uid: int | str | None = None,
        gid: int | str | None = None,
    ) -> str:
        """Submit a batch job; returns its id (the leader's for a heterogeneous job).

        Args:
            script: a path to the script, or the script text itself (sent on stdin).
            components: one JobOptions per component; two or more make a heterogeneous job.
            uid: submit as this user (root only), e.g. to re-submit a user's job. Pass `gid`
                too and `JobOptions(export=..., export_all=False)`: with --uid alone the job
                keeps root's group and root's environment.
            gid: the group to submit as (with `uid`).
        """
        env, inherit = submission_environment(components)
        if isinstance(script, Path):
            argv = sbatch_argv(components, str(script), uid=uid, gid=gid)
            stdout = self.cli.run(argv, retry=False, env=env, inherit_env=inherit)
        else:
            if not script.startswith("#!"):
                raise ValueError("a batch script must start with '#!' (e.g. #!/bin/bash)")
            argv = sbatch_argv(components, None, uid=uid, gid=gid)
            stdout = self.cli.run(
                argv, input_text=script, retry=False, env=env, inherit_env=inherit
            )
        return parse_sbatch_job_id(stdout)

    def signal(self, job_id: str, signal: str, *, target: str = "batch") -> None:
        """Send `signal` (e.g. "USR2") to the batch shell, the steps, or all of the job."""
        if target not in _SIGNAL_TARGETS:
            raise ValueError(f"target must be one of {sorted(_SIGNAL_TARGETS)}, got {target!r}")
        # --verbose: scancel says "Invalid job id" only when verbose, and exits 0 regardless.
        self.cli.run(
            ["scancel", "--verbose", *_SIGNAL_TARGETS[target], f"--signal={signal}", job_id]
        )

    def requeue(self, job_id: str) -> None:
        self.cli.run(["scontrol", "requeue", job_id])

    def requeue_hold(self, job_id: str) -> None:
        """Requeue a running job and hold it (works on running jobs only)."""
        self.cli.run(["scontrol", "requeuehold", job_id])

    def hold(self, job_id: str) -> None:
        self.cli.run(["scontrol", "hold", job_id])

    def release(self, job_id: str) -> None:
        self.cli.run(["scontrol", "release", job_id])

    def update(self, job_id: str, update: JobUpdate) -> None:
        """Change fields of a job (most only while it is pending) with one scontrol call."""
        self.cli.run(update_argv(job_id, update))

    def set_admin_comment(self, job_id: str, text: str) -> None:
        self.update(job_id, JobUpdate(admin_comment=text))

    def retarget(self, job_id: str, gpu_type: str, num_gpus: int, nodes: str | None = None) -> None:
        """Point a pending job at `num_gpus` GPUs of `gpu_type` (optionally on `nodes`).

        Uses the pattern that works on Slurm 22.05: the type as a node Feature and an untyped
        GPU count (a typed TresPerNode change is accepted there but not honoured).
        """
        self.update(
            job_id,
            JobUpdate(
                features=gpu_type,
                gpus_per_node=num_gpus,
                required_nodes="" if nodes is None else nodes,
            ),
        )

    def cancel(self, job_id: str, *, signal: str | None = None) -> None:
        argv = ["scancel", "--verbose"]
        if signal is not None:
            argv.append(f"--signal={signal}")
        self.cli.run([*argv, job_id])

    def write_batch_script(self, job_id: str) -> str:
        """The job's batch script text (`scontrol write batch_script J -`)."""
        return self.cli.run(["scontrol", "write", "batch_script", job_id, "-"])

    def reconfigure(self) -> None:
        """Make slurmctld and every slurmd re-read slurm.conf and plugstack.conf.

        New job steps then load the SPANK plugins listed now. On Slurm 22.05 a running slurmd
        does not pick up a newly added plugin's job prolog this way; restart slurmd for that.
        """
        self.cli.run(["scontrol", "reconfigure"])

    def version(self) -> SlurmVersion:
        """The Slurm release of the commands this backend runs (`sinfo --version`; asked
        once, then remembered).

        Raises:
            UnsupportedSlurmError: it is older than 22.05.
            SlurmNotFoundError: there is no `sinfo` to ask.
        """
        if self._version is None:
            where = f"in {self.cli.bin_dir}" if self.cli.bin_dir else "on PATH"
            found = parse_version(self.cli.run(["sinfo", "--version"]))
            self._version = check_supported(found, f"sinfo --version {where}")
        return self._version
