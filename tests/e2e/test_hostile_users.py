"""Hostile users on the dev cluster (docs/security.md): the real controller, real jobs of three
Unix users, a shared state root as an admin makes it (root's, mode 0711).

- A hundred job comments built from hostile classes, among four valid template jobs: the valid
  jobs are placed and finish, every hostile one is reported with a reason and handed back to
  Slurm, and no round fails.
- A second user squats the state folder of the next job id, with a planted checkpoint whose
  pickle runs a command: root's next job and another user's both start from step 0 and
  finish; the command never runs.
- A second user's job naming a key in use neither moves nor ejects the owner's job.

The valid jobs run examples/train_plain.py (the wrapper without PyTorch, so other users can
run it with the system Python); hostile jobs run `true`.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import sqlite3
import sys
import uuid
from pathlib import Path

import pytest

from slurm_hetsched.controller.statefiles import JobFolder, write_placement
from slurm_hetsched.slurm import CliSlurmBackend, GpuRequest, JobOptions, SlurmJob
from slurm_hetsched.wrapper.files import state_folder

from ..users import ALICE, BOB, ensure_user, python_for, run_as
from .conftest import TRAIN_PLAIN, Submitter, render_template, wait_for
from .controller_harness import LiveController

LM = "LM (batch size 20)"
STEPS = 40
VALID = f"hetsched:class={LM};steps={STEPS}"


@pytest.fixture
def state_root(shared_root: Path) -> Path:
    root = shared_root / "state"
    root.mkdir()
    os.chmod(root, 0o711)
    return root


@pytest.fixture
def out(shared_root: Path) -> Path:
    """Where every user's jobs write their output."""
    folder = shared_root / "out"
    folder.mkdir()
    os.chmod(folder, 0o777)
    return folder


def run_until_finished(
    ctl: LiveController, backend: CliSlurmBackend, job_ids: list[str], timeout_s: float
) -> None:
    """Run the controller as a service until every job of `job_ids` COMPLETED and it has
    recorded at least two rounds (counted in its store: a loaded machine may run jobs to
    their end within the first round)."""
    service = ctl.start()
    try:

        def rounds() -> int:
            if not ctl.store_path.exists():
                return 0
            store = ctl.store()
            try:
                return store.last_round_number() or 0
            finally:
                store.close()

        def done() -> bool:
            jobs = admin_comments(backend, job_ids)
            finished = len(jobs) == len(job_ids) and all(
                j.state.value == "COMPLETED" for j in jobs.values()
            )
            return finished and rounds() >= 2

        wait_for(done, f"jobs {job_ids} to finish", timeout_s, every_s=1.0)
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(timeout=120)


def controller(tmp_path: Path, slurm_conf: str, state_root: Path) -> LiveController:
    folder = tmp_path / "controller"
    folder.mkdir()
    return LiveController(folder, slurm_conf, state_root, round_s=3.0)


def submit_plain(
    backend: CliSlurmBackend,
    submit: Submitter,
    state_root: Path,
    out: Path,
    *,
    user: pwd.struct_passwd | None = None,
    comment: str = VALID,
    steps: int = STEPS,
) -> str:
    """A template job (held for the controller) training examples/train_plain.py."""
    python, extra = python_for(user.pw_name) if user is not None else (None, {})
    script = render_template(
        ["--steps", str(steps), "--seed", "0", "--step-time-s", "0.05"],
        script=TRAIN_PLAIN,
        comment=comment,
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/tmp",
        "SLURM_CONF": os.environ.get("SLURM_CONF", ""),
        "HETSCHED_PYTHON": python or sys.executable,
        "HETSCHED_STATE_ROOT": str(state_root),
        "HETSCHED_PROGRESS_EVERY_S": "0.5",
        **extra,
    }
    options = JobOptions(
        gpus=GpuRequest(1),
        output=str(out / "slurm-%j.out"),
        chdir=str(out),
        export=env,
        export_all=False,
    )
    uid = None if user is None else user.pw_uid
    gid = None if user is None else user.pw_gid
    job_id = backend.submit(script, [options], uid=uid, gid=gid)
    submit.job_ids.append(job_id)
    return job_id


