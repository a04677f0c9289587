"""The `hetsched` commands shown in README.md and docs/*.md work as shown.

Every command in a fenced block must parse with today's command line. Those that need no Slurm
and no root (`allocate`, `simulate`, `trace`) are run, block by block in order, in a folder of
their own where the repository's examples/ and etc/ are at hand, and must exit 0. A command
that runs too long for a unit test is listed in SLOW with why; `--help` of every subcommand
must work too.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_hetsched.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
HETSCHED = [sys.executable, "-m", "slurm_hetsched.cli"]
# Subcommands that need neither Slurm nor root; the others are only parsed.
RUNNABLE = {"allocate", "simulate", "trace"}
# Doc commands not run, by a piece of their text: each reason says why.
SLOW = {
    "--compare max_min_fairness_perf,max_min_fairness,fifo_perf,fifo,finish_time_fairness_perf": (
        "the evaluation behind docs/simulation.md's table: 6 policies x 400 jobs, about a "
        "minute; its numbers are the point, so it stays as published"
    ),
}
_FENCE = re.compile(r"^```(?P<lang>[^\n`]*)\n(?P<body>.*?)^```", re.MULTILINE | re.DOTALL)
_SHELL_LANGS = {"", "sh", "bash", "shell", "console"}
_PROGRAM = re.compile(r"\s*(\S*/)?hetsched\s")  # hetsched, or .venv/bin/hetsched


@dataclass(frozen=True, slots=True)
class DocCommand:
    where: str  # file:line
    text: str
    argv: tuple[str, ...]  # without the program


def doc_blocks() -> list[tuple[str, list[DocCommand]]]:
    """The `hetsched` commands of each shell block, in order, with where each one is."""
    blocks = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for fence in _FENCE.finditer(text):
            if fence["lang"].strip() not in _SHELL_LANGS:
                continue
            first = text.count("\n", 0, fence.start("body")) + 1
            where = f"{doc.relative_to(ROOT)}:{first}"
            commands = list(_commands(fence["body"], first, doc, fence["lang"].strip()))
            if commands:
                blocks.append((where, commands))
    return blocks


def _commands(body: str, first: int, doc: Path, lang: str) -> list[DocCommand]:
    found = []
    lines = body.split("\n")
    index = 0
    while index < len(lines):
        number, line = first + index, lines[index]
        while line.endswith("\\") and index + 1 < len(lines):
            index += 1
            line = line[:-1] + " " + lines[index].strip()
        index += 1
        if lang == "console":  # a command only after a prompt; the rest is output
            if not line.startswith(("# ", "$ ")):
                continue
            line = line[2:]
        if not _PROGRAM.match(line) or set(";|&<>$") & set(line):
            continue  # output, or a shell line that is more than one hetsched command
        words = shlex.split(line, comments=True)
        if words:
            found.append(DocCommand(f"{doc.relative_to(ROOT)}:{number}", line, tuple(words[1:])))
    return found


BLOCKS = doc_blocks()
COMMANDS = [command for _, commands in BLOCKS for command in commands]


def is_slow(command: DocCommand) -> bool:
    return any(piece in command.text for piece in SLOW)


def test_the_docs_show_commands_of_every_kind() -> None:
    shown = {command.argv[0] for command in COMMANDS if command.argv}
    assert {"allocate", "simulate", "trace", "devcluster", "controller"} <= shown


def test_every_slow_command_is_still_in_the_docs() -> None:
    for piece in SLOW:
        assert any(piece in command.text for command in COMMANDS), f"SLOW: {piece!r} is gone"


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_a_doc_command_parses(command: DocCommand) -> None:
    try:
        build_parser().parse_args(list(command.argv))
    except SystemExit as exc:
        pytest.fail(
            f"{command.where}: `hetsched {shlex.join(command.argv)}` does not parse ({exc})"
        )


RUN_BLOCKS = [
    (where, commands)
    for where, commands in BLOCKS
    if any(c.argv and c.argv[0] in RUNNABLE and not is_slow(c) for c in commands)
]


@pytest.mark.parametrize(("where", "commands"), RUN_BLOCKS, ids=[w for w, _ in RUN_BLOCKS])
def test_a_doc_block_runs(where: str, commands: list[DocCommand], tmp_path: Path) -> None:
    # Inputs from the repository; outputs (jobs.jsonl, results.json, plots/) stay in tmp_path.
    for name in ("examples", "etc"):
        (tmp_path / name).symlink_to(ROOT / name)
    for command in commands:
        if not command.argv or command.argv[0] not in RUNNABLE or is_slow(command):
            continue
        done = subprocess.run(
            [*HETSCHED, *command.argv],
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),  # this checkout, run from tmp_path
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"{command.where}: {command.text}\n{done.stderr}"


def subcommands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[str, ...]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((*path, name))
                found.extend(subcommands(sub, (*path, name)))
    return found


@pytest.mark.parametrize("path", subcommands(build_parser()), ids=" ".join)
def test_help_of_every_subcommand(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main([*path, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: hetsched {' '.join(path)}")
