"""hadar moves a 3-rank job between mixed and plain placements on the dev cluster, every move
decided by its own rounds, driven by other jobs arriving and leaving and by nodes drained:

1. n2 drained, 3 of n3's 4 K80s busy with another job: the only 3 GPUs are n1's two V100s and
   one K80 on n3, so hadar places the job there, a heterogeneous job (both components in
   squeue with their GRES);
2. the other job ends and n1 is drained: 3 x k80 on n3, re-submitted as a plain job; the
   controller is killed between that re-submission and the old job's cancel, and its restart
   leaves exactly one job; the round after it keeps the placement and touches nothing;
3. n1 and n2 back, n3 drained: a mixed placement again, over n1 and n2.

The job trains every step exactly once, three ranks throughout, and ends bit-identical to an
uninterrupted 3-rank run (examples/train_ddp.py keeps the global batch over its ranks). The
checkpoint signal goes to the batch shell, as every move's (`scancel -b`): the template relays
it to all three ranks through srun. With `-s` the test prints the last re-submission's cycle,
from the ack to the new job training.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from slurm_hetsched.slurm import CliSlurmBackend, GpuRequest, JobOptions, SlurmJob
from slurm_hetsched.wrapper.files import state_folder

from .conftest import (
    DDP_STEPS,
    TRAIN_DDP,
    Submitter,
    job_environment,
    render_template,
    wait_for,
)
from .controller_harness import LiveController, drained, wait_settled
from .test_controller import controller_for

STEP = re.compile(r"^step=(\d+) .*ranks=(\d+) node=(\S+) restart=(\d+)$", re.MULTILINE)
DIGEST = re.compile(r"^final steps=(\d+) .*params_sha256=([0-9a-f]{64})$", re.MULTILINE)
HELDOUT = re.compile(r"^final steps=(\d+) heldout_loss=([\d.]+) ", re.MULTILINE)
# Steps/s of 3-GPU jobs of the test's class (the shipped table has no 3-GPU entries).
TABLE = {
    "format": "hetsched-throughputs/1",
    "source": "test: a 3-rank job, fastest on v100",
    "throughputs": {
        "ddp": {"3": {"v100": 3.0, "p100": 2.0, "k80": 1.0}},
        # An elastic job: on 3 K80s the table says three times the speed of 2 (what the test
        # needs: growing clearly pays, whatever the machine's own speed).
        "ddp-elastic": {"2": {"k80": 4.0}, "3": {"k80": 12.0}},
    },
}
RESUBMITTED = re.compile(r"job (\d+) replaced by job (\d+)")


def _resume(backend: CliSlurmBackend, nodes: list[str]) -> None:
    for node in nodes:
        backend.cli.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])


def _drain(backend: CliSlurmBackend, nodes: list[str]) -> None:
    for node in nodes:
        backend.cli.run(
            ["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=hetsched-test"]
        )


def _components(backend: CliSlurmBackend, key: str) -> list[SlurmJob]:
    """The active Slurm records (every component) of the managed job `key`, leader first."""
    records = []
    for job in backend.list_jobs():
        pairs = [p.strip() for p in job.comment.partition(":")[2].split(";")]
        if job.state.is_active and (job.job_id == key or f"key={key}" in pairs):
            records.append(job)
    return sorted(records, key=lambda j: j.het_job_offset or 0)


def _one_job(backend: CliSlurmBackend, ctl: LiveController, key: str) -> list[SlurmJob]:
    """The job's records once exactly one Slurm job carries the key and it is running."""

    def probe() -> list[SlurmJob] | None:
        records = _components(backend, key)
        ids = {r.het_job_id or r.job_id for r in records}
        if len(ids) == 1 and all(r.state.value == "RUNNING" for r in records):
            return records
        return None

    try:
        return wait_for(probe, f"job {key} running as one Slurm job", 120, every_s=0.5)
    except BaseException:
        status, rounds = ctl.command("status"), ctl.command("rounds", "--job", key)
        print(status.stdout, status.stderr, rounds.stdout, rounds.stderr, sep="\n")
        print(*_components(backend, key), sep="\n")
        raise


