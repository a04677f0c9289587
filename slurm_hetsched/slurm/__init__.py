"""Slurm adapter: the only package that runs Slurm's commands."""

from slurm_hetsched.slurm.backend import CliSlurmBackend, SlurmBackend
from slurm_hetsched.slurm.cli import SlurmCli
from slurm_hetsched.slurm.records import (
    GpuRequest,
    JobOptions,
    JobState,
    JobUpdate,
    SlurmJob,
    SlurmNode,
)

__all__ = [
    "CliSlurmBackend",
    "GpuRequest",
    "JobOptions",
    "JobState",
    "JobUpdate",
    "SlurmBackend",
    "SlurmCli",
    "SlurmJob",
    "SlurmNode",
]