def submit_hostile(
    backend: CliSlurmBackend,
    submit: Submitter,
    out: Path,
    comment: str,
    *,
    user: pwd.struct_passwd | None = None,
) -> str:
    """A job that only runs `true`, held, with `comment` (as a template job is submitted)."""
    options = JobOptions(
        comment=comment,
        hold=True,
        requeue=True,
        output=str(out / "hostile-%j.out"),
        chdir=str(out),
        export={"PATH": "/usr/bin:/bin"},
        export_all=False,
    )
    uid = None if user is None else user.pw_uid
    gid = None if user is None else user.pw_gid
    job_id = backend.submit("#!/bin/bash\ntrue\n", [options], uid=uid, gid=gid)
    submit.job_ids.append(job_id)
    return job_id


def hostile_comments() -> list[str]:
    """A hundred comments, every one of which must be refused, from the classes attackers try."""
    base = f"hetsched:class={LM}"
    out: list[str] = []
    # huge, tiny and negative numbers, NaN and infinities, exponents
    out += [f"{base};steps=" + "9" * n for n in (13, 20, 50, 100, 300, 400, 900)]
    out += [f"{base};steps={v}" for v in ("0", "-5", "1e6", "1.5", "nan", "inf", "+", " ", "٣")]
    out += [
        f"{base};steps=10;weight={v}"
        for v in ("1e308", "1e-9", "0", "-1", "nan", "-inf", "inf", "1e4", "0x10", "1_000", "")
    ]
    out += [f"{base};steps=10;tw={v}" for v in ("-0.1", "1e4", "nan", "inf", "1e400", "x")]
    out += [f"{base};steps=10;gpus={v}" for v in ("0", "1025", "-1", "2", "9" * 30)]
    out += [
        f"{base};steps=10;due={v}"
        for v in ("1970-01-01T00:00Z", "9999-12-31T23:59Z", "0001-01-01", "tomorrow", "2026-13-01")
    ]
    # path-like and overlong keys, shell metacharacters
    keys = ("..", ".", "../../etc", "a/b", "/root", ".hidden", "a\\b", "k" * 65, "k" * 500)
    out += [f"{base};steps=10;key={k}" for k in keys]
    out += [f"{base};steps=10;key={k}" for k in ("$(id)", "`id`", "a b", "a|b", "a>b", "*", "~")]
    out += [
        "hetsched:class=$(touch /tmp/hetsched-pwned);steps=10",
        "hetsched:class=`reboot`;steps=10",
        "hetsched:class=x' OR '1'='1;steps=10",
        f"{base};steps=10 && rm -rf /",
        f"{base};steps=10;rm -rf /",
        "hetsched:class=" + "A" * 200 + ";steps=10",
        "hetsched:class=" + "B" * 1000,
    ]
    # duplicate and unknown keys, broken pairs
    out += [
        f"{base};steps=10;steps=20",
        f"{base};class=ResNet-18;steps=10",
        f"{base};steps=10;key=a;key=b",
        f"{base};steps=10;colour=red",
        f"{base};steps=10;KEY=upper",
        f"{base};steps=10;__proto__=1",
        f"{base};steps=10;oops",
        f"{base};steps=10;=5",
        "hetsched:",
        "hetsched:steps=10",
        "hetsched:class=;steps=10",
        "hetsched:class=No Such Model;steps=10",
        f"{base};steps=10;copy=-1",
        f"{base};steps=10;copy=100000",
    ]
    while len(out) < 99:
        n = len(out)
        out.append(f"{base};steps=10;weight={10.0 ** (4 + n % 300):g}")
    # Slurm 22.05 itself refuses comments over 1024 characters ("parameter too long").
    assert all(len(c) <= 1024 for c in out)
    return out[:99]


def admin_comments(backend: CliSlurmBackend, job_ids: list[str]) -> dict[str, SlurmJob]:
    wanted = set(job_ids)
    return {j.job_id: j for j in backend.list_jobs() if j.job_id in wanted}


