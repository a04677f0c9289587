"""A forked copy's rounds (HadarE copy mode, wrapper/copymode.py): budget, ack, pause, data
offset, next round, finish; no Slurm."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from fork_helpers import (  # noqa: E402
    CopyRun,
    copy_env,
    params,
    raise_signal,
    write_fork,
    write_resume,
)

from slurm_hetsched.wrapper import merge  # noqa: E402
from slurm_hetsched.wrapper.checkpoint import CheckpointStore  # noqa: E402
from slurm_hetsched.wrapper.env import JobEnvironment, WrapperConfigError  # noqa: E402
from slurm_hetsched.wrapper.files import StateDirError  # noqa: E402
from slurm_hetsched.wrapper.forkfiles import ForkError  # noqa: E402
from slurm_hetsched.wrapper.progress import read_ack, read_progress  # noqa: E402

TOTAL = 40


def run_merge(key: Path, out_step: int, *copies: str) -> None:
    argv = ["--key-dir", str(key), "--out-step", str(out_step), "--allow-root"]
    for item in copies:
        argv += ["--copy", item]
    assert merge.main(argv) == 0


def test_a_copy_trains_exactly_its_budget_then_acks_with_the_round_and_pauses(
    tmp_path: Path,
) -> None:
    key = tmp_path / "42"
    env = copy_env(key, 1)
    write_fork(env.state_dir, round=1, copy=1, budget=9, total_steps=TOTAL)
    run = CopyRun(env, TOTAL).train()
    assert run.terminated, "paused after its budget until the requeue's SIGTERM"
    assert len(run.batches) == 9 and run.trainer.step == 9
    ack = read_ack(env.state_dir)
    assert ack is not None and (ack.step, ack.checkpoint, ack.fork_round) == (9, "ckpt-9", 1)
    assert json.loads((env.state_dir / "ack.json").read_text())["fork_round"] == 1
    assert (env.state_dir / "ckpt-9" / "COMMITTED").is_file()
    assert not list(key.glob("ckpt-*")), "copy 1 writes only into its own folder"
    assert env.key_dir == key and env.state_dir == key / "copy-1"
    assert os.stat(env.state_dir).st_mode & 0o777 == 0o700
    info = CheckpointStore(env.state_dir).latest()
    assert info is not None
    meta = CheckpointStore(env.state_dir).open(info).meta
    assert (meta["fork_round"], meta["fork_end"]) == (1, 9)


def test_the_copies_data_ranges_lie_end_to_end_like_an_unforked_run(tmp_path: Path) -> None:
    unforked = CopyRun(copy_env(tmp_path / "plain", 0), TOTAL).train()
    # 7 batches per epoch: copy 0 reads batches 0-4, copy 1 batches 5-12 (over the epoch end).
    key = tmp_path / "42"
    env0, env1 = copy_env(key, 0), copy_env(key, 1)
    write_fork(env0.state_dir, round=1, copy=0, budget=5, total_steps=TOTAL)
    write_fork(env1.state_dir, round=1, copy=1, data_offset=5, budget=8, total_steps=TOTAL)
    copy0, copy1 = CopyRun(env0, TOTAL).train(), CopyRun(env1, TOTAL).train()
    assert len(copy0.batches) == 5 and len(copy1.batches) == 8
    assert copy0.batches + copy1.batches == unforked.batches[:13]
    assert copy0.batches[0] != copy1.batches[0]


def test_a_resume_starts_the_next_round_from_the_merged_checkpoint(tmp_path: Path) -> None:
    key = tmp_path / "42"
    env = copy_env(key, 1)
    write_fork(env.state_dir, round=1, copy=1, budget=6, total_steps=TOTAL)
    merged_params = {}

    def controller(run: CopyRun, n: int) -> None:
        ack = read_ack(env.state_dir)
        assert ack is not None
        if ack.fork_round == 1 and run.trainer.step == 6:  # end of round 1: merge, round 2
            run.steps_at_pause.append(run.trainer.step)
            run_merge(key, 10, "copy-1/ckpt-6:6:6")
            store = CheckpointStore(key / "merged")
            info = store.latest()
            assert info is not None
            merged_params.update(store.open(info).load_object("state.bin")["model"])
            write_fork(
                env.state_dir,
                round=2,
                copy=1,
                budget=4,
                total_steps=TOTAL,
                start_step=10,
                data_offset=3,
                source="merged/ckpt-10",
            )
            write_resume(env.state_dir, env, run.clock.wall())
        elif ack.fork_round == 2 and len(run.steps_at_pause) == 1:
            # Round 2 done; the old resume request must not end this pause, nor a new one
            # without a newer round: the copy pauses again instead of training on.
            run.steps_at_pause.append(run.trainer.step)
            write_resume(env.state_dir, env, run.clock.wall())
        elif len(run.steps_at_pause) == 2 and n > 40:
            os.kill(os.getpid(), 15)

    run = CopyRun(env, TOTAL, on_pause=controller)
    loaded: list[dict[str, torch.Tensor]] = []
    original_load = run.trainer._load

    def spy(reader):  # type: ignore[no-untyped-def]
        original_load(reader)
        loaded.append(params(run.model))

    run.trainer.session._load = spy
    run.train()
    assert run.steps_at_pause == [6, 14], "round 2: from step 10 to 14, then no further"
    assert len(run.batches) == 6 + 4
    assert all(torch.equal(loaded[0][k], merged_params[k]) for k in merged_params)
    ack = read_ack(env.state_dir)
    assert ack is not None and (ack.step, ack.fork_round, ack.checkpoint) == (14, 2, "ckpt-14")
    progress = read_progress(env.state_dir)
    assert progress is not None and progress["step"] == 14


def test_the_finish_instruction_loads_the_merged_model_and_ends(tmp_path: Path) -> None:
    key = tmp_path / "42"
    env1 = copy_env(key, 1)
    write_fork(env1.state_dir, round=1, copy=1, budget=TOTAL, total_steps=TOTAL)
    copy1 = CopyRun(env1, TOTAL).train()
    assert copy1.trainer.step == TOTAL and copy1.terminated, "a copy never ends by itself"
    run_merge(key, TOTAL, f"copy-1/ckpt-{TOTAL}:{TOTAL}:{TOTAL}")
    env0 = copy_env(key, 0)
    write_fork(
        env0.state_dir,
        round=2,
        copy=0,
        budget=0,
        start_step=TOTAL,
        total_steps=TOTAL,
        source=f"merged/ckpt-{TOTAL}",
    )
    copy0 = CopyRun(env0, TOTAL).train()
    assert not copy0.terminated and copy0.batches == []
    assert copy0.trainer.session.finished and copy0.trainer.step == TOTAL
    final = params(copy0.model)
    assert all(torch.equal(final[k], v) for k, v in params(copy1.model).items())
    progress = read_progress(key)
    assert progress is not None and progress["status"] == "done"


def test_a_copy_restarted_mid_round_goes_on_to_the_same_end(tmp_path: Path) -> None:
    key = tmp_path / "42"
    env = copy_env(key, 2)
    write_fork(env.state_dir, round=3, copy=2, budget=10, start_step=0, total_steps=TOTAL)
    first = CopyRun(env, TOTAL, checkpoint_every_steps=4)

    class Killed(Exception):
        pass

    with pytest.raises(Killed), first.trainer:  # dies after 5 steps; checkpoint at step 4
        for step in first.trainer.steps():
            if step == 5:
                raise Killed
    again = CopyRun(env, TOTAL).train()
    assert again.trainer.session.resumed_from == env.state_dir / "ckpt-4"
    assert len(again.batches) == 6 and again.trainer.step == 10
    ack = read_ack(env.state_dir)
    assert ack is not None and (ack.step, ack.fork_round) == (10, 3)


def test_without_a_fork_nothing_changes(tmp_path: Path) -> None:
    key = tmp_path / "42"
    env = copy_env(key, 1)
    env.state_dir.mkdir(parents=True)
    (env.state_dir / "placement.json").write_text(json.dumps({"round": 4, "gpu_type": "k80"}))
    run = CopyRun(env, 12).train()
    assert len(run.batches) == 12 and run.trainer.session.finished
    assert read_ack(env.state_dir) is None


@pytest.mark.parametrize(
    ("fork", "message"),
    [
        ({"round": 1, "copy": 2, "budget": 3, "total_steps": TOTAL}, "for copy 2"),
        ({"round": 1, "copy": 1, "budget": 3, "total_steps": TOTAL + 1}, "disagree"),
        ({"round": 0, "copy": 1, "budget": 3, "total_steps": TOTAL}, r"fork\.round"),
        ({"round": 1, "copy": 1, "budget": -1, "total_steps": TOTAL}, r"fork\.budget"),
        (
            {"round": 1, "copy": 1, "budget": 3, "total_steps": TOTAL, "from": "../x/ckpt-1"},
            r"fork\.from",
        ),
        (
            {"round": 1, "copy": 1, "budget": 3, "total_steps": TOTAL, "from": "merged/ckpt-7"},
            "does not exist",
        ),
    ],
)
def test_an_unusable_fork_stops_the_copy(tmp_path: Path, fork: dict, message: str) -> None:  # type: ignore[type-arg]
    env = copy_env(tmp_path / "42", 1)
    write_fork(env.state_dir, **fork)
    with pytest.raises(ForkError, match=message):
        CopyRun(env, TOTAL).train()
    progress = read_progress(env.state_dir)
    assert progress is not None and progress["status"] == "failed"


def merged_checkpoint(key: Path, step: int = 6) -> Path:
    """A real consolidated checkpoint of step `step` (copy 1 trained it alone)."""
    env = copy_env(key, 1)
    write_fork(env.state_dir, round=1, copy=1, budget=step, total_steps=TOTAL)
    CopyRun(env, TOTAL).train()
    run_merge(key, step, f"copy-1/ckpt-{step}:{step}:{step}")
    return key / "merged" / f"ckpt-{step}"


def test_a_symlink_in_place_of_merged_is_refused_never_loaded(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    merged_checkpoint(elsewhere)
    key = tmp_path / "42"
    key.mkdir(mode=0o700)
    (key / "merged").symlink_to(elsewhere / "merged")
    env = copy_env(key, 0)
    write_fork(
        env.state_dir,
        round=1,
        copy=0,
        budget=3,
        start_step=6,
        total_steps=TOTAL,
        source="merged/ckpt-6",
    )
    run = CopyRun(env, TOTAL)
    with pytest.raises(ForkError, match="symbolic link"):
        run.train()
    assert run.batches == [] and run.trainer.step == 0


def test_a_merged_checkpoint_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "42"
    real = merged_checkpoint(key)
    real.rename(key / "merged" / "real")
    (key / "merged" / "ckpt-6").symlink_to(key / "merged" / "real")
    env = copy_env(key, 0)
    write_fork(
        env.state_dir,
        round=1,
        copy=0,
        budget=3,
        start_step=6,
        total_steps=TOTAL,
        source="merged/ckpt-6",
    )
    with pytest.raises(ForkError, match="symbolic link"):
        CopyRun(env, TOTAL).train()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another uid")
def test_a_merged_checkpoint_of_another_uid_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "42"
    planted = merged_checkpoint(key)
    os.chown(planted, 12345, 12345)
    env = copy_env(key, 0)
    write_fork(
        env.state_dir,
        round=1,
        copy=0,
        budget=3,
        start_step=6,
        total_steps=TOTAL,
        source="merged/ckpt-6",
    )
    with pytest.raises(ForkError, match="uid 12345"):
        CopyRun(env, TOTAL).train()


def test_an_uncommitted_merged_checkpoint_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "42"
    (merged_checkpoint(key) / "COMMITTED").unlink()
    env = copy_env(key, 0)
    write_fork(
        env.state_dir,
        round=1,
        copy=0,
        budget=3,
        start_step=6,
        total_steps=TOTAL,
        source="merged/ckpt-6",
    )
    with pytest.raises(ForkError, match="not committed"):
        CopyRun(env, TOTAL).train()


def test_a_copy_folder_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "42"
    key.mkdir(mode=0o700)
    (tmp_path / "other").mkdir(mode=0o700)
    (key / "copy-1").symlink_to(tmp_path / "other")
    with pytest.raises(StateDirError, match="link"):
        CopyRun(copy_env(key, 1), TOTAL).train()


def test_the_copy_index_comes_from_hetsched_copy(tmp_path: Path) -> None:
    base = {"HETSCHED_STATE_DIR": str(tmp_path / "k")}
    env = JobEnvironment.from_environ({**base, "HETSCHED_COPY": "3"})
    assert (env.copy, env.state_dir, env.key_dir) == (3, tmp_path / "k" / "copy-3", tmp_path / "k")
    plain = JobEnvironment.from_environ({**base, "HETSCHED_COPY": "0"})
    assert (plain.copy, plain.state_dir, plain.key_dir) == (0, tmp_path / "k", tmp_path / "k")
    assert JobEnvironment.from_environ(base).copy == 0
    for bad in ("64", "-1", "x", "1.5"):
        with pytest.raises(WrapperConfigError, match="HETSCHED_COPY"):
            JobEnvironment.from_environ({**base, "HETSCHED_COPY": bad})


def test_a_checkpoint_signal_stops_the_round_early_and_a_resume_finishes_it(
    tmp_path: Path,
) -> None:
    env = copy_env(tmp_path / "42", 1)
    write_fork(env.state_dir, round=2, copy=1, budget=10, start_step=0, total_steps=TOTAL)
    acks: list[tuple[int, int | None]] = []

    def controller(run: CopyRun, n: int) -> None:
        ack = read_ack(env.state_dir)
        assert ack is not None
        if not acks or acks[-1] != (ack.step, ack.fork_round):
            acks.append((ack.step, ack.fork_round))
        if ack.step == 4 and n == 1:  # the move is called off: train on in the same round
            write_resume(env.state_dir, env, run.clock.wall())
        elif ack.step == 10:
            raise_signal(signal.SIGTERM)

    run = CopyRun(env, TOTAL, on_pause=controller)
    original = run.trainer.session.step_done

    def step_done(steps: int = 1) -> None:
        if run.trainer.step == 3:  # the signal arrives during the 4th step
            raise_signal(signal.SIGUSR2)
        original(steps)

    run.trainer.session.step_done = step_done  # type: ignore[method-assign]
    run.train()
    assert acks == [(4, 2), (10, 2)], "stopped early, then the round's end; both name round 2"
    assert len(run.batches) == 10


def test_a_done_round_pauses_again_when_the_lease_ends(tmp_path: Path) -> None:
    env = copy_env(tmp_path / "42", 1)
    write_fork(env.state_dir, round=1, copy=1, budget=3, total_steps=TOTAL)

    def requeue_late(run: CopyRun, n: int) -> None:
        if n == 200:  # 40 s of polls: several 5 s leases have ended
            raise_signal(signal.SIGTERM)

    run = CopyRun(env, TOTAL, on_pause=requeue_late, lease_timeout_s=5.0).train()
    assert run.terminated and len(run.batches) == 3 and run.trainer.step == 3


def test_a_new_round_of_no_steps_is_checkpointed_acked_and_paused(tmp_path: Path) -> None:
    key = tmp_path / "42"
    env = copy_env(key, 1)
    write_fork(env.state_dir, round=1, copy=1, budget=4, total_steps=TOTAL)

    def controller(run: CopyRun, n: int) -> None:
        ack = read_ack(env.state_dir)
        assert ack is not None
        if ack.fork_round == 1 and n == 1:
            run_merge(key, 4, "copy-1/ckpt-4:4:4")
            write_fork(env.state_dir, round=2, copy=1, budget=0, start_step=4,
                       total_steps=TOTAL, source="merged/ckpt-4")  # fmt: skip
            write_resume(env.state_dir, env, run.clock.wall())
        elif ack.fork_round == 2:
            raise_signal(signal.SIGTERM)

    run = CopyRun(env, TOTAL, on_pause=controller).train()
    assert run.terminated and len(run.batches) == 4
    ack = read_ack(env.state_dir)
    assert ack is not None and (ack.step, ack.fork_round) == (4, 2)


def test_a_round_checkpointed_before_its_first_batch_keeps_its_data_offset(
    tmp_path: Path,
) -> None:
    unforked = CopyRun(copy_env(tmp_path / "plain", 0), TOTAL).train()
    env = copy_env(tmp_path / "42", 1)
    write_fork(env.state_dir, round=1, copy=1, data_offset=5, budget=8, total_steps=TOTAL)
    request = {"job_id": env.job_id, "restart_count": 0, "requested_at": 1.0}
    (env.state_dir / "checkpoint_request.json").write_text(json.dumps(request))
    first = CopyRun(env, TOTAL).train()  # asked to stop while starting: acks step 0, requeued
    assert first.terminated and first.batches == []
    ack = read_ack(env.state_dir)
    assert ack is not None and (ack.step, ack.fork_round) == (0, 1)
    again = CopyRun(dataclasses.replace(env, restart_count=1), TOTAL).train()
    assert again.batches == unforked.batches[5:13]