def _logs(folder: Path) -> str:
    """Every job's log in the folder, in job id order (slurm-9.out before slurm-10.out)."""
    files = sorted(folder.glob("slurm-*.out"), key=lambda p: int(p.stem.split("-")[1]))
    return "".join(p.read_text() for p in files)


def _why_not(backend: CliSlurmBackend, job_id: str, logs: str) -> str:
    """What Slurm says of a job that did not complete (state, reason, exit codes), the end of
    the logs without the step lines, and the last step line."""
    shown = backend.cli.run(["scontrol", "show", "job", job_id])
    lines = logs.splitlines()
    steps = [line for line in lines if line.startswith("step=")]
    rest = [line for line in lines if not line.startswith("step=")]
    return "\n".join([shown, *rest[-60:], *steps[-1:]])


def _trained_to(state_dir: Path, step: int, logs: Path) -> None:
    def probe() -> bool:
        path = state_dir / "progress.json"
        return path.exists() and int(json.loads(path.read_text()).get("step") or 0) >= step

    try:
        wait_for(probe, f"training past step {step}", 180, every_s=0.3)
    except BaseException:
        for log in sorted(logs.glob("slurm-*.out")):
            print(f"--- {log.name}", log.read_text()[-6000:], sep="\n")
        raise


def _step_now(state_dir: Path) -> int:
    return int(json.loads((state_dir / "progress.json").read_text()).get("step") or 0)


def _hadar(tmp_path: Path, slurm_conf: str, state_root: Path, **options: float) -> LiveController:
    """The real controller running hadar on the test's table, rounds by hand (`once`)."""
    table = tmp_path / "throughputs.json"
    table.write_text(json.dumps(TABLE))
    return controller_for(
        tmp_path,
        slurm_conf,
        state_root,
        policy="hadar",
        round_s=4.0,
        throughputs=table,
        resubmit_environment={"HETSCHED_PYTHON": sys.executable, "SLURM_CONF": slurm_conf},
        policy_options=options or None,
    )


def _other_job_on_k80s(submit: Submitter, count: int) -> str:
    """Another user's kind of job, not managed, holding `count` of n3's K80s until cancelled."""
    other = submit(
        "#!/bin/bash\nexec sleep 900\n",
        JobOptions(gpus=GpuRequest(count, "k80"), nodelist="n3", job_name="other"),
    )
    submit.wait_state(other, "RUNNING")
    return other


def _ddp_script(spec: str, step_time_s: float = 0.15) -> str:
    return render_template(
        ["--steps", str(DDP_STEPS), "--step-time-s", str(step_time_s)],
        script=TRAIN_DDP,
        comment=f"hetsched:{spec};steps={DDP_STEPS}",
    )


