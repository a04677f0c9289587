"""The admin comments shown in README.md and docs/*.md are ones the controller can write.

The pattern is pinned to the code both ways: what format_admin_comment and the reasons of
controller/round_report.py write must match it, and so must every example in the docs.
"""

from __future__ import annotations

import re
from datetime import UTC
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from slurm_hetsched.controller import round_report
from slurm_hetsched.controller.admin_comment import (
    PREFIX,
    format_admin_comment,
    format_rejected_comment,
    replaced_job,
)
from slurm_hetsched.core.jobspec import JobSpecError, parse_job_spec
from slurm_hetsched.core.model import GpuSlice, Node, Placement, Problem
from slurm_hetsched.core.policies.hadar import Hadar
from slurm_hetsched.core.utility import Utility

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_TYPE = r"[a-z][a-z0-9_.-]*"
_SLICE = rf"{_TYPE}x\d+@[A-Za-z0-9_.\[\]-]+"
_TARGET = rf"(-|{_SLICE}(\+{_SLICE})*)"
_FRACTION = r"(1|\.\d\d)"
_SHARE = rf"(-|{_TYPE}:{_FRACTION}(,{_TYPE}:{_FRACTION})*)"
_PRIORITY = r"(-|\d[\d.e+-]*)"
_TYPES = rf"(\?|{_TYPE}(\+{_TYPE})*)"
REASON = re.compile(
    rf"(started|kept|kept:(residence|finishing|no-gain)|queued|stopped:queued"
    rf"|moved:{_TYPES}->{_TYPES}|failed:\S+"
    rf"|waiting:(price=[\d.e+-]+(>=|<)utility=[\d.e+-]+|no-room:\d+-GPUs,utility=[\d.e+-]+"
    rf"|preempted:utility=0))"
)
_ACCOUNT = r"[a-z0-9_.-]+"
# A job on GPUs borrowed from other accounts (tenant policies): what, from whom, at what rate.
_BORROWED = rf"( borrowed {_TYPE}x\d+(,{_TYPE}x\d+)* from {_ACCOUNT}(\+{_ACCOUNT})* [\d.e+-]+/h)?"
MANAGED = re.compile(
    rf"{PREFIX} r=\d+ {_TARGET} share={_SHARE} prio={_PRIORITY} (?P<reason>\S+){_BORROWED}"
    rf"( was=\d+)?",
    re.ASCII,
)
NOT_MANAGED = re.compile(rf"{PREFIX} not-managed: (?P<why>\S+( \S+)*)")
# An example in prose, a table or a console block: up to the closing backtick or the line end.
EXAMPLE = re.compile(rf"{PREFIX} (r=|not-managed:)[^`\n|]*")


def is_managed_comment(text: str) -> bool:
    match = MANAGED.fullmatch(text)
    return match is not None and REASON.fullmatch(match["reason"]) is not None


def examples() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for match in EXAMPLE.finditer(line):
                text = match.group().rstrip()
                if "<" in text or text.endswith("..."):
                    continue  # a template such as `hetsched r=<round> ...`, not an example
                found.append((f"{doc.relative_to(ROOT)}:{number}", text))
    return found


def test_the_code_writes_what_the_pattern_describes() -> None:
    one = Placement("j", (GpuSlice("n1", "v100", 2),))
    two = Placement("j", (GpuSlice("n3", "k80", 4), GpuSlice("n4", "k80", 4)))
    for placement, share, priority in [
        (one, {"v100": 0.61, "p100": 0.39}, 1.8),
        (two, {"k80": 1.0}, 12.345),
        (None, {}, None),
        (None, {"a100": 0.05}, 0.004),
    ]:
        text = format_admin_comment(
            round_=42, placement=placement, share=share, priority=priority, reason="started"
        )
        assert is_managed_comment(text), text
    replaced = format_admin_comment(
        round_=42, placement=two, share={}, priority=1.0, reason="moved:k80->k80", replaced="35"
    )
    assert is_managed_comment(replaced) and replaced_job(replaced) == "35", replaced
    assert replaced_job(replaced.replace(" was=35", "")) is None
    assert NOT_MANAGED.fullmatch(format_rejected_comment("unknown key 'x';\n  valid: a"))


