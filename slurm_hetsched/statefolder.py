"""The state folder's format, shared by the job side (wrapper/) and the controller: where a
job's folder is, the names of the files in it, and Slurm's host list notation of node names.

A format beside the core, like the node layout file: the wrapper and the controller both
import it and neither imports the other. How each side reads and writes the files, and how
far it trusts them, is that side's business: wrapper/files.py and wrapper/checkpoint.py for
the job (its own folder), controller/statefiles.py for the controller (root, reading files a
user wrote: docs/security.md). Standard library only.

Layout (docs/interfaces.md, "State folder"): `<state_root>/<uid>/<key>/`, holding
    ckpt-<step>/              one checkpoint, with a COMMITTED marker written last
    progress.json             job -> controller: its step, rate, GPU type, status
    ack.json                  job -> controller: the checkpoint a signal asked for is committed
    placement.json            controller -> job: the GPU type, count and nodes of this round
    checkpoint_request.json   controller -> job: checkpoint now (left before the signal)
    resume_request.json       controller -> job: the move is called off, train on
"""

from __future__ import annotations

import re
from pathlib import Path

PROGRESS_FILE = "progress.json"
ACK_FILE = "ack.json"
PLACEMENT_FILE = "placement.json"
REQUEST_FILE = "checkpoint_request.json"
RESUME_FILE = "resume_request.json"
MARKER = "COMMITTED"  # in a checkpoint folder: written last, so its presence means committed

_CHECKPOINT = re.compile(r"^ckpt-(\d+)$")
_TERM = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<ranges>[^\[\]]+)\](?P<suffix>[^\[\]]*)$")


def state_folder(root: Path, uid: int, key: str) -> Path:
    """A job's state folder under a state root: `<root>/<uid>/<key>` (docs/security.md).

    Root creates `<root>/<uid>` and hands it to the user before the user's jobs run, so no
    one can create a folder in another user's part of a shared root.
    """
    return root / str(uid) / key


# A forked job's copies share the key folder (docs/interfaces.md, "Forked copies"): copy k > 0
# keeps its own files in `copy-<k>`, the consolidated checkpoints are in `merged`.
MERGED_DIR = "merged"


def copy_folder_name(copy: int) -> str:
    """The folder of forked copy `copy` (> 0) inside its key folder."""
    return f"copy-{copy}"


def checkpoint_name(step: int) -> str:
    """The folder name of the checkpoint after `step` steps: `ckpt-<step>`."""
    return f"ckpt-{step}"


def checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint folder's name (`checkpoint_name`), or None for another name."""
    match = _CHECKPOINT.match(name)
    return int(match.group(1)) if match else None


def expand_hostlist(text: str) -> list[str]:
    """Slurm's host list as node names, in order: 'n[1-2],gpu7' -> n1 n2 gpu7; 'gpu[01-03,7]'
    -> gpu01 gpu02 gpu03 gpu7 (each range keeps the width of its first number); '' -> none.

    The list is split at the commas outside brackets. A term with one bracket group of numbers
    and number ranges is expanded; any other term (no brackets, several groups, letters in a
    range, unbalanced brackets) is kept as it is.
    """
    names: list[str] = []
    for term in _terms(text):
        names.extend(_expand_term(term))
    return names


def _terms(text: str) -> list[str]:
    """The terms of a host list: split at commas outside brackets, blanks dropped."""
    terms: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return [term.strip() for term in terms if term.strip()]


def _expand_term(term: str) -> list[str]:
    """One term: 'n[1-3,7]' -> n1 n2 n3 n7; 'n01' stays as it is."""
    match = _TERM.match(term)
    if not match:
        return [term]
    names = []
    for part in match.group("ranges").split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return [term]
        width = len(low)
        for number in range(int(low), int(high or low) + 1):
            names.append(f"{match.group('prefix')}{number:0{width}d}{match.group('suffix')}")
    return names