def test_hadar_moves_a_three_rank_job_between_mixed_and_plain_placements(
    submit: Submitter,
    backend: CliSlurmBackend,
    slurm_conf: str,
    state_root: Path,
    tmp_path: Path,
    three_rank_digest: str,
) -> None:
    ctl = _hadar(tmp_path, slurm_conf, state_root)
    other = _other_job_on_k80s(submit, 3)
    # Slow enough steps that the job is still training at the third placement, after two
    # re-submissions and a controller restart, with both dev clusters busy (at 0.15 s a step
    # it once finished first on a loaded machine).
    script = _ddp_script("class=ddp;gpus=3", step_time_s=0.4)
    environment = job_environment(state_root, HETSCHED_CHECKPOINT_EVERY_S="0")
    errors = str(submit.folder / "errors-%j.txt")
    key = submit(
        script,
        JobOptions(gpus=GpuRequest(3), export=environment, export_all=False,
                   chdir=str(submit.folder), error=errors, extra=(("time", "30"),)),
    )  # fmt: skip
    state_dir = state_folder(state_root, os.geteuid(), key)

    # 1. Mixed: n1's V100s and the K80 left on n3.
    with drained(backend, ["n2"]):
        ctl.once()
        parts = _one_job(backend, ctl, key)
        submit.job_ids.append(parts[0].job_id)
        assert [(p.nodes, p.gres_detail[0].split("(")[0]) for p in parts] == [
            ("n1", "gpu:v100:2"),
            ("n3", "gpu:k80:1"),
        ], parts
        first = parts[0].job_id
        assert parts[0].admin_comment.endswith(f" was={key}"), parts[0].admin_comment
        # The whole job came along: its error file and the rest of its 30 minutes (it had not
        # run yet, so all of them), on every component.
        assert {(p.standard_error, p.time_limit_min) for p in parts} == {(errors, 30)}, parts
        _trained_to(state_dir, 10, submit.folder)

        # 2. The other job leaves and n1 is drained: 3 x k80 on n3, a plain job. The
        # controller dies between the re-submission and the cancel of the old job.
        backend.cancel(other)
        _drain(backend, ["n1"])
        try:
            done = ctl.once(failpoint="before:cancel")
            assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
            restarted = ctl.once()  # reconciles: cancels the old job, the new one is placed
            assert restarted.returncode == 0, restarted.stderr[-3000:]
            (plain,) = _one_job(backend, ctl, key)
            submit.job_ids.append(plain.job_id)
            assert plain.het_job_id is None and plain.nodes == "n3"
            # Its limit is what the mixed run left of the 30 minutes: at least a minute less.
            assert plain.standard_error == errors
            assert plain.time_limit_min is not None and 20 <= plain.time_limit_min <= 29
            assert plain.gres_detail[0].startswith("gpu:k80:3"), plain.gres_detail
            assert backend.job(first).state.value == "CANCELLED"
            # A round that keeps the placement touches nothing.
            before = _actions(ctl)
            ctl.once()
            assert _actions(ctl) == before
            assert [r.job_id for r in _components(backend, key)] == [plain.job_id]
            _trained_to(state_dir, _step_now(state_dir) + 5, submit.folder)
        finally:
            _resume(backend, ["n1"])

    # 3. n3 drained, n1 and n2 back: mixed again, over n1 and n2.
    with drained(backend, ["n3"]):
        ctl.once()
        parts = _one_job(backend, ctl, key)
        submit.job_ids.append(parts[0].job_id)
        assert sorted(p.nodes for p in parts) == ["n1", "n2"], parts
        assert sum(int(p.gres_detail[0].split(":")[2].split("(")[0]) for p in parts) == 3
        last = parts[0].job_id
        # The re-submission's cycle, from the ack to the new job training (for the notes).
        ack = _last_ack(ctl, key)
        cycle = _training_again(state_dir, last, ack.detail_step) - ack.done_s
        print(f"re-submission cycle, ack to training again: {cycle:.1f} s")
        store = ctl.store()
        for a in store.actions(job_key=key):
            if a.finished_at and a.finished_at >= ack.done_s - 1:
                print(f"  {a.kind:<14} done at +{a.finished_at - ack.done_s:.1f} s")
        store.close()
        print(f"  slurm start at +{(backend.job(last).start_time or 0) - ack.done_s:.1f} s")
        wait_settled(backend, [last])
        wait_for(
            lambda: backend.job(last).state.value in ("COMPLETED", "FAILED", "CANCELLED"),
            f"job {last} to finish",
            300,
            every_s=1.0,
        )

    logs = _logs(submit.folder)
    assert backend.job(last).state.value == "COMPLETED", _why_not(backend, last, logs)
    steps = [(int(s), int(r)) for s, r, _, _ in STEP.findall(logs)]
    assert [s for s, _ in steps] == list(range(1, DDP_STEPS + 1)), "every step exactly once"
    assert {r for _, r in steps} == {3}, "three ranks throughout"
    (final,) = DIGEST.findall(logs)
    assert final == (str(DDP_STEPS), three_rank_digest)
    # Who replaced whom: in the journal, in `hetsched rounds`, in the admin comment.
    rounds = ctl.command("rounds", "--job", key)
    assert rounds.returncode == 0, rounds.stderr
    chain = list(dict.fromkeys(RESUBMITTED.findall(rounds.stdout)))  # once per move
    assert [new for _, new in chain] == [first, plain.job_id, last], rounds.stdout
    assert [old for old, _ in chain] == [key, first, plain.job_id], rounds.stdout


@dataclass(frozen=True)
class _Ack:
    detail_step: int
    done_s: float