def test_hostile_comments_are_refused_one_by_one_and_the_valid_jobs_finish(
    backend: CliSlurmBackend,
    submit: Submitter,
    slurm_conf: str,
    state_root: Path,
    out: Path,
    tmp_path: Path,
) -> None:
    bob = ensure_user(BOB)
    valid = [submit_plain(backend, submit, state_root, out, comment=VALID + ";key=victim-run")]
    valid += [submit_plain(backend, submit, state_root, out) for _ in range(3)]
    comments = hostile_comments()
    hostile = [submit_hostile(backend, submit, out, c) for c in comments]
    # The hundredth: a second user's job naming the key of root's first job.
    thief = submit_hostile(backend, submit, out, VALID + ";key=victim-run", user=bob)
    hostile.append(thief)
    assert len(hostile) == 100

    ctl = controller(tmp_path, slurm_conf, state_root)
    status = ctl.command("status")
    assert status.returncode == 0, status.stderr[-2000:]
    assert "MANAGED JOBS (4)" in status.stdout and "NOT MANAGED (100)" in status.stdout
    run_until_finished(ctl, backend, valid, 240)
    log = ctl.log.read_text()

    jobs = admin_comments(backend, hostile)
    assert len(jobs) == 100 and not [j for j in jobs.values() if j.held], "all handed back"
    for job_id, comment in zip(hostile, [*comments, "thief"], strict=True):
        text = jobs[job_id].admin_comment
        assert text.startswith("hetsched not-managed: ") and len(text) > 30, (comment, text)
    assert "belongs to user root" in jobs[thief].admin_comment

    store = ctl.store()
    try:
        rounds = store.rounds()
        actions = store.actions()
    finally:
        store.close()
    with sqlite3.connect(ctl.store_path) as db:
        statuses = {row[0] for row in db.execute("SELECT status FROM rounds")}
    assert len(rounds) >= 2 and statuses == {"enacted"}, "every round ran to its end"
    assert "round failed" not in log and "Traceback" not in log, log[-3000:]
    placed = {key for r in rounds for key in r.plan.placements}
    assert {"victim-run", *valid[1:]} <= placed
    # The thief's job was only ever handed back; the owner's never refused.
    assert {a.kind for a in actions if a.slurm_job_id == thief} == {"release_rejected"}
    assert not [a for a in actions if a.kind == "release_rejected" and a.slurm_job_id in valid]
    assert not (state_root / str(bob.pw_uid)).exists(), "nothing written for the thief"
    for job_id in valid:
        text = (out / f"slurm-{job_id}.out").read_text()
        assert f"final steps={STEPS}" in text, text[-2000:]


PLANT = r"""
import json, os, pickle, struct, sys, zlib
root, bob_uid, alice_uid, next_id, marker = sys.argv[1:]
for path in (f"{root}/{next_id}", f"{root}/0/{next_id}", f"{root}/{alice_uid}/{int(next_id) + 1}",
             f"{root}/0", f"{root}/{alice_uid}/x"):
    try:
        os.makedirs(path)
        print("created", path)
    except OSError as exc:
        print("refused", path, exc.strerror)

class Payload:
    def __reduce__(self):
        return (os.system, (f"touch {marker}",))

body = pickle.dumps({"w": 0.0, "b": 0.0, "evil": Payload()}, protocol=5)
data = b"HETSCHED-STATE01" + struct.pack("<Q", len(body)) + body
for key in (next_id, str(int(next_id) + 1)):
    folder = f"{root}/{bob_uid}/{key}/ckpt-30"
    os.makedirs(folder)
    with open(f"{folder}/state.bin", "wb") as f:
        f.write(data)
    manifest = {"format": "hetsched-checkpoint/1", "step": 30, "written_at": 0, "meta": {},
                "files": {"state.bin": {"size": len(data), "crc32": zlib.crc32(data)}}}
    with open(f"{folder}/COMMITTED", "w") as f:
        json.dump(manifest, f)
    print("planted", folder)
"""


