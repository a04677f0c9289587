"""The files of a forked job (HadarE): placement.json's `fork` object and the checkpoints one
copy or the merge helper reads from another folder of the job's key folder.

    <key folder>/                 copy 0's state folder (the job itself)
      ckpt-<step>/ ...            copy 0's own checkpoints and files
      copy-<i>/                   copy i's state folder (i >= 1): the same files
      merged/ckpt-<step>/         consolidated checkpoints, written by the merge helper only

Everything here is read as hostile: a folder or checkpoint is used only if every folder from
the key folder down is a real folder (never a symlink) owned by the job's uid, its `COMMITTED`
marker is there, and its files check out (checkpoint.py, checked_files.py); placement.json is
read without following a link, owned by the job's uid, at most `_PLACEMENT_MAX_BYTES`.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hetsched.statefolder import MARKER, MERGED_DIR, PLACEMENT_FILE, checkpoint_step
from slurm_hetsched.wrapper.checked_files import open_owned
from slurm_hetsched.wrapper.checkpoint import (
    CheckpointCorruptError,
    CheckpointInfo,
    CheckpointReader,
    CheckpointStore,
)
from slurm_hetsched.wrapper.env import COPY_MAX
from slurm_hetsched.wrapper.state_errors import UntrustedFileError

MERGED_FOLDER = MERGED_DIR
MERGED_KEEP = 2  # consolidated checkpoints kept in merged/
_PLACEMENT_MAX_BYTES = 64 << 10
_MAX_STEP = 10**15
# `from` in a fork: a consolidated checkpoint, relative to the key folder.
MERGED_CHECKPOINT = re.compile(r"^merged/(ckpt-[0-9]{1,16})$")
# A copy's checkpoint as the merge helper is given it: copy 0's, or copy i's (i >= 1).
COPY_CHECKPOINT = re.compile(r"^(?:copy-([1-9][0-9]?)/)?(ckpt-[0-9]{1,16})$")


class ForkError(CheckpointCorruptError):
    """A fork instruction or a checkpoint of another copy cannot be used; the message says why
    (a symlink, another uid's folder, not committed, malformed)."""


@dataclass(frozen=True, slots=True)
class ForkRound:
    """placement.json's `fork`: what a forked copy does this round.

    Attributes:
        round: the round (>= 1); a copy trains each round once.
        copy: the copy it is meant for.
        source: `from`: the consolidated checkpoint to start from ("merged/ckpt-<step>",
            relative to the key folder), or None: the program's own initial model.
        start_step: the job's global step the copy starts at.
        data_offset: batches to advance the data position past the loaded checkpoint's.
        budget: steps to train this round.
        total_steps: the job's total.
    """

    round: int
    copy: int
    source: str | None
    start_step: int
    data_offset: int
    budget: int
    total_steps: int

    @property
    def finish(self) -> bool:
        """The controller's 'finish' instruction: load `from` and end the training loop."""
        return self.start_step >= self.total_steps

    @property
    def end_step(self) -> int:
        """The step the copy pauses at (never past the job's total)."""
        return min(self.start_step + self.budget, self.total_steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "copy": self.copy,
            "from": self.source,
            "start_step": self.start_step,
            "data_offset": self.data_offset,
            "budget": self.budget,
            "total_steps": self.total_steps,
        }


def parse_fork(value: Any) -> ForkRound:
    """A `fork` object, checked field by field.

    Raises:
        ForkError: not an object, or a field missing, of the wrong type or out of range.
    """
    if not isinstance(value, dict):
        raise ForkError("placement.json: `fork` is not an object")

    def whole(name: str, low: int, high: int = _MAX_STEP) -> int:
        item = value.get(name)
        if not isinstance(item, int) or isinstance(item, bool) or not low <= item <= high:
            raise ForkError(f"placement.json: fork.{name}={item!r} is not a whole number in "
                            f"[{low}, {high}]")  # fmt: skip
        return item

    source = value.get("from")
    if source is not None and not (isinstance(source, str) and MERGED_CHECKPOINT.match(source)):
        raise ForkError(
            f"placement.json: fork.from={source!r} is neither null nor merged/ckpt-<step>"
        )
    return ForkRound(
        round=whole("round", 1),
        copy=whole("copy", 0, COPY_MAX),
        source=source,
        start_step=whole("start_step", 0),
        data_offset=whole("data_offset", 0),
        budget=whole("budget", 0),
        total_steps=whole("total_steps", 1),
    )


def read_fork(state_dir: Path) -> ForkRound | None:
    """The `fork` of the placement.json in `state_dir`; None when there is no such file or it
    holds no `fork` (a job that is not forked).

    Raises:
        ForkError: placement.json is a link, another uid's, too big or not JSON, or its `fork`
            is malformed.
    """
    path = state_dir / PLACEMENT_FILE
    try:
        with open_owned(path) as file:
            data = file.read(_PLACEMENT_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except UntrustedFileError as exc:
        raise ForkError(str(exc)) from exc
    except OSError as exc:
        raise ForkError(f"cannot read {path}: {exc}") from exc
    if len(data) > _PLACEMENT_MAX_BYTES:
        raise ForkError(f"{path} is larger than {_PLACEMENT_MAX_BYTES} bytes")
    try:
        payload = json.loads(data)
    except ValueError as exc:
        raise ForkError(f"{path} is not JSON: {exc}") from None
    if not isinstance(payload, dict) or payload.get("fork") is None:
        return None
    return parse_fork(payload["fork"])


def check_own_folder(path: Path, uid: int | None = None) -> None:
    """Refuse `path` unless it is a real folder (not a symlink) owned by `uid` (default: this
    process's effective uid).

    Raises:
        ForkError: missing, a symlink, not a folder, or another uid's (the message names it).
    """
    expected = os.geteuid() if uid is None else uid
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise ForkError(f"{path} does not exist") from None
    except OSError as exc:
        raise ForkError(f"cannot look at {path}: {exc}") from exc
    if stat.S_ISLNK(info.st_mode):
        raise ForkError(f"{path} is a symbolic link (owner uid {info.st_uid}): refused")
    if not stat.S_ISDIR(info.st_mode):
        raise ForkError(f"{path} is not a folder: refused")
    if info.st_uid != expected:
        raise ForkError(
            f"{path} belongs to uid {info.st_uid}, not to the job's uid {expected}: refused "
            "(planted by another user?)"
        )


def open_checkpoint(key_dir: Path, relative: str, uid: int | None = None) -> CheckpointReader:
    """A verified reader of the committed checkpoint `relative` (a copy's `ckpt-<s>` or
    `copy-<i>/ckpt-<s>`, or `merged/ckpt-<s>`) under the key folder.

    The key folder, every folder below it on the way and the checkpoint folder are checked
    with `check_own_folder`; the marker and files are checked when read (checkpoint.py).

    Raises:
        ForkError: a name of another form, a symlink, another uid's folder, no marker.
        CheckpointCorruptError: the marker is not a manifest of that step.
    """
    parts = relative.split("/")
    match = COPY_CHECKPOINT.match(relative) or MERGED_CHECKPOINT.match(relative)
    if match is None or ".." in parts:
        raise ForkError(
            f"{relative!r} is not ckpt-<step>, copy-<i>/ckpt-<step> or merged/ckpt-<step>"
        )
    folder = key_dir
    check_own_folder(folder, uid)
    for part in parts:
        folder = folder / part
        check_own_folder(folder, uid)
    step = checkpoint_step(parts[-1])
    assert step is not None
    try:
        committed = stat.S_ISREG((folder / MARKER).lstat().st_mode)
    except OSError:
        committed = False
    if not committed:
        raise ForkError(f"{folder} is not committed (no COMMITTED marker): refused")
    return CheckpointStore(folder.parent).open(CheckpointInfo(step, folder, True))
