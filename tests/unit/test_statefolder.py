"""The state folder's format (slurm_hetsched/statefolder.py): one definition, used by the job
side and the controller alike."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_hetsched.controller.statefiles import JobFolder, read_ack, write_placement
from slurm_hetsched.statefolder import (
    PLACEMENT_FILE,
    REQUEST_FILE,
    RESUME_FILE,
    checkpoint_name,
    checkpoint_step,
    expand_hostlist,
    state_folder,
)
from slurm_hetsched.wrapper import checkpoint, files, placement, progress
from slurm_hetsched.wrapper.placement import read_placement
from slurm_hetsched.wrapper.progress import Ack, write_ack


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("", []),
        ("n1", ["n1"]),
        ("n1,n3", ["n1", "n3"]),
        (" n1 , n3 ", ["n1", "n3"]),
        ("n[1-2],gpu7", ["n1", "n2", "gpu7"]),
        ("gpu[01-03,7]", ["gpu01", "gpu02", "gpu03", "gpu7"]),
        ("n[1-3],gpu7", ["n1", "n2", "n3", "gpu7"]),
        ("a[01-02],b[5,7]", ["a01", "a02", "b5", "b7"]),
        ("rack[1-2]-gpu", ["rack1-gpu", "rack2-gpu"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        # Not expandable: kept as written, never dropped.
        ("n[a-b]", ["n[a-b]"]),
        ("r[1-2]n[1-2]", ["r[1-2]n[1-2]"]),
        ("n[1-2", ["n[1-2"]),
    ],
)
def test_one_host_list_parser(text: str, names: list[str]) -> None:
    assert expand_hostlist(text) == names


def test_the_wrapper_names_the_format_s_own_definitions() -> None:
    # Re-exported where code imported them before: the same objects, not copies.
    assert placement.expand_hostlist is expand_hostlist
    assert files.state_folder is state_folder
    assert (progress.ACK_FILE, progress.PROGRESS_FILE) == ("ack.json", "progress.json")
    assert (progress.REQUEST_FILE, progress.RESUME_FILE) == (REQUEST_FILE, RESUME_FILE)
    assert (placement.PLACEMENT_FILE, checkpoint.MARKER) == (PLACEMENT_FILE, "COMMITTED")


def test_layout_and_checkpoint_names() -> None:
    assert state_folder(Path("/r"), 1000, "k") == Path("/r/1000/k")
    assert checkpoint_name(8200) == "ckpt-8200"
    assert checkpoint_step("ckpt-8200") == 8200
    for other in ("ckpt-", "ckpt-1x", ".tmp-ckpt-3", "ckpt-3/", "progress.json"):
        assert checkpoint_step(other) is None


def test_what_one_side_writes_the_other_finds(tmp_path: Path) -> None:
    uid = os.geteuid()
    folder = JobFolder(tmp_path, uid, "key1")
    write_placement(folder, {"gpu_type": "v100", "num_gpus": 2, "nodes": "n[1-2],gpu7"})
    job_dir = state_folder(tmp_path, uid, "key1")
    found = read_placement(job_dir)
    assert found is not None and found.nodes == ("n1", "n2", "gpu7")
    write_ack(job_dir, Ack("7", 0, 12, checkpoint_name(12), 100.0))
    ack = read_ack(folder, job_id="7", restart_count=0, signalled_at=99.0)
    assert ack is not None and ack.checkpoint == "ckpt-12"