def test_a_squatted_next_job_folder_neither_runs_the_payload_nor_fails_the_job(
    backend: CliSlurmBackend,
    submit: Submitter,
    slurm_conf: str,
    state_root: Path,
    out: Path,
    tmp_path: Path,
) -> None:
    alice, bob = ensure_user(ALICE), ensure_user(BOB)
    marker = Path("/tmp") / f"hetsched-e2e-pwned-{uuid.uuid4().hex}"
    # Bob had a managed job before: the controller made his folder, as it does for every user.
    write_placement(JobFolder(state_root, bob.pw_uid, "earlier", bob.pw_gid), {"round": 1})
    probe = submit_hostile(backend, submit, out, "not a spec")
    backend.cancel(probe)
    next_id = str(int(probe) + 1)

    python, extra = python_for(BOB)
    argv = [str(state_root), str(bob.pw_uid), str(alice.pw_uid), next_id, str(marker)]
    planted = run_as(BOB, [python, "-c", PLANT, *argv], extra)
    assert planted.returncode == 0, planted.stderr
    assert "created" not in planted.stdout, planted.stdout
    assert planted.stdout.count("refused") == 5 and planted.stdout.count("planted") == 2

    roots_job = submit_plain(backend, submit, state_root, out)
    alices_job = submit_plain(backend, submit, state_root, out, user=alice)
    assert (roots_job, alices_job) == (next_id, str(int(next_id) + 1)), "ids as predicted"

    ctl = controller(tmp_path, slurm_conf, state_root)
    run_until_finished(ctl, backend, [roots_job, alices_job], 180)

    assert not marker.exists(), "the planted payload ran"
    for job_id, user in ((roots_job, 0), (alices_job, alice.pw_uid)):
        text = (out / f"slurm-{job_id}.out").read_text()
        steps = [line for line in text.splitlines() if line.startswith("step=")]
        assert steps[0].startswith("step=1 ") and len(steps) == STEPS, text[-2000:]
        assert f"final steps={STEPS}" in text
        folder = state_folder(state_root, user, job_id)
        assert folder.stat().st_uid == user and folder.parent.stat().st_uid == user
        assert not (folder / "ckpt-30").exists()
    # Bob's own folder still holds his plant: nobody read from it.
    assert (state_root / str(bob.pw_uid) / next_id / "ckpt-30" / "COMMITTED").exists()


def test_a_key_claimed_by_a_second_user_neither_moves_nor_ejects_the_owners_job(
    backend: CliSlurmBackend,
    submit: Submitter,
    slurm_conf: str,
    state_root: Path,
    out: Path,
    tmp_path: Path,
) -> None:
    bob = ensure_user(BOB)
    long_run = f"hetsched:class={LM};steps=2000;key=exp-7"
    owner = submit_plain(backend, submit, state_root, out, comment=long_run, steps=2000)
    ctl = controller(tmp_path, slurm_conf, state_root)
    ctl.once()
    running = wait_for(
        lambda: (j := backend.job(owner)).state.value == "RUNNING" and j,
        "the owner's job runs",
        60,
    )
    thief = submit_plain(backend, submit, state_root, out, user=bob, comment=long_run, steps=2000)
    for _ in range(3):
        ctl.once()

    now = backend.job(owner)
    assert now.state.value == "RUNNING" and now.restart_count == running.restart_count
    assert now.nodes == running.nodes, "not moved"
    assert now.admin_comment.startswith("hetsched r="), now.admin_comment
    taken = backend.job(thief)
    assert taken.admin_comment.startswith("hetsched not-managed: job key 'exp-7' belongs to")
    store = ctl.store()
    try:
        actions = store.actions()
        keys = {row["key"]: row["uid"] for row in store.key_bindings()}
    finally:
        store.close()
    owner_kinds = [a.kind for a in actions if a.slurm_job_id == owner]
    assert "signal" not in owner_kinds and "requeue_hold" not in owner_kinds, owner_kinds
    assert {a.kind for a in actions if a.slurm_job_id == thief} == {"release_rejected"}
    assert keys["exp-7"] == 0
    folder = state_folder(state_root, 0, "exp-7")
    placement = json.loads((folder / "placement.json").read_text())
    assert placement["round"] == 1 and folder.stat().st_uid == 0
    assert not (state_root / str(bob.pw_uid)).exists(), "nothing written for the thief"
