"""Job keys belong to users (docs/security.md, "Job keys").

A job key names a job across re-submissions and its state folder. The first job that uses a
key binds it to its user (with that job's id and submit time); while the binding lasts, a job
of another user that names the key is refused and reported, and never takes the key over.
A binding ends a configurable time after the last job using the key left Slurm
(`controller.key_release_s`), so keys do not stay taken forever.

Keys that are Slurm job ids (a job without `key=` is keyed by its own id) need care, because
ids restart from 1 after a clean slurmctld start:
- a job keyed by its own id always gets it once no live job of another user holds it (the
  ended binding is a job of before the restart);
- `key=<digits>` naming another job's id is accepted only while the key is bound to the same
  user (the controller's, or the user's own, re-submission of that job), so no one can claim
  the id of a job that is not submitted yet.

Pure: `resolve_keys` takes the claims of one observation and the bindings so far, and returns
the decisions and the new bindings; the controller keeps them in its store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class KeyBinding:
    """Who a job key belongs to.

    Attributes:
        key: the job key.
        uid: the user it is bound to.
        user: that user's name (for messages).
        job_id: the Slurm id of the job that first used it.
        submit_s: that job's submit time (Unix seconds).
        bound_s: when the binding was made.
        ended_s: when the last job using the key was last seen gone; None while one lives.
    """

    key: str
    uid: int
    user: str
    job_id: str
    submit_s: float
    bound_s: float
    ended_s: float | None = None


@dataclass(frozen=True, slots=True)
class KeyClaim:
    """A live job naming a key.

    Attributes:
        key: the key it names (`key=`, else its own job id).
        uid, user: the job's user.
        job_id: its Slurm id.
        submit_s: its submit time (Unix seconds), recorded with a new binding.
        explicit: whether the key came from `key=` (else it is the job's own id).
    """

    key: str
    uid: int
    user: str
    job_id: str
    submit_s: float
    explicit: bool


@dataclass(frozen=True, slots=True)
class KeyDecisions:
    """The outcome of one observation's claims.

    Attributes:
        refused: job id -> why it may not use its key.
        bindings: key -> binding after this observation (released ones dropped).
    """

    refused: Mapping[str, str] = field(default_factory=dict)
    bindings: Mapping[str, KeyBinding] = field(default_factory=dict)


def resolve_keys(
    claims: Iterable[KeyClaim],
    bindings: Mapping[str, KeyBinding],
    *,
    now_s: float,
    release_after_s: float,
) -> KeyDecisions:
    """Decide which live job may use which key; of new claims, the oldest job (lowest Slurm
    id: a requeue resets Slurm's submit time, not the id) claims first."""
    live = {
        key: b
        for key, b in bindings.items()
        if b.ended_s is None or now_s - b.ended_s < release_after_s
    }
    ordered = sorted(claims, key=lambda c: job_id_order(c.job_id))
    refused: dict[str, str] = {}
    claimed: set[str] = set()
    for claim in ordered:
        bound = live.get(claim.key)
        if bound is not None and bound.uid != claim.uid and not _reclaims_own_id(claim, bound):
            refused[claim.job_id] = (
                f"job key {claim.key!r} belongs to user {bound.user} (job {bound.job_id})"
            )
            continue
        if bound is None or bound.uid != claim.uid:
            if claim.explicit and claim.key.isdigit() and claim.key != claim.job_id:
                refused[claim.job_id] = (
                    f"key={claim.key} is a Slurm job id: only that job's own re-submissions "
                    "may use it; choose a key with a letter in it"
                )
                continue
            bound = KeyBinding(
                claim.key, claim.uid, claim.user, claim.job_id, claim.submit_s, now_s
            )
        live[claim.key] = replace(bound, ended_s=None)
        claimed.add(claim.key)
    for key, b in live.items():
        if key not in claimed and b.ended_s is None:
            live[key] = replace(b, ended_s=now_s)
    return KeyDecisions(refused, live)


def _reclaims_own_id(claim: KeyClaim, bound: KeyBinding) -> bool:
    """A job keyed by its own id, bound to a job that has left Slurm: ids restarted."""
    return not claim.explicit and claim.key == claim.job_id and bound.ended_s is not None


def job_id_order(job_id: str) -> tuple[int, str]:
    """Slurm job ids in submission order (numerically, not as text)."""
    return (int(job_id), "") if job_id.isdigit() else (0, job_id)
