"""Another user's job cannot read a job's state folder (issue 6, part 4, last item).

Two system users are created if absent (`useradd --system`, needs root). The state root is a
mode 0711 folder under /tmp that both can traverse but not list. Alice's job runs the wrapper
(examples/train_plain.py: the plain-Python session, so it needs an interpreter Alice can run
and the checkout, not PyTorch); Bob's job only runs `cat` and `ls` on Alice's folder.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_hetsched.slurm import CliSlurmBackend, JobOptions
from slurm_hetsched.wrapper import read_progress

from .conftest import REPO, TRAIN_PLAIN, Submitter, render_template, wait_for

ALICE, BOB = "hetsched-alice", "hetsched-bob"


def _ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    if os.geteuid() != 0:
        pytest.skip(f"user {name} is missing and only root can create it")
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return pwd.getpwnam(name)


def _python_for(user: str) -> tuple[str, dict[str, str]]:
    """An interpreter `user` can run that imports the wrapper, and the variables it needs.

    This venv's interpreter first; if the user cannot run it (e.g. it lives under /root,
    mode 0700), the system Python with this checkout on PYTHONPATH (the plain-Python part of
    the wrapper needs only the standard library).
    """
    candidates = [(sys.executable, {}), ("/usr/bin/python3", {"PYTHONPATH": str(REPO)})]
    for python, extra in candidates:
        probe = subprocess.run(
            [
                "runuser",
                "-u",
                user,
                "--",
                "env",
                *[f"{k}={v}" for k, v in extra.items()],
                python,
                "-c",
                "import slurm_hetsched.wrapper",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd="/",
        )
        if probe.returncode == 0:
            return python, extra
    pytest.fail(
        f"no Python that {user} can run imports slurm_hetsched.wrapper; make the project's "
        f"environment readable by other users (tried {[c[0] for c in candidates]})"
    )


@pytest.fixture
def shared_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="hetsched-e2e-users-", dir="/tmp"))
    os.chmod(root, 0o711)  # everyone may traverse, nobody but root may list or create
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _output_folder(root: Path, user: pwd.struct_passwd) -> Path:
    folder = root / f"out-{user.pw_name}"
    folder.mkdir()
    os.chown(folder, user.pw_uid, user.pw_gid)
    return folder


def test_other_users_job_cannot_read_state_folder(
    backend: CliSlurmBackend, submit: Submitter, shared_root: Path
) -> None:
    alice, bob = _ensure_user(ALICE), _ensure_user(BOB)
    python, extra = _python_for(ALICE)
    # Per-user state under the shared root; the wrapper creates <root>/<key> with mode 0700.
    state_root = shared_root / "state"
    state_root.mkdir()
    os.chmod(state_root, 0o1733)  # any user may create (not list); sticky: not delete others'
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
    alice_out = _output_folder(shared_root, alice)
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
    backend.release(alice_job)
    folder = state_root / alice_job
    progress = wait_for(lambda: read_progress(folder), f"progress of alice's job {alice_job}", 45)
    assert progress["job_id"] == alice_job
    info = folder.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (alice.pw_uid, 0o700)

    bob_out = _output_folder(shared_root, bob)
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
