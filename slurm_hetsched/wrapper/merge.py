"""The merge helper of a forked job (HadarE): the copies' checkpoints of one round averaged
into one consolidated checkpoint, `<key folder>/merged/ckpt-<step>/`.

    python -m slurm_hetsched.wrapper.merge --key-dir DIR --out-step N \\
        --copy CHECKPOINT:STEPS:DATA_END [--copy ...] [--allow-root]

- `--key-dir`: the job's key folder (its state folder; the copies' folders are in it).
- `--out-step`: the consolidated step (the round's start step plus every copy's steps).
- `--copy`, once per copy: its committed checkpoint (`ckpt-<s>` for copy 0, `copy-<i>/ckpt-<s>`
  for copy i; relative to the key folder, or the same path absolute under --key-dir), the steps
  it trained this round, and where its data range ends (its data_offset plus its steps: the
  merged data position is that of the copy with the largest DATA_END). A copy of 0 steps adds
  nothing and is not read.

It prints one JSON line on stdout and exits 0:
    {"merged": "merged/ckpt-480", "step": 480, "copies": 3, "seconds": 0.21}
or prints {"error": "...", "copy": "copy-2/ckpt-130" or null} on stdout and the message on
stderr and exits 2 when the input is refused (a checkpoint that is a symlink, another uid's,
not committed, corrupt, holding a type loading refuses, of a different model; no copy with
steps; bad arguments; running as root without --allow-root), 1 on any other failure (e.g. the
disk). The copies' checkpoints are read with the wrapper's restricted loader and every
checkpoint check (forkfiles.open_checkpoint). The controller starts it AS THE JOB'S USER: the
helper refuses to run as root unless --allow-root is given (then it reads only root-owned
checkpoints, those of root's own jobs), so root never unpickles a user's file by accident.

The consolidated checkpoint is written like any checkpoint (CheckpointStore: a temporary folder,
COMMITTED last, one rename): a helper killed in the middle leaves only a temporary folder,
removed by the next merge; the newest MERGED_KEEP consolidated checkpoints are kept. Run one
merge of a job at a time. HETSCHED_TEST_MERGE_STALL_S (a TEST HOOK, like
HETSCHED_TEST_CHECKPOINT_STALL_S) stalls the write before its commit.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import stat
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from slurm_hetsched.errors import HetschedError
from slurm_hetsched.wrapper.checkpoint import CheckpointStore, CheckpointWriter
from slurm_hetsched.wrapper.forkfiles import (
    COPY_CHECKPOINT,
    MERGED_FOLDER,
    MERGED_KEEP,
    ForkError,
    check_own_folder,
    open_checkpoint,
)
from slurm_hetsched.wrapper.state_errors import CorruptStateError

logger = logging.getLogger(__name__)

STALL_VARIABLE = "HETSCHED_TEST_MERGE_STALL_S"
EXIT_REFUSED = 2
EXIT_FAILED = 1
_NUMBER = re.compile(r"^[0-9]{1,16}$")


class MergeInputError(HetschedError):
    """The merge's input is refused (exit 2); `copy` names the copy's checkpoint at fault."""

    def __init__(self, message: str, copy: str | None = None) -> None:
        super().__init__(message)
        self.copy = copy


@dataclass(frozen=True, slots=True)
class CopyInput:
    """One `--copy`: the checkpoint (relative to the key folder), steps, data range end."""

    checkpoint: str
    steps: int
    data_end: int


@dataclass(frozen=True, slots=True)
class MergeResult:
    merged: str  # relative to the key folder: merged/ckpt-<step>
    step: int
    copies: int  # copies averaged (those with steps)

    def to_dict(self, seconds: float) -> dict[str, Any]:
        return {"merged": self.merged, "step": self.step, "copies": self.copies,
                "seconds": round(seconds, 3)}  # fmt: skip


def parse_copy(text: str, key_dir: Path) -> CopyInput:
    """`CHECKPOINT:STEPS:DATA_END` as `--copy` takes it; the checkpoint made relative to the
    key folder (by name only: nothing is looked up or followed here).

    Raises:
        MergeInputError: another form, or a checkpoint that is not `ckpt-<s>` or
            `copy-<i>/ckpt-<s>` inside the key folder.
    """
    checkpoint, steps, data_end = [*text.rsplit(":", 2), "", ""][:3]
    path = Path(checkpoint)
    if path.is_absolute():
        path = path.relative_to(key_dir) if path.is_relative_to(key_dir) else Path("/")
    relative = path.as_posix()
    if not (_NUMBER.match(steps) and _NUMBER.match(data_end) and COPY_CHECKPOINT.match(relative)):
        raise MergeInputError(
            f"--copy {text!r}: expected CHECKPOINT:STEPS:DATA_END, CHECKPOINT ckpt-<step> or "
            "copy-<i>/ckpt-<step> in --key-dir (relative, or absolute under it), STEPS and "
            "DATA_END whole numbers"
        )
    return CopyInput(relative, int(steps), int(data_end))


def merge(
    key_dir: Path,
    out_step: int,
    copies: Sequence[CopyInput],
    *,
    uid: int | None = None,
    stall_s: float = 0.0,
) -> MergeResult:
    """Average the copies' checkpoints into `<key_dir>/merged/ckpt-<out_step>/`.

    Args:
        uid: the uid every folder must belong to (default: this process's effective uid;
            files are always checked against it). Tests inject another to simulate a
            planted folder without root.
        stall_s: TEST HOOK: stall the write before its commit.

    Raises:
        MergeInputError: refused input (exit 2).
        OSError / HetschedError: the write failed (exit 1); no committed half checkpoint.
    """
    import torch  # noqa: F401  (the states hold tensors; fail here, not mid-load, without it)

    from slurm_hetsched.wrapper.averaging import CopyState, merge_trainer_states
    from slurm_hetsched.wrapper.torch import STATE_FILE, STATE_FORMAT

    names = [c.checkpoint for c in copies]
    if len(set(names)) != len(names):
        raise MergeInputError("a checkpoint is given twice")
    try:
        check_own_folder(key_dir, uid)
    except ForkError as exc:
        raise MergeInputError(f"the key folder: {exc}") from None
    states = []
    for item in copies:
        if item.steps == 0:
            logger.info("%s trained no step: it adds nothing", item.checkpoint)
            continue
        try:
            reader = open_checkpoint(key_dir, item.checkpoint, uid)
            state = reader.load_object(STATE_FILE)
        except CorruptStateError as exc:  # ForkError, corrupt, untrusted or unsafe content
            raise MergeInputError(f"copy {item.checkpoint}: {exc}", item.checkpoint) from None
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise MergeInputError(
                f"copy {item.checkpoint}: not a TorchTrainer state (format 1)", item.checkpoint
            )
        states.append(CopyState(state, item.steps, item.data_end))
    if not states:
        raise MergeInputError("no copy trained a step this round: nothing to merge")
    try:
        merged = merge_trainer_states(states, out_step)
    except ValueError as exc:
        raise MergeInputError(f"the copies cannot be averaged: {exc}") from None
    folder = _merged_folder(key_dir, uid)
    store = CheckpointStore(folder, keep=MERGED_KEEP, stall_s=stall_s)
    store.prune()  # the temporary folder of a merge killed in the middle

    def write(writer: CheckpointWriter) -> None:
        writer.save_object(STATE_FILE, merged)

    meta = {"job_key": key_dir.name, "merged_from": names,
            "steps": [c.steps for c in copies]}  # fmt: skip
    path = store.save(out_step, write, meta=meta)
    return MergeResult(f"{MERGED_FOLDER}/{path.name}", out_step, len(states))


def _merged_folder(key_dir: Path, uid: int | None) -> Path:
    """`<key_dir>/merged`, created 0700 if missing; refused if a link or another uid's."""
    folder = key_dir / MERGED_FOLDER
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    try:
        check_own_folder(folder, uid)
    except ForkError as exc:
        raise MergeInputError(f"the merged folder: {exc}") from None
    mode = stat.S_IMODE(folder.lstat().st_mode)
    if mode & 0o077:
        logger.warning("%s had mode %o; setting 0700", folder, mode)
        os.chmod(folder, 0o700, follow_symlinks=False)
    return folder


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise MergeInputError(f"{message} (see --help)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m slurm_hetsched.wrapper.merge",
        description="Average a forked job's copies into merged/ckpt-<out-step> (HadarE).",
    )
    parser.add_argument("--key-dir", type=Path, required=True, help="the job's key folder")
    parser.add_argument("--out-step", type=int, required=True, help="the consolidated step")
    parser.add_argument(
        "--copy",
        dest="copies",
        action="append",
        required=True,
        metavar="CHECKPOINT:STEPS:DATA_END",
        help="a copy's checkpoint (ckpt-<s> or copy-<i>/ckpt-<s>, relative to --key-dir), the "
        "steps it trained this round, where its data range ends; once per copy",
    )
    parser.add_argument(
        "--allow-root", action="store_true", help="run as root (reads root-owned files only)"
    )
    return parser


