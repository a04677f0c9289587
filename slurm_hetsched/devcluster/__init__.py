"""The local dev cluster: a real Slurm with fake typed GPUs on this one machine."""

from __future__ import annotations

import tempfile
from pathlib import Path

from slurm_hetsched.devcluster.cluster import DevCluster


def project_root(start: Path | None = None) -> Path | None:
    """The slurm-hetsched checkout containing `start` (default: the working directory)."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        pyproject = folder / "pyproject.toml"
        try:
            if 'name = "slurm-hetsched"' in pyproject.read_text(encoding="utf-8"):
                return folder
        except OSError:
            continue
    return None


def default_config_path() -> Path | None:
    """etc/devcluster.toml of the checkout we are in; None means the built-in layout."""
    root = project_root()
    if root is not None and (root / "etc" / "devcluster.toml").is_file():
        return root / "etc" / "devcluster.toml"
    return None


def default_dir() -> Path:
    """.devcluster/ of the checkout we are in, else a folder in the system temp dir."""
    root = project_root()
    if root is not None:
        return root / ".devcluster"
    return Path(tempfile.gettempdir()) / "hetsched-devcluster"


__all__ = ["DevCluster", "default_config_path", "default_dir", "project_root"]
