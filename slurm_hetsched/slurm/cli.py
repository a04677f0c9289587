"""Runs Slurm's command line tools: argv lists in, stdout out, typed errors on failure.

Only this module starts Slurm processes. Commands are always argv lists (never a shell
string), so job names, comments and user input cannot inject shell syntax.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurm_hetsched.errors import (
    InvalidRequestError,
    SlurmCommandError,
    SlurmNotFoundError,
    UnknownJobError,
)

logger = logging.getLogger(__name__)

# The PATH of a job submitted with only the variables it is given (a re-submission): the
# system's, never the controller's own.
JOB_PATH = "/usr/local/bin:/usr/bin:/bin"

# Slurm's messages (22.05 to 26.05) that mean "no such job" or "you asked for something that
# does not exist here"; anything else stays a plain SlurmCommandError.
_UNKNOWN_JOB = re.compile(r"invalid job id specified|invalid job id", re.IGNORECASE)
_INVALID_REQUEST = re.compile(
    r"invalid generic resource|invalid gres|requested node configuration is not available|"
    r"invalid feature specification|invalid node name|invalid partition|"
    r"invalid trackable resource|invalid constraint|job is no longer pending|"
    r"job is pending execution|requested operation is presently disabled|"
    r"job is in held state|job has already finished|already completing or completed",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class SlurmCli:
    """How to reach one Slurm cluster's command line tools.

    Args:
        slurm_conf: SLURM_CONF for every command (None: the environment's or Slurm's default).
        timeout_s: how long one command may take before it counts as failed.
        bin_dir: folder holding sbatch, squeue, ... (None: found on PATH).
        retries: how often a command that failed for a reason other than the request itself
            (slurmctld unreachable, a timeout) is tried again; typed refusals (unknown job,
            invalid request) are never retried.
        retry_backoff_s: the wait before the first retry; it doubles with each further one.
    """

    slurm_conf: str | None = None
    timeout_s: float = 60.0
    bin_dir: str | None = None
    extra_env: Mapping[str, str] = field(default_factory=dict)
    retries: int = 0
    retry_backoff_s: float = 1.0

    def _env(self, add: Mapping[str, str], inherit: bool) -> dict[str, str]:
        # Without `inherit`: only `add` (and the cluster's SLURM_CONF), for an sbatch whose
        # whole environment becomes the job's (backend.submit).
        if inherit:
            env = dict(os.environ)
        else:
            env = {"PATH": JOB_PATH}
            if "SLURM_CONF" in os.environ:
                env["SLURM_CONF"] = os.environ["SLURM_CONF"]
        env.update(add)
        env.update(self.extra_env)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        # Machine-readable output must not depend on the caller's squeue/sinfo format variables.
        for name in ("SQUEUE_FORMAT", "SQUEUE_FORMAT2", "SINFO_FORMAT", "SLURM_TIME_FORMAT"):
            env.pop(name, None)
        return env

    def run(
        self,
        argv: Sequence[str],
        *,
        input_text: str | None = None,
        retry: bool = True,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = True,
    ) -> str:
        """Run one Slurm command and return its stdout, retrying transient failures.

        Args:
            argv: the command, one argument per element.
            input_text: sent on standard input.
            retry: False for a command that must not run twice (sbatch: a submission that
                timed out may still have been accepted).
            env: variables to add to its environment.
            inherit_env: False runs it with only `env` (plus a system PATH and SLURM_CONF),
                not with this process's environment.

        Raises:
            SlurmNotFoundError: the program is not installed.
            UnknownJobError / InvalidRequestError / SlurmCommandError: it failed; the error
                carries the argv and Slurm's stderr.
        """
        attempts = 1 + (self.retries if retry else 0)
        for attempt in range(attempts):
            try:
                return self._run_once(argv, input_text, env or {}, inherit_env)
            except (UnknownJobError, InvalidRequestError):
                raise
            except SlurmCommandError as exc:
                if attempt + 1 == attempts:
                    raise
                wait_s = self.retry_backoff_s * 2**attempt
                logger.warning(
                    "%s; retrying in %.1f s (%d/%d)", exc, wait_s, attempt + 1, self.retries
                )
                time.sleep(wait_s)
        raise AssertionError("unreachable")

    def _run_once(
        self, argv: Sequence[str], input_text: str | None, add: Mapping[str, str], inherit: bool
    ) -> str:
        command = list(argv)
        if self.bin_dir:
            command[0] = os.path.join(self.bin_dir, command[0])
        elif not inherit:
            # Found on this process's PATH, not on the short PATH it runs with.
            command[0] = shutil.which(command[0]) or command[0]
        logger.debug("running %s", command)
        try:
            done = subprocess.run(
                command,
                input=input_text,
                capture_output=True,
                text=True,
                env=self._env(add, inherit),
                timeout=self.timeout_s,
                check=False,
            )
        except FileNotFoundError as exc:
            raise SlurmNotFoundError(
                f"{command[0]} not found: install Slurm's client tools (Debian: apt-get install "
                "slurm-client) or, for the local dev cluster, run `hetsched devcluster up`"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            stderr = exc.stderr if isinstance(exc.stderr, str) else ""
            raise SlurmCommandError(
                command, None, f"{stderr} (no answer within {self.timeout_s:g} s; is slurmctld up?)"
            ) from exc
        if done.returncode != 0 or _reports_failure(command, done.stderr):
            raise classify_failure(command, done.returncode, done.stderr or done.stdout)
        return done.stdout


def _reports_failure(command: Sequence[str], stderr: str) -> bool:
    # scancel exits 0 even when the job id is unknown; with --verbose it says so on stderr.
    return os.path.basename(command[0]) == "scancel" and "error:" in stderr.lower()


def classify_failure(command: Sequence[str], returncode: int, stderr: str) -> SlurmCommandError:
    """The typed error for a failed command, from what Slurm printed."""
    if _UNKNOWN_JOB.search(stderr):
        return UnknownJobError(command, returncode, stderr)
    if _INVALID_REQUEST.search(stderr):
        return InvalidRequestError(command, returncode, stderr)
    return SlurmCommandError(command, returncode, stderr)
