"""The errors of reading and writing state files (checkpoints); the message names the file."""

from __future__ import annotations

import pickle

from slurm_hetsched.errors import HetschedError


class CorruptStateError(HetschedError):
    """A state file is truncated, damaged or not in this format."""


class UnsafeStateError(CorruptStateError):
    """A state file needs a type that loading does not allow (see `register_safe_type`).

    Attributes:
        type_name: `module.qualname` of the refused class or callable.
    """

    def __init__(self, message: str, type_name: str = "") -> None:
        super().__init__(message)
        self.type_name = type_name


class UntrustedFileError(CorruptStateError):
    """A state file is a symlink, not a regular file, or owned by another uid than the job's."""


class UnsafeSaveError(HetschedError, pickle.PicklingError):
    """An object holds something that loading would refuse; nothing was written.

    Attributes:
        type_name: `module.qualname` of the refused class or callable.
    """

    def __init__(self, message: str, type_name: str = "") -> None:
        super().__init__(message)
        self.type_name = type_name
