"""astraea on the dev cluster with real Slurm accounting (docs/policies.md, "astraea"): the
accounts' quotas are read from Slurm (GrpTRES of `acct-a`: n1's 2 v100; of `acct-b`: n3's 4
k80; `acct-c` has none). A job of acct-b borrows acct-a's idle V100s and pays acct-a; when
acct-a submits, acct-a's job gets its V100s at the next round and acct-b's job is moved, with
the checkpoint protocol, to its own K80s, losing no step; a job of acct-c (no quota) only
borrows, here acct-b's idle K80s, and pays acct-b. The ledger in the store and `hetsched
tenants` show the payments. n2's P100s are busy outside our control throughout.

Each round is a fresh controller process (`once`), as after a restart."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from slurm_hetsched.slurm import CliSlurmBackend, GpuRequest, JobOptions
from slurm_hetsched.slurm.accounts import accounting_enabled, read_config
from slurm_hetsched.store.ledger import conserved, totals
from slurm_hetsched.wrapper.files import state_folder

from ..conftest import in_ci
from .conftest import SEED, Submitter, job_environment, render_template, wait_done, wait_for
from .controller_harness import LiveController, wait_settled
from .test_controller import controller_for

CLASS = "astraea1"
TABLE = {
    "format": "hetsched-throughputs/1",
    "source": "test: one class, 10x faster on v100 than on k80",
    "throughputs": {
        CLASS: {
            "1": {"v100": 10.0, "p100": 3.0, "k80": 1.0},
            "2": {"v100": 20.0, "p100": 6.0, "k80": 2.0},
        }
    },
}
B_STEPS = 600
STEP_TIME_S = "0.05"
# Worth 100, nothing 400 s after arrival: 600 steps take 30 s on 2 v100s (worth 92) and 300 s
# on 2 k80s (worth 25), so borrowing the idle V100s pays for their price.
STEEP = ";utility=linear;umax=100;target=400"


@pytest.fixture
def accounting(slurm_conf: str, backend: CliSlurmBackend) -> None:
    if accounting_enabled(read_config(backend.cli)):
        return
    if Path(slurm_conf).resolve().parent.parent.name == "sid":  # <dev cluster>/sid/etc/
        pytest.skip("the sid dev cluster runs without accounting (docs/devcluster.md)")
    message = f"{slurm_conf}: the dev cluster runs without accounting (`up --accounting`)"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def _submit(
    submit: Submitter, state_root: Path, account: str, gpus: int, steps: int, extra: str = ""
) -> str:
    script = render_template(
        ["--steps", str(steps), "--seed", str(SEED), "--step-time-s", STEP_TIME_S],
        comment=f"hetsched:class={CLASS};steps={steps}{extra}",
    )
    options = JobOptions(
        gpus=GpuRequest(gpus),
        export=job_environment(state_root),
        export_all=False,
        chdir=str(submit.folder),
        account=account,
    )
    return submit(script, options)


def _step(state_root: Path, job: str) -> int:
    path = state_folder(state_root, os.geteuid(), job) / "progress.json"
    try:
        return int(json.loads(path.read_text()).get("step") or 0)
    except (OSError, ValueError):
        return 0


def _round(ctl: LiveController, backend: CliSlurmBackend, jobs: list[str]):  # type: ignore[no-untyped-def]
    done = ctl.once()
    assert done.returncode == 0, done.stderr[-3000:]
    seen = wait_settled(backend, jobs)
    store = ctl.store()
    try:
        return store.rounds()[-1], seen
    finally:
        store.close()


def test_tenants_borrow_pay_and_get_their_quota_back(
    accounting: None,
    submit: Submitter,
    backend: CliSlurmBackend,
    slurm_conf: str,
    state_root: Path,
    tmp_path: Path,
) -> None:
    table = tmp_path / "throughputs.json"
    table.write_text(json.dumps(TABLE))
    ctl = controller_for(
        tmp_path,
        slurm_conf,
        state_root,
        policy="astraea",
        round_s=4.0,
        throughputs=table,
        policy_options={"slot_s": 4.0, "restart_s": 1.0},
        extra_toml='[tenants]\nquotas_from = "slurm"\n',
    )
    other = submit(
        "#!/bin/bash\nexec sleep 900\n",
        JobOptions(gpus=GpuRequest(2, "p100"), nodelist="n2", job_name="other"),
    )
    submit.wait_state(other, "RUNNING")

    # 1. acct-b's job borrows acct-a's idle V100s, and pays acct-a.
    b1 = _submit(submit, state_root, "acct-b", 2, B_STEPS, STEEP)
    record, seen = _round(ctl, backend, [b1])
    assert record.plan.placements[b1].gpus_by_type() == {"v100": 2}, record.allocation.waiting
    payment = (record.allocation.payments or {})[b1]
    assert payment.payer == "acct-b" and set(payment.lent) == {"acct-a"} and payment.amount > 0
    assert "borrowed v100x2 from acct-a" in seen[b1].admin_comment, seen[b1].admin_comment
    status = ctl.command("status")
    assert status.returncode == 0, status.stderr
    assert "borrowed v100x2 from acct-a" in status.stdout, status.stdout
    wait_for(lambda: _step(state_root, b1) >= 40, "acct-b's job training on the V100s", 120)

    # 2. acct-a submits: its job gets its V100s at the next round, acct-b's job goes back to
    # its own K80s (free: it pays nothing there).
    a1 = _submit(submit, state_root, "acct-a", 2, 200)
    record, seen = _round(ctl, backend, [a1, b1])
    placements = record.plan.placements
    assert placements[a1].gpus_by_type() == {"v100": 2}, record.allocation.waiting
    assert placements[b1].gpus_by_type() == {"k80": 2}, record.allocation.waiting
    assert placements[b1].nodes == ("n3",)
    assert not set(record.allocation.payments or {}) & {a1, b1}
    assert "moved:v100->k80" in seen[b1].admin_comment, seen[b1].admin_comment

    # 3. acct-c has no quota: its job only borrows, here acct-b's two idle K80s.
    c1 = _submit(submit, state_root, "acct-c", 1, 100)
    record, seen = _round(ctl, backend, [a1, b1, c1])
    assert record.plan.placements[c1].gpus_by_type() == {"k80": 1}, record.allocation.waiting
    payment = (record.allocation.payments or {})[c1]
    assert payment.payer == "acct-c" and set(payment.shares) == {"acct-b"}

    # acct-b's job ran every step exactly once, on the V100s and then, resumed from its
    # checkpoint, on the K80s.
    log = wait_done(submit, b1, timeout_s=180)
    assert [step for step, _, _ in log.steps] == list(range(1, B_STEPS + 1)), "each step once"
    assert log.nodes() == {0: {"n1"}, 1: {"n3"}}
    moved_at = log.runs()[0][-1]
    assert f"resumed from ckpt-{moved_at} at step {moved_at}" in log.text

    # The ledger: who paid whom, conserved; `hetsched tenants` prints it.
    store = ctl.store()
    try:
        rows = store.ledger()
    finally:
        store.close()
    assert {(r.job, r.payer, r.owner) for r in rows} >= {
        (b1, "acct-b", "acct-a"),
        (c1, "acct-c", "acct-b"),
    }
    assert conserved(rows)
    sums = totals(rows)
    shown = ctl.command("tenants")
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[0]: line for line in shown.stdout.splitlines() if line.strip()}
    assert lines["acct-a"].split()[1] == "v100x2" and lines["acct-b"].split()[1] == "k80x4"
    assert f"{sums['acct-a'].received:.2f}" in lines["acct-a"]
    assert f"{sums['acct-c'].paid:.2f}" in lines["acct-c"]
    assert lines["acct-c"].split()[1] == "-"  # no quota
