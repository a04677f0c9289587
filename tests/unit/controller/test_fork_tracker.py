"""The job tracker of forked jobs (controller/fork_tracker.py, fork_collect.py, fork_copies.py,
fork_merge.py) on a fake enactor: real state folders, acks written as the wrapper writes them,
the averaging replaced by a recorder (the helper itself: tests/unit/wrapper/test_merge*.py)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from controller_builders import RESNET, TABLE, held, running, slurm_node

from slurm_hetsched.controller.enact import SlurmEnactor
from slurm_hetsched.controller.fork_copies import copy_options
from slurm_hetsched.controller.fork_merge import MergeError, _answer, merge_argv
from slurm_hetsched.controller.fork_tracker import ForkSettings, ForkTracker
from slurm_hetsched.controller.jobview import ManagedJob, SlurmView
from slurm_hetsched.controller.statefiles import JobFolder
from slurm_hetsched.core.fork_plan import CopyRound, ForkState
from slurm_hetsched.core.jobspec import JobSpec
from slurm_hetsched.core.model import ClusterSnapshot, GpuSlice, Node, Placement, RoundPlan
from slurm_hetsched.core.problem import table_rate

UID = os.geteuid()
ROUND_S = 10.0


class FakeSlurm:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.next_id = 500
        self.on_signal: dict[str, Any] = {}

    def write_batch_script(self, job_id: str) -> str:
        return "#!/bin/bash\n#SBATCH --hold\nexec train\n"

    def submit(self, script: str, options: list[Any], *, uid: Any, gid: Any) -> str:
        self.next_id += 1
        self.calls.append(("submit", options[0], uid))
        return str(self.next_id)

    def signal(self, job_id: str, name: str, *, target: str) -> None:
        self.calls.append(("signal", job_id, name))
        if job_id in self.on_signal:
            self.on_signal[job_id]()

    def cancel(self, job_id: str) -> None:
        self.calls.append(("cancel", job_id))

    def release(self, job_id: str) -> None:
        self.calls.append(("release", job_id))


@dataclass
class Settings:
    state_root: Path
    checkpoint_signal: str = "USR2"
    ack_timeout_s: float = 5.0
    poll_s: float = 0.5


@dataclass
class FakeEnactor:
    """What the tracker uses of SlurmEnactor: Slurm, the journal, folders, the clock."""

    settings: Settings
    slurm: FakeSlurm = field(default_factory=FakeSlurm)
    journal: list[tuple[str, str, Any]] = field(default_factory=list)
    now: float = 1000.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def _folder(self, job: ManagedJob) -> JobFolder:
        return JobFolder(self.settings.state_root, UID, job.job_key, copy=job.copy)

    def _begin(self, round_: int, job: ManagedJob, kind: str, detail: dict[str, Any]) -> int:
        self.journal.append(("begin", kind, detail))
        return len(self.journal)

    def _finish(self, action_id: int, ok: bool, outcome: str, kind: str) -> None:
        self.journal.append(("done" if ok else "failed", kind, outcome))

    def _step(
        self, round_: int, job: ManagedJob, kind: str, detail: Any, action: Any, out: Any
    ) -> bool:
        action()
        self.journal.append(("step", kind, detail))
        return True

    fork_sections: Any = None
    _write_placement = SlurmEnactor._write_placement  # the real placement.json, via _folder

    def _resubmit_environment(self, job: ManagedJob) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "HETSCHED_JOB_KEY": job.job_key}


class Registry:
    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}

    def forks(self) -> dict[str, dict[str, Any]]:
        return {k: json.loads(json.dumps(v)) for k, v in self.rows.items()}

    def save_fork(self, key: str, state: Any) -> None:
        self.rows[key] = dict(state)

    def delete_fork(self, key: str) -> None:
        self.rows.pop(key, None)


class Merges:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail = fail

    def __call__(self, key_dir: Path, out_step: int, parts: list[Any], **kw: Any) -> Any:
        self.calls.append({"key_dir": key_dir, "out_step": out_step, "parts": parts} | kw)
        if self.fail:
            raise MergeError("the averaging failed (exit 2): a copy's checkpoint is a link")
        return type("Result", (), {"seconds": 1.5})()


@pytest.fixture
def rig(tmp_path: Path) -> tuple[FakeEnactor, Registry, Merges, ForkTracker]:
    root = tmp_path / "state"
    root.mkdir(mode=0o711)
    enactor = FakeEnactor(Settings(root))
    registry, merges = Registry(), Merges()
    tracker = ForkTracker(
        enactor,  # type: ignore[arg-type]
        registry,
        TABLE,
        ForkSettings(round_s=ROUND_S, fork_max=8),
        merge=merges,
    )
    enactor.fork_sections = tracker.section  # as controller/live.py wires them
    return enactor, registry, merges, tracker


def _copy(
    job_id: str, copy: int, *, run_on: tuple[str, str] | None = None, fork: int = 3, key: str = "k"
) -> ManagedJob:
    comment = f"hetsched:class={RESNET};steps=1000;fork={fork};key={key}" + (
        f";copy={copy}" if copy else ""
    )
    record = (
        running(job_id, run_on[0], run_on[1], comment=comment, user_id=UID)
        if run_on
        else held(job_id, comment=comment, user_id=UID)
    )
    spec = JobSpec(job_class=RESNET, steps=1000, fork=fork, key=key, copy=copy)
    identity = key if copy == 0 else f"{key}#{copy}"
    return ManagedJob(
        key=identity, spec=spec, components=(record,), num_gpus=1, job_key=key, copy=copy
    )


def _view(*jobs: ManagedJob) -> SlurmView:
    nodes = (
        Node("n1", {"v100": 1}),
        Node("n2", {"p100": 1}),
        Node("n3", {"k80": 1}),
    )
    return SlurmView(
        now_s=0.0,
        managed={j.key: j for j in jobs},
        rejected=(),
        nodes=tuple(slurm_node(n.name, dict(n.gpus)) for n in nodes),
        snapshot=ClusterSnapshot(now_s=0.0, nodes=nodes, jobs=()),
    )


def _on(node: str, gpu_type: str) -> Placement:
    return Placement("k", (GpuSlice(node, gpu_type, 1),))


def _rate(gpu_type: str) -> float:
    return table_rate(TABLE, RESNET, gpu_type, 1)


def _ack(root: Path, copy: int, job_id: str, step: int, fork_round: int) -> None:
    folder = root / str(UID) / "k" / (f"copy-{copy}" if copy else "")
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    ack = {"job_id": job_id, "restart_count": 0, "step": step, "checkpoint": f"ckpt-{step}",
           "written_at": 1000.0, "fork_round": fork_round}  # fmt: skip
    (folder / "ack.json").write_text(json.dumps(ack))


def _state(**changes: Any) -> ForkState:
    return replace(ForkState(key="k", uid=UID, gid=None, copies=3, total_steps=1000), **changes)


def test_a_job_asking_for_copies_is_forked_into_as_many_as_nodes_can_run_it(rig: Any) -> None:
    enactor, registry, _, tracker = rig
    job = _copy("10", 0)
    plan = RoundPlan(round=1, start={"k": _on("n1", "v100")})
    assert tracker.before_enact(_view(job), plan) == set()
    state = ForkState.from_json(registry.rows["k"])
    assert (state.copies, state.round, state.merged_step) == (3, 1, 0)
    submitted = [c for c in enactor.slurm.calls if c[0] == "submit"]
    assert [c[1].comment.endswith(f";copy={i}") for i, c in enumerate(submitted, 1)] == [True] * 2
    options = submitted[1][1]
    assert options.hold and options.job_name == "job10.copy2" and options.nodes == 1
    assert options.export["HETSCHED_COPY"] == "2" and options.export["HETSCHED_JOB_KEY"] == "k"
    # Copy 0 alone in the first round: a round of its V100's steps, from the initial model.
    section = tracker.section(job)
    assert section == {
        "round": 1, "copy": 0, "from": None, "start_step": 0, "data_offset": 0,
        "budget": int(ROUND_S * _rate("v100")), "total_steps": 1000,
    }  # fmt: skip


def test_a_job_is_never_forked_into_more_copies_than_nodes_or_the_site_cap(rig: Any) -> None:
    enactor, registry, _, tracker = rig
    tracker.settings = replace(tracker.settings, fork_max=2)
    tracker.before_enact(_view(_copy("10", 0, fork=64)), RoundPlan(round=1))
    assert registry.rows["k"]["copies"] == 2
    assert len([c for c in enactor.slurm.calls if c[0] == "submit"]) == 1


def test_a_round_is_merged_from_the_copies_that_acked_and_the_lost_copy_comes_back(
    rig: Any,
) -> None:
    enactor, registry, merges, tracker = rig
    root = enactor.settings.state_root
    work = {
        0: CopyRound("10", 200, 0, 60),
        1: CopyRound("11", 200, 60, 36),
        2: CopyRound("12", 200, 96, 24),
    }
    registry.save_fork(
        "k", _state(round=3, merged_step=200, merged="merged/ckpt-200", work=work).to_json()
    )
    _ack(root, 0, "10", 260, 3)
    _ack(root, 1, "11", 236, 3)
    # Copy 2 was killed mid-round: gone from Slurm, no ack. Its budget goes back to the job.
    copies = (_copy("10", 0, run_on=("n1", "v100")), _copy("11", 1, run_on=("n2", "p100")))
    plan = RoundPlan(round=9, keep={"k": _on("n1", "v100"), "k#1": _on("n2", "p100")})
    tracker.before_enact(_view(*copies), plan)
    (merge,) = merges.calls
    key_dir = root / str(UID) / "k"
    assert merge["out_step"] == 296 and merge["uid"] == UID
    assert [(p.folder, p.steps, p.data_end) for p in merge["parts"]] == [
        (key_dir / "ckpt-260", 60, 60),
        (key_dir / "copy-1" / "ckpt-236", 36, 96),
    ]
    state = ForkState.from_json(registry.rows["k"])
    assert (state.merged_step, state.merged, state.round) == (296, "merged/ckpt-296", 4)
    assert set(state.work) == {0, 1} and state.resubmitted == {2: 1}
    assert sum(w.budget for w in state.work.values()) == int(
        ROUND_S * (_rate("v100") + _rate("p100"))
    )
    ((_, options, _),) = [c for c in enactor.slurm.calls if c[0] == "submit"]
    assert options.export["HETSCHED_COPY"] == "2"
    merged = [e for e in enactor.journal if e[1] == "merge"]
    assert merged[0][2]["steps"] == {"0": 60, "1": 36, "2": 0}
    assert merged[-1] == ("done", "merge", "96 steps, merged/ckpt-296 in 1.50 s")


def test_a_copy_still_training_at_the_round_end_is_asked_to_stop_and_counted(rig: Any) -> None:
    enactor, registry, merges, tracker = rig
    root = enactor.settings.state_root
    work = {0: CopyRound("10", 0, 0, 50), 1: CopyRound("11", 0, 50, 30)}
    registry.save_fork("k", _state(round=1, work=work).to_json())
    _ack(root, 0, "10", 50, 1)
    enactor.slurm.on_signal["11"] = lambda: _ack(root, 1, "11", 12, 1)  # stops early
    copies = (_copy("10", 0, run_on=("n1", "v100")), _copy("11", 1, run_on=("n2", "p100")))
    tracker.before_enact(_view(*copies), RoundPlan(round=2, keep={"k": _on("n1", "v100")}))
    assert ("signal", "11", "USR2") in enactor.slurm.calls
    request = json.loads((root / str(UID) / "k" / "copy-1" / "checkpoint_request.json").read_text())
    assert request["job_id"] == "11"
    assert [(p.steps, p.data_end) for p in merges.calls[0]["parts"]] == [(50, 50), (12, 62)]
    assert registry.rows["k"]["merged_step"] == 62


def test_a_failed_averaging_counts_no_step_of_the_round(rig: Any) -> None:
    enactor, registry, _, tracker = rig
    tracker.collector._merge = Merges(fail=True)
    registry.save_fork("k", _state(round=1, work={0: CopyRound("10", 0, 0, 50)}).to_json())
    _ack(enactor.settings.state_root, 0, "10", 50, 1)
    job = _copy("10", 0, run_on=("n1", "v100"))
    tracker.before_enact(_view(job), RoundPlan(round=2, keep={"k": _on("n1", "v100")}))
    state = ForkState.from_json(registry.rows["k"])
    assert (state.merged_step, state.merged, state.round) == (0, None, 2)
    assert (
        "failed",
        "merge",
        "the averaging failed (exit 2): a copy's checkpoint is a link",
    ) in enactor.journal


def test_an_ack_of_another_run_or_round_is_not_counted(rig: Any) -> None:
    enactor, registry, merges, tracker = rig
    root = enactor.settings.state_root
    work = {0: CopyRound("10", 0, 0, 50), 1: CopyRound("11", 0, 50, 30)}
    registry.save_fork("k", _state(round=2, work=work).to_json())
    _ack(root, 0, "10", 50, 2)
    _ack(root, 1, "99", 30, 2)  # another job's ack in copy 1's folder
    copies = (_copy("10", 0, run_on=("n1", "v100")), _copy("11", 1, run_on=("n2", "p100")))
    tracker.before_enact(_view(*copies), RoundPlan(round=3))
    assert [(p.steps, p.data_end) for p in merges.calls[0]["parts"]] == [(50, 50)]


def test_a_finished_job_ends_on_copy_0_and_its_other_copies_are_cancelled(rig: Any) -> None:
    enactor, registry, _, tracker = rig
    root = enactor.settings.state_root
    work = {0: CopyRound("10", 900, 0, 60), 1: CopyRound("11", 900, 60, 40)}
    registry.save_fork(
        "k", _state(round=5, merged_step=900, merged="merged/ckpt-900", work=work).to_json()
    )
    _ack(root, 0, "10", 960, 5)
    _ack(root, 1, "11", 940, 5)
    copies = (_copy("10", 0, run_on=("n1", "v100")), _copy("11", 1, run_on=("n2", "p100")))
    plan = RoundPlan(round=8, keep={"k": _on("n1", "v100"), "k#1": _on("n2", "p100")})
    left = tracker.before_enact(_view(*copies), plan)
    assert left == {"k", "k#1"}  # the enactor leaves them to the tracker
    state = ForkState.from_json(registry.rows["k"])
    assert state.done and state.merged_step == 1000
    placement = json.loads((root / str(UID) / "k" / "placement.json").read_text())
    assert placement["fork"] == {
        "round": 6, "copy": 0, "from": "merged/ckpt-1000", "start_step": 1000,
        "data_offset": 0, "budget": 0, "total_steps": 1000,
    }  # fmt: skip
    assert (root / str(UID) / "k" / "resume_request.json").exists()
    assert ("cancel", "11") in enactor.slurm.calls
    # Once every copy left Slurm, the job's state goes too.
    tracker.before_enact(_view(), RoundPlan(round=9))
    assert registry.rows == {}


def test_a_copy_kept_on_its_gpus_takes_up_the_next_round_in_place(rig: Any) -> None:
    enactor, registry, _, tracker = rig
    root = enactor.settings.state_root
    registry.save_fork("k", _state(round=1, work={1: CopyRound("11", 0, 0, 30)}).to_json())
    _ack(root, 1, "11", 30, 1)
    job = _copy("11", 1, run_on=("n2", "p100"))
    plan = RoundPlan(round=2, keep={"k#1": _on("n2", "p100")})
    view = _view(job)
    tracker.before_enact(view, plan)
    from slurm_hetsched.controller.enact_steps import EnactOutcome

    tracker.after_enact(view, plan, EnactOutcome(kept=["k#1"]))
    folder = root / str(UID) / "k" / "copy-1"
    placement = json.loads((folder / "placement.json").read_text())
    assert placement["gpu_type"] == "p100" and placement["fork"]["round"] == 2
    assert placement["fork"]["from"] == "merged/ckpt-30"
    assert json.loads((folder / "resume_request.json").read_text())["job_id"] == "11"


def test_the_merge_helper_gets_an_argv_list_and_its_answer_is_checked(tmp_path: Path) -> None:
    from slurm_hetsched.controller.fork_merge import CopyCheckpoint

    argv = merge_argv(
        "py", tmp_path, 96, [CopyCheckpoint(tmp_path / "ckpt-60", 60, 60)], as_root=False
    )
    assert argv == ["py", "-m", "slurm_hetsched.wrapper.merge", "--key-dir", str(tmp_path),
                    "--out-step", "96", "--copy", f"{tmp_path / 'ckpt-60'}:60:60"]  # fmt: skip
    assert _answer('{"merged": "merged/ckpt-96", "step": 96}\n', 1.0).step == 96
    for bad in ("", "not json", '{"merged": "/etc/x", "step": 1}', '{"merged": "../x", "step": 1}'):
        with pytest.raises(MergeError):
            _answer(bad, 1.0)


def test_a_copys_options_keep_the_job_and_name_the_copy() -> None:
    job = _copy("10", 0)
    options = copy_options(job, 4, {"PATH": "/bin"}, 0.0)
    assert options.comment == f"hetsched:class={RESNET};steps=1000;fork=3;key=k;copy=4"
    assert (options.job_name, options.hold, options.requeue) == ("job10.copy4", True, True)
    assert options.export == {"PATH": "/bin", "HETSCHED_COPY": "4"} and not options.export_all


def test_the_copies_of_every_job_still_training_are_stopped_at_once_one_wait_for_all(
    rig: Any,
) -> None:
    """Two forked jobs, each with a copy that never acks: both are signalled before the wait,
    and the round waits one ack timeout, not one per job."""
    enactor, registry, merges, tracker = rig
    root = enactor.settings.state_root
    for key, ids in (("k", ("10", "11")), ("j", ("20", "21"))):
        work = {0: CopyRound(ids[0], 0, 0, 50), 1: CopyRound(ids[1], 0, 50, 30)}
        registry.save_fork(key, replace(_state(round=1, work=work), key=key).to_json())
    _ack(root, 0, "10", 50, 1)
    folder = root / str(UID) / "j"
    folder.mkdir(parents=True, mode=0o700)
    (folder / "ack.json").write_text(
        json.dumps(
            {"job_id": "20", "restart_count": 0, "step": 40, "written_at": 1.0, "fork_round": 1}
        )
    )
    jobs = (
        _copy("10", 0, run_on=("n1", "v100")),
        _copy("11", 1, run_on=("n2", "p100")),
        _copy("20", 0, run_on=("n3", "k80"), key="j"),
        _copy("21", 1, run_on=("n2", "p100"), key="j"),
    )
    started = enactor.now
    tracker.before_enact(_view(*jobs), RoundPlan(round=2))
    signals = [c[1] for c in enactor.slurm.calls if c[0] == "signal"]
    assert signals == ["11", "21"]
    assert enactor.now - started == pytest.approx(enactor.settings.ack_timeout_s, abs=0.5)
    assert sorted(c["out_step"] for c in merges.calls) == [40, 50]  # the others' steps


def test_a_copys_admin_comment_names_the_copy() -> None:
    from slurm_hetsched.controller.admin_comment import format_admin_comment

    fields = {"round_": 3, "placement": _on("n3", "k80"), "share": {}, "priority": None}
    assert format_admin_comment(**fields, reason="", copy=2).startswith("hetsched r=3 copy=2 k80")
    assert "copy=" not in format_admin_comment(**fields, reason="")
