"""The error hierarchy shared by every layer.

A message says what failed, the offending value, and what to do about it.
"""

from __future__ import annotations

from collections.abc import Sequence


class HetschedError(Exception):
    """Base of every error slurm-hetsched raises on purpose."""


class ConfigError(HetschedError):
    """A configuration file or option is invalid."""


class DevClusterError(HetschedError):
    """The local dev cluster could not be brought up, down or inspected."""


class SlurmError(HetschedError):
    """Base of the errors of the Slurm backend."""


class SlurmNotFoundError(SlurmError):
    """A Slurm command is not installed or not on PATH."""


class SlurmCommandError(SlurmError):
    """A Slurm command exited with an error.

    Attributes:
        argv: the command as run (an argv list, never a shell string).
        returncode: its exit status (None when it timed out).
        stderr: what Slurm printed on standard error, stripped.
    """

    def __init__(self, argv: Sequence[str], returncode: int | None, stderr: str) -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        status = "timed out" if returncode is None else f"exited with {returncode}"
        detail = self.stderr or "(no output on stderr)"
        super().__init__(f"`{' '.join(self.argv)}` {status}: {detail}")


class UnknownJobError(SlurmCommandError):
    """Slurm does not know the job id (finished long ago, or never existed)."""


class InvalidRequestError(SlurmCommandError):
    """Slurm refused a request as invalid (e.g. a GRES or node that does not exist)."""


class SlurmParseError(SlurmError):
    """Slurm's output was not in a shape this version of slurm-hetsched understands."""


class SolverError(HetschedError):
    """A policy's solver did not reach an optimal solution; no allocation is returned.

    Attributes:
        policy: the policy's registered name.
        status: the solver's status string (e.g. "infeasible", "unbounded", "Time limit reached").
        n_jobs: rows of the problem handed to the solver.
        n_types: GPU types (columns) of that problem.
    """

    def __init__(self, policy: str, status: str, n_jobs: int, n_types: int) -> None:
        self.policy = policy
        self.status = status
        self.n_jobs = n_jobs
        self.n_types = n_types
        super().__init__(
            f"policy {policy!r}: solver ended with status {status!r} on {n_jobs} jobs x "
            f"{n_types} GPU types, so no allocation was produced; check the problem's "
            "capacities and throughputs, or try another solver"
        )


class TraceError(HetschedError, ValueError):
    """A job trace is malformed or names jobs that cannot run; the message names file and line."""
