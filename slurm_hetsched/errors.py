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
