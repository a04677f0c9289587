"""Which Slurm the backend talks to: its release from `sinfo --version`, and the oldest one
slurm-hetsched supports. Where two releases need different commands, the backend asks here.

Supported: 22.05 (Debian 12) to the newest release tested (26.05, Debian sid); the
differences that matter are listed in docs/slurm-backend.md ("Slurm versions").
"""

from __future__ import annotations

import re
from typing import NamedTuple

from slurm_hetsched.errors import SlurmError, SlurmParseError

_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


class SlurmVersion(NamedTuple):
    """A Slurm release; compares with (major, minor) tuples: `version >= (23, 2)`."""

    major: int
    minor: int
    patch: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.patch}"


OLDEST_SUPPORTED = SlurmVersion(22, 5, 0)
# `scontrol show nodes --json`: one record per node (from 23.02; `sinfo --json` groups them).
SCONTROL_JSON = SlurmVersion(23, 2, 0)


class UnsupportedSlurmError(SlurmError):
    """The Slurm found is older than slurm-hetsched supports."""


def parse_version(text: str) -> SlurmVersion:
    """The release in `sinfo --version`'s output ('slurm-wlm 22.05.8', 'slurm 26.05.5')."""
    match = _RELEASE.search(text)
    if match is None:
        raise SlurmParseError(f"cannot read the Slurm version from {text.strip()!r}")
    return SlurmVersion(int(match[1]), int(match[2]), int(match[3] or 0))


def check_supported(version: SlurmVersion, where: str = "") -> SlurmVersion:
    """`version`, or UnsupportedSlurmError saying what was found and what is needed."""
    if version < OLDEST_SUPPORTED:
        found = f" ({where})" if where else ""
        raise UnsupportedSlurmError(
            f"Slurm {version} found{found} is too old: slurm-hetsched needs Slurm "
            f"{OLDEST_SUPPORTED.major}.{OLDEST_SUPPORTED.minor:02d} or newer. Upgrade Slurm, "
            "or point `slurm.bin_dir` in the controller's config at a newer Slurm's commands"
        )
    return version
