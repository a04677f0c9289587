"""Job keys belong to users (`resolve_keys`): the first job binds a key to its user, another
user's job naming it is refused and never takes it over, bindings end a set time after the
key's last job left, and job-id keys survive Slurm restarting its ids."""

from __future__ import annotations

from collections.abc import Mapping

from slurm_hetsched.controller.keys import KeyBinding, KeyClaim, KeyDecisions, resolve_keys

DAY = 86_400.0
ALICE, BOB = (1000, "alice"), (1001, "bob")


def claim(key: str, who: tuple[int, str], job_id: str, *, explicit: bool = True) -> KeyClaim:
    return KeyClaim(key, who[0], who[1], job_id, submit_s=float(job_id), explicit=explicit)


def resolve(
    claims: list[KeyClaim], bindings: Mapping[str, KeyBinding] | None = None, now: float = 0.0
) -> KeyDecisions:
    return resolve_keys(claims, bindings or {}, now_s=now, release_after_s=DAY)


def test_the_first_job_binds_its_key() -> None:
    out = resolve([claim("train", ALICE, "10")], now=5.0)
    assert out.refused == {}
    assert out.bindings["train"] == KeyBinding("train", 1000, "alice", "10", 10.0, 5.0)


def test_another_users_job_is_refused_and_the_owner_keeps_the_key() -> None:
    first = resolve([claim("train", ALICE, "10")]).bindings
    out = resolve([claim("train", ALICE, "10"), claim("train", BOB, "11")], first, now=60.0)
    assert out.refused == {"11": "job key 'train' belongs to user alice (job 10)"}
    assert out.bindings["train"].uid == 1000


def test_of_two_new_claims_the_older_job_wins_whatever_the_order() -> None:
    out = resolve([claim("k", BOB, "12"), claim("k", ALICE, "9")])
    assert set(out.refused) == {"12"} and out.bindings["k"].user == "alice"


def test_the_owner_may_come_back_within_the_release_time() -> None:
    bound = resolve([claim("k", ALICE, "10")], now=0.0).bindings
    ended = resolve([], bound, now=100.0).bindings
    assert ended["k"].ended_s == 100.0
    # Bob is refused while the binding lasts; Alice's re-submission gets it back.
    assert "20" in resolve([claim("k", BOB, "20")], ended, now=100.0 + DAY - 1).refused
    back = resolve([claim("k", ALICE, "21")], ended, now=200.0)
    assert back.refused == {} and back.bindings["k"].ended_s is None
    assert back.bindings["k"].job_id == "10", "the first job stays the one on record"


def test_a_binding_is_released_after_the_release_time() -> None:
    ended = resolve([], resolve([claim("k", ALICE, "10")]).bindings, now=100.0).bindings
    out = resolve([claim("k", BOB, "30")], ended, now=100.0 + DAY)
    assert out.refused == {} and out.bindings["k"].user == "bob"
    assert "k" not in resolve([], ended, now=100.0 + DAY).bindings, "forgotten once released"


def test_a_refused_claim_does_not_end_the_owners_binding() -> None:
    bound = resolve([claim("k", ALICE, "10")]).bindings
    out = resolve([claim("k", BOB, "11")], bound, now=50.0)
    assert out.bindings["k"].ended_s == 50.0, "only the owner's jobs keep a key alive"


def test_a_job_keyed_by_its_own_id_gets_it_after_slurm_restarted_its_ids() -> None:
    old = resolve([claim("7", ALICE, "7", explicit=False)]).bindings
    ended = resolve([], old, now=10.0).bindings
    out = resolve([claim("7", BOB, "7", explicit=False)], ended, now=20.0)
    assert out.refused == {} and out.bindings["7"].user == "bob"


def test_a_live_job_keeps_its_id_key_against_a_reused_id() -> None:
    live = resolve([claim("7", ALICE, "7", explicit=False)]).bindings
    out = resolve([claim("7", ALICE, "30"), claim("7", BOB, "7", explicit=False)], live, now=5.0)
    assert set(out.refused) == {"7"} and out.bindings["7"].user == "alice"


def test_nobody_can_claim_a_job_id_that_is_not_theirs() -> None:
    """key=<digits> would let a user take the key of a job not submitted yet."""
    out = resolve([claim("42", BOB, "40")])
    assert "is a Slurm job id" in out.refused["40"] and "42" not in out.bindings


def test_a_resubmission_keeps_the_old_job_id_as_its_key() -> None:
    bound = resolve([claim("42", ALICE, "42", explicit=False)]).bindings
    out = resolve(
        [claim("42", ALICE, "42", explicit=False), claim("42", ALICE, "57")], bound, now=9.0
    )
    assert out.refused == {}