def reason_of(
    held: dict[str, str] | None = None, waiting: dict[str, str] | None = None, **outcome: object
) -> str:
    fields: dict[str, object] = {"failed": {}, "moved": [], "resubmitted": {}, "started": []}
    fields |= {"stopped": [], "kept": [], "previous_type": {}} | outcome
    placements = {"j": Placement("j", (GpuSlice("n1", "v100", 2),))}
    outcome_ = SimpleNamespace(**fields)
    return round_report.admin_reason(
        "j",
        outcome_,  # type: ignore[arg-type]
        placements,
        None,  # type: ignore[arg-type]
        held or {},
        waiting or {},
    )


@pytest.mark.parametrize(
    "outcome",
    [
        {"failed": {"j": "re-submission failed: sbatch: error"}},
        {"moved": ["j"], "previous_type": {"j": "p100"}},
        {"resubmitted": {"j": "77"}},
        {"started": ["j"]},
        {"stopped": ["j"]},
        {"kept": ["j"]},
        {},
    ],
    ids=["failed", "moved", "resubmitted", "started", "stopped", "kept", "queued"],
)
def test_every_reason_the_controller_gives_fits_the_pattern(outcome: dict[str, object]) -> None:
    assert REASON.fullmatch(reason_of(**outcome))


@pytest.mark.parametrize(
    "why", ["residence: stayed 60 of 270 s", "finishing: done in 5 s", "no gain: a 30 s restart"]
)
def test_a_job_kept_by_amortized_moves_shows_the_rule_only(why: str) -> None:
    """The figures change every round; the comment (rewritten only when its stable part
    changes) carries the rule's name."""
    reason = reason_of(held={"j": why}, kept=["j"])
    assert REASON.fullmatch(reason) and reason == "kept:" + why.split(":")[0].replace(" ", "-")


def test_a_job_hadar_leaves_waiting_shows_why() -> None:
    """The reasons hadar gives (core/policies/hadar.py) fit the pattern as they are."""
    problem = Problem(
        job_ids=("j", "k", "l"),
        gpu_types=("v100",),
        throughput=np.ones((3, 1)),
        capacity=np.array([1.0]),
        steps=np.array([7200.0, 100.0, 100.0]),
        nodes=(Node("n1", {"v100": 1}),),
        utilities=(
            Utility("deadline", 5.0, target_s=60.0),
            Utility("flat", 10.0),
            Utility("flat", 10.0),
        ),
    )
    waiting = Hadar().allocate(problem).waiting
    assert set(waiting) == {"j", "l"}
    for key in waiting:
        reason = reason_of(waiting={"j": waiting[key]})
        assert reason.startswith("waiting:") and REASON.fullmatch(reason), reason


def test_the_docs_show_admin_comments() -> None:
    texts = [text for _, text in examples()]
    assert any(MANAGED.match(t) for t in texts) and any(NOT_MANAGED.match(t) for t in texts)


@pytest.mark.parametrize(("where", "text"), examples(), ids=[w for w, _ in examples()])
def test_an_admin_comment_in_the_docs_is_one_the_controller_writes(where: str, text: str) -> None:
    if text.startswith(f"{PREFIX} not-managed:"):
        match = NOT_MANAGED.fullmatch(text)
        assert match, f"{where}: {text!r} is not `hetsched not-managed: <why>`"
        key = re.fullmatch(r"unknown key '(\w+)'; .*", match["why"])
        if key:  # the parser's own words, not an older version of them
            with pytest.raises(JobSpecError) as refused:
                parse_job_spec(f"hetsched:class=A3C;{key[1]}=1", local_tz=UTC, now_s=0)
            assert text == format_rejected_comment(str(refused.value)), where
        return
    assert is_managed_comment(text), f"{where}: {text!r} does not match {MANAGED.pattern}"