def _last_ack(ctl: LiveController, key: str) -> _Ack:
    store = ctl.store()
    try:
        acks = [a for a in store.actions(job_key=key) if a.kind == "ack" and a.status == "done"]
    finally:
        store.close()
    found = re.search(r"step (\d+)", acks[-1].outcome)
    assert found and acks[-1].finished_at is not None, acks[-1]
    return _Ack(int(found.group(1)), acks[-1].finished_at)


def _training_again(state_dir: Path, job_id: str, acked_step: int) -> float:
    """When progress.json first shows `job_id` past the acked step (polled: +-0.1 s)."""

    def probe() -> float | None:
        try:
            progress = json.loads((state_dir / "progress.json").read_text())
        except (OSError, ValueError):
            return None
        ahead = int(progress.get("step") or 0) > acked_step
        return time.time() if str(progress.get("job_id")) == job_id and ahead else None

    return wait_for(probe, f"job {job_id} training past step {acked_step}", 120, every_s=0.1)


def _actions(ctl: LiveController) -> list[tuple[str, str, str]]:
    store = ctl.store()
    try:
        return [(a.kind, a.slurm_job_id, a.status) for a in store.actions()]
    finally:
        store.close()


def test_hadar_grows_an_elastic_job_from_two_ranks_to_three_keeping_the_global_batch(
    submit: Submitter,
    backend: CliSlurmBackend,
    slurm_conf: str,
    state_root: Path,
    tmp_path: Path,
    three_rank_run: tuple[str, float],
) -> None:
    """A job of 2 to 3 GPUs (`gpus=2-3`) starts on the 2 K80s left free by another job, and
    when that job ends hadar's next round grows it to 3: re-submitted with one task per GPU,
    it resumes on 3 ranks with the same global batch, every step once, and ends with a
    held-out loss within 2% of an uninterrupted 3-rank run."""
    ctl = _hadar(tmp_path, slurm_conf, state_root, restart_s=1.0, critical=0.0)
    other = _other_job_on_k80s(submit, 2)
    script = _ddp_script("class=ddp-elastic;gpus=2-3;utility=linear;target=1h")
    environment = job_environment(state_root, HETSCHED_CHECKPOINT_EVERY_S="0")
    key = submit(
        script,
        JobOptions(gpus=GpuRequest(2), ntasks=2, export=environment, export_all=False,
                   chdir=str(submit.folder)),
    )  # fmt: skip
    state_dir = state_folder(state_root, os.geteuid(), key)
    with drained(backend, ["n1", "n2"]):
        ctl.once()
        (two,) = _one_job(backend, ctl, key)
        assert (two.job_id, two.nodes, two.gres_detail[0].split("(")[0]) == (
            key,
            "n3",
            "gpu:k80:2",
        )
        _trained_to(state_dir, 10, submit.folder)
        backend.cancel(other)
        wait_for(lambda: backend.job(other).state.value == "CANCELLED", "the other job gone")
        ctl.once()
        (three,) = _one_job(backend, ctl, key)
        submit.job_ids.append(three.job_id)
        assert three.job_id != key and three.gres_detail[0].split("(")[0] == "gpu:k80:3"
        wait_for(
            lambda: backend.job(three.job_id).state.value in ("COMPLETED", "FAILED", "CANCELLED"),
            f"job {three.job_id} to finish",
            300,
            every_s=1.0,
        )
    logs = _logs(submit.folder)
    assert backend.job(three.job_id).state.value == "COMPLETED", _why_not(
        backend, three.job_id, logs
    )
    steps = [(int(s), int(r)) for s, r, _, _ in STEP.findall(logs)]
    assert [s for s, _ in steps] == list(range(1, DDP_STEPS + 1)), "every step exactly once"
    ranks = [r for _, r in steps]
    assert ranks[0] == 2 and ranks[-1] == 3 and ranks == sorted(ranks), "2 ranks, then 3"
    ((done, loss),) = HELDOUT.findall(logs)
    assert int(done) == DDP_STEPS
    assert abs(float(loss) - three_rank_run[1]) <= 0.02 * three_rank_run[1]
