"""HadarE on the dev cluster: a job forked into copies on n1, n2 and n3, merged every round by
the controller as job tracker, every round decided by hadar (rounds by hand, `once`).

One GPU of each node is free (the others hold sleeping jobs, as the paper's one-GPU nodes), so
the three copies run on a V100, a P100 and a K80, each at its type's speed (emulation knob on),
with step budgets in proportion to those speeds. Each round the copies train their budgets and
pause; the next round averages them (as the job's user) and gives them the next budgets, in
place. In one round the training process of copy 2 is killed (kill -9): that round's work of
copy 2 is lost, the others' is averaged, copy 2 is submitted again, and the job finishes with
exactly its steps. Its held-out loss is compared with an unforked run's and the untrained
model's (printed with `-s`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_hetsched.slurm import CliSlurmBackend, GpuRequest, JobOptions
from slurm_hetsched.wrapper.files import state_folder

from .conftest import TRAIN_DDP, Submitter, job_environment, render_template, wait_for
from .controller_harness import REPO, LiveController
from .test_controller import controller_for

# Long enough for the training to near its floor: periodic averaging costs progress early on
# (an averaged step is worth about half a sequential one here, docs/job-side.md "What forking
# costs in quality"), so the held-out loss ratio shrinks with the steps (1.11x at 2400).
STEPS = 14400
STEP_TIME_S = 0.005  # a V100 step; the emulation stretches the others by the table's ratios
ROUND_S = 6.0
# Steps/s of the test's class: a V100 step lasts STEP_TIME_S (examples/train_ddp.py pads it),
# so the budgets the tracker gives match what the copies do.
TABLE = {
    "format": "hetsched-throughputs/1",
    "source": "test: one class, its speeds under the emulation",
    "throughputs": {"fork1": {"1": {"v100": 200.0, "p100": 120.0, "k80": 80.0}}},
}
# The bound: the forked job's held-out loss at most 1.05x an unforked run's.
QUALITY_BOUND = 1.05
HELDOUT = re.compile(r"^final steps=(\d+) heldout_loss=([\d.]+) ", re.MULTILINE)


def _local_heldout(tmp: Path, steps: int) -> float:
    """The held-out loss of an unforked local run of examples/train_ddp.py (one rank)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "HETSCHED"))}
    env |= {"HETSCHED_STATE_DIR": str(tmp / f"state-{steps}"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(TRAIN_DDP), "--steps", str(steps)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = HELDOUT.search(done.stdout)
    assert done.returncode == 0 and found, done.stdout[-2000:] + done.stderr[-2000:]
    return float(found.group(2))


@pytest.fixture
def one_gpu_per_node(submit: Submitter) -> Iterator[None]:
    """Every GPU but one per node held by a sleeping job that is not managed."""
    for gpu_type, count, node in (("v100", 1, "n1"), ("p100", 1, "n2"), ("k80", 3, "n3")):
        job = submit(
            "#!/bin/bash\nexec sleep 900\n",
            JobOptions(gpus=GpuRequest(count, gpu_type), nodelist=node, job_name="other"),
        )
        submit.wait_state(job, "RUNNING")
    yield


def _fork_state(ctl: LiveController, key: str) -> dict[str, object] | None:
    store = ctl.store()
    try:
        return store.forks().get(key)
    finally:
        store.close()


def _merges(ctl: LiveController, key: str) -> list[tuple[dict[str, int], str]]:
    """Each merge the journal recorded as done: (steps per copy, outcome)."""
    store = ctl.store()
    try:
        actions = store.actions(job_key=key)
    finally:
        store.close()
    return [
        ({c: int(n) for c, n in a.detail["steps"].items()}, a.outcome)
        for a in actions
        if a.kind == "merge" and a.status == "done"
    ]


def _failures(ctl: LiveController, key: str) -> list[tuple[str, str]]:
    store = ctl.store()
    try:
        return [(a.kind, a.outcome) for a in store.actions(job_key=key) if a.status == "failed"]
    finally:
        store.close()


def _once_killing_the_averaging(ctl: LiveController, state_dir: Path) -> None:
    """One round whose averaging (the merge helper, as the job's user) is SIGKILLed in the
    middle of writing the consolidated checkpoint (the helper's stall hook holds it there)."""
    argv = ctl.argv("--once")
    env = os.environ | {"HETSCHED_TEST_MERGE_STALL_S": "120"}
    with subprocess.Popen(
        argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as controller:
        merged = state_dir / "merged"
        wait_for(lambda: any(merged.glob(".tmp-ckpt-*")), "the averaging mid-write", 120)
        # This test's helper only: CI runs the two dev clusters' tests side by side.
        helpers = _pids_with(b"slurm_hetsched.wrapper.merge", str(state_dir).encode())
        assert helpers, "no merge helper running"
        for pid in helpers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _out, err = controller.communicate(timeout=240)
    assert controller.returncode == 0, err[-3000:]
    assert "averaging its round" in err and "failed" in err, err[-3000:]


def _pids_with(*needles: bytes, environ: tuple[bytes, ...] = ()) -> list[int]:
    """Processes whose command line holds every one of `needles` and whose environment every
    variable of `environ`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            env = set((proc / "environ").read_bytes().split(b"\0")) if environ else set()
        except OSError:
            continue
        if all(n in cmdline for n in needles) and all(v in env for v in environ):
            found.append(int(proc.name))
    return found


def _copy_dir(state_dir: Path, copy: int) -> Path:
    return state_dir / f"copy-{copy}" if copy else state_dir


def _read(path: Path) -> dict[str, object]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def _copies(backend: CliSlurmBackend, key: str) -> dict[int, str]:
    """Copy index -> Slurm job id of the job's active copies."""
    out = {}
    for job in backend.list_jobs():
        pairs = dict(
            p.strip().partition("=")[::2] for p in job.comment.partition(":")[2].split(";")
        )
        if job.state.is_active and (job.job_id == key or pairs.get("key") == key):
            out[int(pairs.get("copy") or 0)] = job.job_id
    return out


def _round_trained(
    backend: CliSlurmBackend, ctl: LiveController, key: str, state_dir: Path
) -> None:
    """Wait until every copy with work in the tracker's round acked it or is gone."""
    state = _fork_state(ctl, key)
    assert state is not None
    work = {int(c): w for c, w in dict(state["work"]).items()}  # type: ignore[arg-type]

    def probe() -> bool:
        running = _copies(backend, key)
        for copy, (job_id, *_rest) in work.items():
            ack = _read(_copy_dir(state_dir, copy) / "ack.json")
            acked = str(ack.get("job_id")) == job_id and ack.get("fork_round") == state["round"]
            if not acked and running.get(copy) == job_id:
                if backend.job(job_id).state.value in ("RUNNING", "PENDING"):
                    return False
        return True

    wait_for(probe, f"copies of {key} done with round {state['round']}", 180, every_s=0.3)


def _training_past(folder: Path, step: int) -> None:
    def probe() -> bool:
        return int(_read(folder / "progress.json").get("step") or 0) > step  # type: ignore[call-overload]

    wait_for(probe, f"{folder.name} training past step {step}", 120, every_s=0.2)


def _kill_training(job_id: str, state_root: Path) -> None:
    """kill -9 the job's training process (the dev cluster's nodes share this machine: found
    by its script and SLURM_JOB_ID)."""
    # Its job id and this test's state root: the other dev cluster may run a job of that id.
    environ = (f"SLURM_JOB_ID={job_id}".encode(), f"HETSCHED_STATE_ROOT={state_root}".encode())
    pids = _pids_with(TRAIN_DDP.name.encode(), environ=environ)
    assert pids, f"no training process of job {job_id}"
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_hadare_forks_a_job_into_copies_merges_them_every_round_and_finishes(
    submit: Submitter,
    backend: CliSlurmBackend,
    slurm_conf: str,
    state_root: Path,
    tmp_path: Path,
    one_gpu_per_node: None,
) -> None:
    table = tmp_path / "throughputs.json"
    table.write_text(json.dumps(TABLE))
    rates = ",".join(f"{t}={r:g}" for t, r in TABLE["throughputs"]["fork1"]["1"].items())
    environment = job_environment(
        state_root,
        HETSCHED_CHECKPOINT_EVERY_S="0",
        HETSCHED_EMULATE_GPU_SPEED="1",
        HETSCHED_EMULATE_RATES=rates,  # the test's class is in no shipped table
    )
    ctl = controller_for(
        tmp_path,
        slurm_conf,
        state_root,
        policy="hadar",
        round_s=ROUND_S,
        throughputs=table,
        # The copies get a re-submission's environment (Slurm keeps no job's environment):
        # the emulation and the test's cadences come from here, as an admin would set them.
        resubmit_environment={
            "HETSCHED_PYTHON": sys.executable,
            "SLURM_CONF": slurm_conf,
            **{k: v for k, v in environment.items() if k.startswith("HETSCHED_")},
        },
        policy_options={"restart_s": 1.0},
    )
    script = render_template(
        ["--steps", str(STEPS), "--step-time-s", str(STEP_TIME_S)],
        script=TRAIN_DDP,
        comment=f"hetsched:class=fork1;steps={STEPS};fork=3",
    )
    key = submit(
        script,
        JobOptions(gpus=GpuRequest(1), export=environment, export_all=False,
                   chdir=str(submit.folder)),
    )  # fmt: skip
    state_dir = state_folder(state_root, os.geteuid(), key)
    names: set[tuple[str, str]] = set()
    nodes_seen: list[list[str]] = []  # per round: the nodes of the copies running
    killed = False
    merge_killed = False
    state: dict[str, Any] | None = None
    try:
        for _ in range(40):
            # The round after copy 2's: its averaging is killed in the middle of its write.
            if killed and not merge_killed and state and len(state["work"]) == 3:
                _once_killing_the_averaging(ctl, state_dir)
                merge_killed = True
            else:
                done = ctl.once()
                assert done.returncode == 0, done.stderr[-3000:]
            copies = _copies(backend, key)
            submit.job_ids.extend(j for j in copies.values() if j not in submit.job_ids)
            state = _fork_state(ctl, key)
            if state is None or state["done"]:
                break
            running = [backend.job(j) for j in copies.values()]
            names |= {(j.name, j.admin_comment) for j in running}
            nodes_seen.append(sorted(j.nodes for j in running if j.state.value == "RUNNING"))
            # Once all three train: kill copy 2 mid-round, once.
            if not killed and len(state["work"]) == 3 and int(state["merged_step"]) > 0:
                victim = str(dict(state["work"])["2"][0])
                _training_past(_copy_dir(state_dir, 2), int(state["merged_step"]))
                _kill_training(victim, state_root)
                killed = True
            _round_trained(backend, ctl, key, state_dir)
        wait_for(
            lambda: backend.job(key).state.value in ("COMPLETED", "FAILED", "CANCELLED"),
            f"copy 0 ({key}) to finish",
            120,
            every_s=0.5,
        )
    finally:
        status = ctl.command("rounds", "--job", key)
        print(status.stdout[-6000:], status.stderr[-2000:])
        # Copies the controller submitted after the test last looked: none may outlive it.
        submit.job_ids.extend(j for j in _copies(backend, key).values() if j not in submit.job_ids)

    log = (submit.folder / f"slurm-{key}.out").read_text()
    assert backend.job(key).state.value == "COMPLETED", log[-4000:]
    assert killed, "copy 2 was never seen training with the two others"
    assert ["n1", "n2", "n3"] in nodes_seen, nodes_seen  # three copies at once, one a node
    base = backend.job(key).name
    assert {n for n, _ in names} >= {base, f"{base}.copy1", f"{base}.copy2"}, names
    # The admin comment names the copy: `hetsched r=<round> copy=<k> <target> ...`.
    copies_shown = {c.split()[2] for n, c in names if n != base and c.startswith("hetsched r=")}
    assert copies_shown == {"copy=1", "copy=2"}, names
    assert merge_killed, "the averaging was never killed"
    merges = _merges(ctl, key)
    assert any(kind == "merge" and "failed" in outcome for kind, outcome in _failures(ctl, key))
    assert sum(sum(steps.values()) for steps, _ in merges) == STEPS, merges
    assert len(merges) >= 3 and any(len(s) == 3 for s, _ in merges), merges
    # The killed copy's round counts only the two others; the job still finished exactly.
    assert any(set(s) == {"0", "1"} for s, _ in merges) or any(
        s.get("2") == 0 for s, _ in merges
    ), merges
    (final,) = HELDOUT.findall(log)
    assert int(final[0]) == STEPS
    forked = float(final[1])
    unforked = _local_heldout(tmp_path, STEPS)
    untrained = _local_heldout(tmp_path, 0)
    print(f"held-out loss: forked {forked:.5f}, unforked {unforked:.5f}, untrained {untrained:.5f}")
    for steps, outcome in merges:
        print(f"  merge {steps}: {outcome}")
    assert forked < 0.5 * untrained
    assert forked <= QUALITY_BOUND * unforked
    # Every consolidated checkpoint is whole: committed, never half-written.
    merged = sorted((state_dir / "merged").glob("ckpt-*"))
    assert merged and all((m / "COMMITTED").exists() for m in merged), merged
    assert not list((state_dir / "merged").glob(".tmp-ckpt-*")), "the killed write was cleared"
