"""SPANK plugins of the dev cluster: which .so files etc/plugstack.conf registers."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from slurm_hetsched.devcluster.render import ClusterPaths, render_plugstack_conf
from slurm_hetsched.errors import DevClusterError


def resolve_spank_plugins(plugins: Sequence[Path]) -> tuple[Path, ...]:
    """Absolute paths of SPANK plugins to register, each checked to exist; duplicates dropped.

    Relative paths are taken from the working directory.

    Raises:
        DevClusterError: a plugin file is missing (with how to build ours), or its path cannot
            be written into plugstack.conf.
    """
    found: list[Path] = []
    for plugin in plugins:
        path = Path(os.path.abspath(plugin))
        if not path.is_file():
            raise DevClusterError(
                f"SPANK plugin {path} not found: build it first with `make -C spank` "
                "(needs gcc and Slurm's headers, Debian: libslurm-dev)"
            )
        if path not in found:
            found.append(path)
    try:
        render_plugstack_conf(found)
    except ValueError as exc:
        raise DevClusterError(str(exc)) from exc
    return tuple(found)


def plugins_line(plugins: Sequence[Path]) -> str:
    if not plugins:
        return "SPANK plugins: none registered"
    return "SPANK plugins (optional): " + ", ".join(str(p) for p in plugins)


def write_plugstack(paths: ClusterPaths, plugins: Sequence[Path]) -> bool:
    """Write etc/plugstack.conf listing `plugins`; returns whether its text changed."""
    text = render_plugstack_conf(plugins)
    target = paths.plugstack_conf
    try:
        if target.read_text() == text:
            return False
    except OSError:
        pass
    target.parent.mkdir(parents=True, exist_ok=True)
    # Atomic: every sbatch and job step reads this file, possibly right now.
    partial = target.with_name(target.name + ".new")
    partial.write_text(text)
    os.replace(partial, target)
    return True
