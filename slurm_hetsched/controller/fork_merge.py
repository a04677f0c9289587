"""The averaging of a forked job's copies, run with the job's user's rights.

The copies' checkpoints are the user's files, written by the user's program: root never loads
them. The controller starts the wrapper's merge helper (`python -m slurm_hetsched.wrapper.merge`,
docs/job-side.md "Forked copies") as the job's uid and gid with no supplementary groups, a
bare environment, `/` as its working folder and a time limit, and reads one JSON line back. The
helper writes the consolidated checkpoint into the key folder atomically, so a helper killed
in the middle leaves the last consolidated checkpoint as it was.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_hetsched.errors import HetschedError

logger = logging.getLogger(__name__)

_OUTPUT_MAX = 4096  # characters of the helper's answer and error kept


class MergeError(HetschedError, RuntimeError):
    """The averaging failed; the message says why (the round's steps are not counted)."""


@dataclass(frozen=True, slots=True)
class CopyCheckpoint:
    """One copy's part of a merge: its committed checkpoint (a path inside the key folder), the
    steps it did this round and the end of its data range (batches past the last merge)."""

    folder: Path
    steps: int
    data_end: int


@dataclass(frozen=True, slots=True)
class MergeResult:
    merged: str  # relative to the key folder
    step: int
    seconds: float


def merge_argv(
    python: str, key_dir: Path, out_step: int, copies: Sequence[CopyCheckpoint], *, as_root: bool
) -> list[str]:
    """The helper's command line (an argv list: nothing here goes through a shell)."""
    argv = [python, "-m", "slurm_hetsched.wrapper.merge", "--key-dir", str(key_dir)]
    argv += ["--out-step", str(out_step)]
    for copy in copies:
        argv += ["--copy", f"{copy.folder}:{copy.steps}:{copy.data_end}"]
    if as_root:
        argv.append("--allow-root")  # the job's own user is root: no one else's file is loaded
    return argv


def run_merge(
    key_dir: Path,
    out_step: int,
    copies: Sequence[CopyCheckpoint],
    *,
    uid: int,
    gid: int | None,
    timeout_s: float,
    python: str = sys.executable,
    environment: Mapping[str, str] | None = None,
) -> MergeResult:
    """Average `copies` into `<key_dir>/merged/ckpt-<out_step>` as user `uid`.

    Raises:
        MergeError: the helper cannot be started as that user, failed, timed out or answered
            something else than its one JSON line.
    """
    me = os.geteuid()
    if me not in (0, uid):
        raise MergeError(
            f"the controller runs as uid {me} and cannot start the averaging as the job's user "
            f"(uid {uid}); run the controller as root"
        )
    argv = merge_argv(python, key_dir, out_step, copies, as_root=uid == 0)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    env |= dict(environment or {})
    switch: dict[str, object] = {}
    if me == 0 and uid != 0:
        switch = {"user": uid, "group": _group_of(uid, gid), "extra_groups": []}
    started = time.monotonic()
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd="/",
            env=env,
            check=False,
            **switch,  # type: ignore[call-overload]
        )
    except subprocess.TimeoutExpired:
        raise MergeError(f"the averaging did not finish within {timeout_s:g} s") from None
    except OSError as exc:
        raise MergeError(f"cannot start the averaging as uid {uid}: {exc}") from exc
    if done.returncode != 0:
        why = (done.stderr or done.stdout or "").strip().splitlines()
        raise MergeError(
            f"the averaging failed (exit {done.returncode}): "
            + (why[-1][:_OUTPUT_MAX] if why else "no message")
        )
    return _answer(done.stdout, time.monotonic() - started)


def _group_of(uid: int, gid: int | None) -> int:
    """The job's group, else its user's primary group (never root's)."""
    if gid is not None:
        return gid
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        raise MergeError(f"uid {uid} has no account and the job no group: not averaging") from None


def _answer(stdout: str, seconds: float) -> MergeResult:
    lines = [line for line in stdout[-_OUTPUT_MAX:].splitlines() if line.strip()]
    try:
        answer = json.loads(lines[-1])
        merged = str(answer["merged"])
        step = int(answer["step"])
    except (IndexError, ValueError, KeyError, TypeError):
        raise MergeError(f"the averaging answered {stdout[-200:]!r}, not its JSON line") from None
    if merged.startswith("/") or ".." in Path(merged).parts:
        raise MergeError(f"the averaging named {merged!r}, not a folder inside the key folder")
    return MergeResult(merged=merged, step=step, seconds=seconds)
