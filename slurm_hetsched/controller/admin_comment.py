"""The round information a managed job carries in its Slurm admin comment (docs/interfaces.md).

`squeue -O JobID,Name,State,admin_comment:80` then shows, per job, e.g.
`hetsched r=42 v100x2@n1 share=v100:.61,p100:.39 prio=1.8 moved:p100->v100`:
the round the job's target last changed, the target (type x count @ nodes), its allocation
shares (a type marked `~`, as in `a100~:.39`, is one where the job's speed is an estimate, not
yet measured), the priority it was chosen with, and why. A job the controller re-submitted
(a move across GPU types or nodes) ends with the job it replaced: `... moved:k80->v100+k80
was=35`, kept by every later comment of that job. A job running on GPUs borrowed from other
accounts (tenant policies, astraea) says from whom and at what rate: `... started borrowed
v100x2 from acct-a 5.3/h`.

Only admins can set an admin comment, so users cannot forge it. It is written only when its
stable part (target, shares, reason) changed, so a round costs one `scontrol update` per job
whose situation changed, not one per job.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from slurm_hetsched.core.model import POOL_OWNER, Payment, Placement

PREFIX = "hetsched"
_MAX_LENGTH = 250
# The parts that change every round without news: left out when comparing.
_VOLATILE = re.compile(r" (r|prio)=\S+")
_REPLACED = re.compile(r" was=(\d+)$")


def describe_target(placement: Placement | None) -> str:
    """'v100x2@n1', 'k80x4@n3+v100x2@n1' across nodes, or '-' when not placed."""
    if placement is None:
        return "-"
    return "+".join(f"{s.gpu_type}x{s.count}@{s.node}" for s in placement.slices)


def describe_borrowing(payment: Payment | None) -> str:
    """'borrowed v100x2 from acct-a 5.3/h' (lenders by their part, largest first; the pool's
    GPUs as 'cluster'; the rate to two figures, so small price moves do not rewrite it), or
    '' for a job that borrows nothing."""
    if payment is None or not payment.borrowed:
        return ""
    gpus = ",".join(f"{t}x{n}" for t, n in sorted(payment.borrowed.items()))
    owners = sorted(payment.lent, key=lambda o: (-payment.lent[o], o)) or [POOL_OWNER]
    lenders = "+".join("cluster" if o == POOL_OWNER else o for o in owners)
    return f"borrowed {gpus} from {lenders} {payment.per_hour:.2g}/h"


def describe_share(share: Mapping[str, float], estimated: Collection[str] = ()) -> str:
    """'v100:.61,p100:.39' (types with a share, largest first), or '-'; a type in `estimated`
    (the job's steps/s there are an estimate, not measured: docs/throughput.md) is marked
    with '~': 'a100~:.61'."""
    parts = [
        (t, v) for t, v in sorted(share.items(), key=lambda item: (-item[1], item[0])) if v >= 0.005
    ]
    if not parts:
        return "-"
    return ",".join(f"{t}{'~' if t in estimated else ''}:{_fraction(v)}" for t, v in parts)


def format_admin_comment(
    *,
    round_: int,
    placement: Placement | None,
    share: Mapping[str, float],
    priority: float | None,
    reason: str,
    estimated: Collection[str] = (),
    replaced: str | None = None,
    copy: int = 0,
) -> str:
    """The admin comment of one managed job this round (`estimated`: the types its steps/s
    are estimates on, marked '~' in its shares; `replaced`: the Slurm job this one replaced
    when the job was re-submitted; `copy`: a forked copy's index, shown as `copy=<k>`)."""
    prio = "-" if priority is None else f"{priority:.3g}"
    # The reason is cut, never the replaced job's id at the end.
    tail = f" was={replaced}" if replaced else ""
    copy_of = f"copy={copy} " if copy else ""
    text = (
        f"{PREFIX} r={round_} {copy_of}{describe_target(placement)} "
        f"share={describe_share(share, estimated)} "
        f"prio={prio} {reason}"
    )
    return text[: _MAX_LENGTH - len(tail)] + tail


def replaced_job(admin_comment: str) -> str | None:
    """The job id after `was=` in a comment the controller wrote, or None."""
    found = _REPLACED.search(admin_comment.strip())
    return found.group(1) if found and admin_comment.startswith(f"{PREFIX} r=") else None


def format_rejected_comment(reason: str) -> str:
    """The admin comment of a job the controller does not manage, with why."""
    return f"{PREFIX} not-managed: {' '.join(reason.split())}"[:_MAX_LENGTH]


def needs_update(current: str, new: str) -> bool:
    """Whether `new` says something `current` does not (round and priority aside)."""
    return _VOLATILE.sub("", current.strip()) != _VOLATILE.sub("", new.strip())


def _fraction(value: float) -> str:
    if value >= 0.995:
        return "1"
    return f"{value:.2f}".lstrip("0")
