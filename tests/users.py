"""Other Unix users for end-to-end tests that need several: created if absent (as root), an
interpreter they can run, and commands run as them. The shared root under /tmp they can
traverse is the `shared_root` fixture of tests/e2e/conftest.py."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ALICE, BOB = "hetsched-alice", "hetsched-bob"


def ensure_user(name: str) -> pwd.struct_passwd:
    """The system user `name`, created (`useradd --system`) if it is missing."""
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


def python_for(user: str) -> tuple[str, dict[str, str]]:
    """An interpreter `user` can run that imports the wrapper, and the variables it needs.

    This venv's interpreter first; if the user cannot run it (e.g. it lives under /root,
    mode 0700), the system Python with this checkout on PYTHONPATH (the plain-Python part of
    the wrapper needs only the standard library).
    """
    candidates = [(sys.executable, {}), ("/usr/bin/python3", {"PYTHONPATH": str(REPO)})]
    for python, extra in candidates:
        probe = run_as(user, [python, "-c", "import slurm_hetsched.wrapper"], extra)
        if probe.returncode == 0:
            return python, extra
    pytest.fail(
        f"no Python that {user} can run imports slurm_hetsched.wrapper; make the project's "
        f"environment readable by other users (tried {[c[0] for c in candidates]})"
    )


def run_as(
    user: str, argv: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`argv` run as `user` (runuser), with only `env` added to a minimal environment."""
    variables = [f"{k}={v}" for k, v in (env or {}).items()]
    return subprocess.run(
        ["runuser", "-u", user, "--", "env", *variables, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd="/",
    )


def output_folder(root: Path, user: pwd.struct_passwd) -> Path:
    """A folder under `root` that `user` owns, for the output of their jobs."""
    folder = root / f"out-{user.pw_name}"
    folder.mkdir()
    os.chown(folder, user.pw_uid, user.pw_gid)
    return folder
