"""The job-side wrapper: checkpoint, resume, acknowledge, pause and report progress.

It runs inside training jobs. It never imports cvxpy, the policies or the controller; the
generic parts (everything but `torch` and `sampler`) need only the standard library, so any
Python program can use them. The PyTorch helper is imported on first use:

    from slurm_hetsched.wrapper import TorchTrainer, ResumableSampler

See docs/job-side.md for the API, the environment variables and the state folder's files.
"""

from __future__ import annotations

from typing import Any

from slurm_hetsched.wrapper.checkpoint import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointReader,
    CheckpointStore,
    CheckpointWriter,
)
from slurm_hetsched.wrapper.collective import Collective, LocalCollective
from slurm_hetsched.wrapper.env import JobEnvironment, WrapperConfigError
from slurm_hetsched.wrapper.files import StateDirError
from slurm_hetsched.wrapper.placement import Placement, read_placement, write_placement
from slurm_hetsched.wrapper.progress import (
    Ack,
    ProgressReporter,
    read_ack,
    read_progress,
    write_ack,
)
from slurm_hetsched.wrapper.serialize import (
    UnsafeSaveError,
    UnsafeStateError,
    UntrustedFileError,
    register_safe_type,
)
from slurm_hetsched.wrapper.session import JobSession, Terminated
from slurm_hetsched.wrapper.signals import SignalFlags

_TORCH_NAMES = {
    "TorchTrainer": "slurm_hetsched.wrapper.torch",
    "TorchCollective": "slurm_hetsched.wrapper.torch",
    "ResumableSampler": "slurm_hetsched.wrapper.sampler",
}

__all__ = [
    "Ack",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointReader",
    "CheckpointStore",
    "CheckpointWriter",
    "Collective",
    "JobEnvironment",
    "JobSession",
    "LocalCollective",
    "Placement",
    "ProgressReporter",
    "ResumableSampler",
    "SignalFlags",
    "StateDirError",
    "Terminated",
    "TorchCollective",
    "TorchTrainer",
    "UnsafeSaveError",
    "UnsafeStateError",
    "UntrustedFileError",
    "WrapperConfigError",
    "read_ack",
    "read_placement",
    "read_progress",
    "register_safe_type",
    "write_ack",
    "write_placement",
]


def __getattr__(name: str) -> Any:
    """Import the PyTorch parts only when asked for, so plain Python jobs need no torch."""
    if name in _TORCH_NAMES:
        import importlib

        return getattr(importlib.import_module(_TORCH_NAMES[name]), name)
    raise AttributeError(f"module 'slurm_hetsched.wrapper' has no attribute {name!r}")
