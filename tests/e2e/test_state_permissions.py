"""Another user's job cannot read a job's state folder (issue 6, part 4, last item).

Two system users are created if absent (`useradd --system`, needs root). The state root is a
root-owned mode 0711 folder under /tmp that both can traverse but neither list nor write;
`<root>/<uid>` is made by root for Alice before her job runs, as the controller does before it
releases a job (docs/security.md). Alice's job runs the wrapper
(examples/train_plain.py: the plain-Python session, so it needs an interpreter Alice can run
and the checkout, not PyTorch); Bob's job only runs `cat` and `ls` on Alice's folder.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from slurm_hetsched.controller.statefiles import JobFolder, write_placement
from slurm_hetsched.slurm import CliSlurmBackend, JobOptions
from slurm_hetsched.wrapper import read_progress

from ..users import ALICE, BOB, ensure_user, output_folder, python_for
from .conftest import TRAIN_PLAIN, Submitter, render_template, wait_for


def test_other_users_job_cannot_read_state_folder(
    backend: CliSlurmBackend, submit: Submitter, shared_root: Path
) -> None:
    alice, bob = ensure_user(ALICE), ensure_user(BOB)
    python, extra = python_for(ALICE)
    # The shared root as an admin makes it: root's, nobody else may write it.
    state_root = shared_root / "state"
    state_root.mkdir()
    os.chmod(state_root, 0o711)
    base_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/tmp",
        "SLURM_CONF": os.environ.get("SLURM_CONF", ""),
    }

    script = render_template(
        ["--steps", "60", "--step-time-s", "0.05"],
        script=TRAIN_PLAIN,
        comment="hetsched:class=LM (batch size 20);steps=60",
    )
    alice_out = output_folder(shared_root, alice)
    alice_job = backend.submit(
        script,
        [
            JobOptions(
                output=str(alice_out / "slurm-%j.out"),
                chdir=str(alice_out),
                export={
                    **base_env,
                    **extra,
                    "HETSCHED_PYTHON": python,
                    "HETSCHED_STATE_ROOT": str(state_root),
                    "HETSCHED_PROGRESS_EVERY_S": "0.5",
                },
                export_all=False,
            )
        ],
        uid=alice.pw_uid,
        gid=alice.pw_gid,
    )
    submit.job_ids.append(alice_job)
    # What the controller does before the release: <root>/<uid>/<key>, handed to Alice.
    job_folder = JobFolder(state_root, alice.pw_uid, alice_job, alice.pw_gid)
    write_placement(job_folder, {"round": 1, "gpu_type": "k80", "num_gpus": 1, "nodes": ["n3"]})
    backend.release(alice_job)
    folder = job_folder.path
    progress = wait_for(lambda: read_progress(folder), f"progress of alice's job {alice_job}", 45)
    assert progress["job_id"] == alice_job
    for level in (folder.parent, folder):
        info = level.stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (alice.pw_uid, 0o700)

    bob_out = output_folder(shared_root, bob)
    bob_script = (
        "#!/bin/bash\n"
        f'cat {folder}/progress.json; echo "cat-exit=$?"\n'
        f'ls {folder}; echo "ls-exit=$?"\n'
        f'ls {state_root}; echo "list-root-exit=$?"\n'
    )
    bob_job = backend.submit(
        bob_script,
        [
            JobOptions(
                output=str(bob_out / "slurm-%j.out"),
                chdir=str(bob_out),
                export=base_env,
                export_all=False,
            )
        ],
        uid=bob.pw_uid,
        gid=bob.pw_gid,
    )
    submit.job_ids.append(bob_job)
    wait_for(lambda: not submit.job(bob_job).state.is_active, f"bob's job {bob_job}", 45)
    text = (bob_out / f"slurm-{bob_job}.out").read_text()
    assert "cat-exit=1" in text and "ls-exit=2" in text and "list-root-exit=2" in text, text
    assert text.count("Permission denied") == 3, text
    assert "job_key" not in text, "bob read alice's progress.json"
    wait_for(lambda: submit.job(alice_job).state.value == "COMPLETED", "alice's job done", 45)