def main(argv: Sequence[str] | None = None, *, uid: int | None = None) -> int:
    """Run the helper; returns the exit status (module docstring)."""
    started = time.perf_counter()
    try:
        args = _parser().parse_args(argv)
        if os.geteuid() == 0 and not args.allow_root:
            raise MergeInputError(
                "refusing to run as root: the controller starts the merge as the job's user "
                "(root would read a user's checkpoint); give --allow-root for root's own jobs"
            )
        if args.out_step < 0:
            raise MergeInputError(f"--out-step {args.out_step} is negative")
        copies = [parse_copy(text, args.key_dir) for text in args.copies]
        stall_s = float(os.environ.get(STALL_VARIABLE) or 0)
        result = merge(args.key_dir, args.out_step, copies, uid=uid, stall_s=stall_s)
    except MergeInputError as exc:
        return _fail(EXIT_REFUSED, str(exc), exc.copy)
    except Exception as exc:
        logger.exception("the merge failed")
        return _fail(EXIT_FAILED, f"the merge failed: {exc}", None)
    print(json.dumps(result.to_dict(time.perf_counter() - started)), flush=True)
    return 0


def _fail(status: int, message: str, copy: str | None) -> int:
    print(json.dumps({"error": message, "copy": copy}), flush=True)
    print(f"merge: {message}", file=sys.stderr, flush=True)
    return status


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    sys.exit(main())
