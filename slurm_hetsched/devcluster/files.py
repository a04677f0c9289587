"""Write a dev cluster's files (either Slurm's): its folders, fake GPU devices, slurm.conf and
gres.conf, from the layout (the text is render.py's)."""

from __future__ import annotations

import os

from slurm_hetsched.devcluster.render import (
    ClusterPaths,
    fake_device_count,
    render_gres_conf,
    render_slurm_conf,
)
from slurm_hetsched.nodelayout import DevClusterConfig


def write_cluster_files(
    config: DevClusterConfig, paths: ClusterPaths, host: str, *, accounting: bool = False
) -> None:
    """The folders, fake GPU devices, slurm.conf and gres.conf of a cluster (either Slurm's)."""
    for folder in (paths.etc, paths.state, paths.log, paths.run, paths.fakedev, paths.jobs):
        folder.mkdir(parents=True, exist_ok=True)
    for node in config.nodes:
        (paths.spool / node.name).mkdir(parents=True, exist_ok=True)
    for index in range(fake_device_count(config)):
        device = paths.fakedev / f"nvidia{index}"
        if not device.exists():
            # A character device like the real /dev/nvidiaN (major 195): slurmd only
            # stat()s it; with TaskPlugin=task/none nothing opens it.
            os.mknod(device, 0o666 | 0o020000, os.makedev(195, index))
    paths.slurm_conf.write_text(render_slurm_conf(config, paths, host, accounting=accounting))
    paths.gres_conf.write_text(render_gres_conf(config, paths))
