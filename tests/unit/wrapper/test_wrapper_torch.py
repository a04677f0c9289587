"""TorchTrainer: a run interrupted and resumed in-process ends bit-identical (no Slurm)."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from wrapper_fakes import FakeClock, make_env, no_gpus

import slurm_hetsched.wrapper.safe_unpickle as safe_unpickle
from slurm_hetsched.wrapper.session import Terminated

# torch is optional (the `torch` extra): without it these tests skip, and under CI fail.
torch = pytest.importorskip("torch")
import torch.multiprocessing as mp  # noqa: E402
import torch.optim.lr_scheduler as sched  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from slurm_hetsched.wrapper import ResumableSampler, TorchTrainer  # noqa: E402

SAMPLES, BATCH = 100, 16  # 7 batches per epoch, the last one short


def digest(model: nn.Module) -> str:
    out = hashlib.sha256()
    for tensor in model.state_dict().values():
        out.update(tensor.detach().contiguous().numpy().tobytes())
    return out.hexdigest()


def build(seed: int = 0) -> tuple[nn.Module, Any, Any, Any, DataLoader[Any]]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.7)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=3)
    generator = torch.Generator().manual_seed(seed)
    data = TensorDataset(
        torch.randn(SAMPLES, 8, generator=generator), torch.randn(SAMPLES, 1, generator=generator)
    )
    loader = DataLoader(data, batch_size=BATCH, sampler=ResumableSampler(SAMPLES, seed=seed))
    return model, optimizer, scheduler, scaler, loader


def raise_signal(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(0.01)


def run(
    state_dir: Path,
    total: int,
    *,
    signal_at: int | None = None,
    restart: int = 0,
    on_step: Callable[[TorchTrainer], None] | None = None,
) -> tuple[str, TorchTrainer, dict[str, Any]]:
    """Train to `total` steps; with `signal_at`, checkpoint there and stop (as if moved)."""
    model, optimizer, scheduler, scaler, loader = build()
    clock = FakeClock()
    # A paused job is requeued: SIGTERM at its first poll.
    clock.on_sleep = lambda n: raise_signal(signal.SIGTERM)
    extras: dict[str, Any] = {"seen": []}
    trainer = TorchTrainer(
        model,
        optimizer,
        total_steps=total,
        lr_scheduler=scheduler,
        scaler=scaler,
        extras=extras,
        env=make_env(state_dir, restart_count=restart),
        gpu_lookup=no_gpus,
        clock=clock.monotonic,
        wall=clock.wall,
        sleep=clock.sleep,
    )
    try:
        with trainer:
            for x, y in trainer.batches(loader):
                # Every RNG a training step may draw from: dropout (torch), Python, NumPy.
                noise = random.random() * 1e-3 + float(np.random.rand()) * 1e-3
                loss = ((model(x) - y) ** 2).mean() + noise
                optimizer.zero_grad()
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                scheduler.step()
                extras["seen"].append(trainer.step)
                if on_step is not None:
                    on_step(trainer)
                if signal_at is not None and trainer.step + 1 == signal_at:
                    raise_signal(signal.SIGUSR2)
    except Terminated:
        pass
    return digest(model), trainer, extras


def scramble_rngs() -> None:
    """What a fresh process would have: different RNG states everywhere."""
    torch.manual_seed(12345)
    random.seed(12345)
    np.random.seed(12345)


def test_interrupted_runs_end_bit_identical(tmp_path: Path) -> None:
    total = 30
    expected, reference, reference_extras = run(tmp_path / "reference", total)
    state = tmp_path / "moved"
    # Stop mid-epoch (step 10), exactly at an epoch's end (step 14), and mid-epoch again.
    for restart, stop in enumerate((10, 14, 23)):
        scramble_rngs()
        _, trainer, _ = run(state, total, signal_at=stop, restart=restart)
        assert trainer.step == stop and (state / f"ckpt-{stop}" / "COMMITTED").is_file()
    scramble_rngs()
    final, trainer, extras = run(state, total, restart=3)
    assert trainer.session.resumed_from == state / "ckpt-23"
    assert final == expected
    assert extras == reference_extras, "user extras restored in place"
    # Power-of-two loss scales cancel exactly, so the scaler's own state is compared too.
    assert trainer.scaler.state_dict() == reference.scaler.state_dict()
    assert trainer.lr_scheduler.state_dict() == reference.lr_scheduler.state_dict()


def test_steps_loop_without_a_loader(tmp_path: Path) -> None:
    def train(state: Path, stop: int | None, restart: int) -> str:
        torch.manual_seed(0)
        model = nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        clock = FakeClock()
        clock.on_sleep = lambda n: raise_signal(signal.SIGTERM)
        try:
            with TorchTrainer(
                model,
                optimizer,
                total_steps=12,
                gpu_lookup=no_gpus,
                env=make_env(state, restart_count=restart),
                clock=clock.monotonic,
                wall=clock.wall,
                sleep=clock.sleep,
            ) as trainer:
                for step in trainer.steps():
                    x = torch.randn(8, 4)
                    loss = model(x).pow(2).mean()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    if stop is not None and step + 1 == stop:
                        raise_signal(signal.SIGUSR2)
        except Terminated:
            pass
        return digest(model)

    expected = train(tmp_path / "a", None, 0)
    train(tmp_path / "b", 5, 0)
    scramble_rngs()
    assert train(tmp_path / "b", None, 1) == expected


def test_missing_state_for_a_given_object_is_an_error(tmp_path: Path) -> None:
    model = nn.Linear(2, 1)
    with TorchTrainer(model, total_steps=1, env=make_env(tmp_path), gpu_lookup=no_gpus) as t:
        t.checkpoint()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="no optimizer state"):
        TorchTrainer(
            model, optimizer, total_steps=1, env=make_env(tmp_path), gpu_lookup=no_gpus
        ).__enter__()


def test_sampler_order_and_position() -> None:
    sampler = ResumableSampler(10, seed=3)
    epoch0 = list(sampler)
    assert sorted(epoch0) == list(range(10)) and list(sampler) == epoch0
    sampler.set_epoch(1)
    epoch1 = list(sampler)
    assert epoch1 != epoch0
    sampler.set_position(1, 4)
    assert len(sampler) == 6 and list(sampler) == epoch1[4:]
    shards = [
        ResumableSampler(10, seed=3, num_replicas=3, rank=r).epoch_indices(0) for r in range(3)
    ]
    assert [len(s) for s in shards] == [4, 4, 4]
    assert set().union(*shards) == set(range(10))


# ------------------------------------------------------------------- the whole state, safely
@dataclass(frozen=True, slots=True)
class RunConfig:
    """A user type in extras (registered with safe_types=)."""

    name: str
    warmup: int


SCHEDULERS: dict[str, Callable[[Any], Any]] = {
    "step": lambda opt: sched.StepLR(opt, step_size=3, gamma=0.5),
    "lambda": lambda opt: sched.LambdaLR(opt, lambda epoch: 0.95**epoch),
    "one_cycle": lambda opt: sched.OneCycleLR(opt, max_lr=0.1, total_steps=50),
    "cosine": lambda opt: sched.CosineAnnealingLR(opt, T_max=7),
    "sequential": lambda opt: sched.SequentialLR(
        opt,
        [sched.LinearLR(opt, 0.1, total_iters=3), sched.CosineAnnealingLR(opt, T_max=5)],
        milestones=[3],
    ),
}


def assert_same(a: Any, b: Any, where: str = "state") -> None:
    """Equal values, tensors and arrays bit for bit (dtype and shape included)."""
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert a.contiguous().view(-1).view(torch.uint8).equal(b.view(-1).view(torch.uint8))
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{index}]")
    else:
        assert a == b, where


@pytest.mark.parametrize("scheduler", list(SCHEDULERS))
@pytest.mark.parametrize("optimizer_kind", ["adam", "sgd"])
def test_the_whole_trainer_state_loads_bit_identically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, optimizer_kind: str, scheduler: str
) -> None:
    """Everything a TorchTrainer saves loads under the allow-list, exactly."""
    monkeypatch.setattr(safe_unpickle, "_registered", {})

    def make(seed: int) -> TorchTrainer:
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
        if optimizer_kind == "adam":
            optimizer: Any = torch.optim.Adam(model.parameters(), lr=1e-2, amsgrad=True)
        else:
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
        return TorchTrainer(
            model,
            optimizer,
            total_steps=6,
            lr_scheduler=SCHEDULERS[scheduler](optimizer),
            scaler=torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=2),
            stateful={"sampler": ResumableSampler(40, seed=seed)},
            extras={},
            safe_types=[RunConfig],
            env=make_env(tmp_path),
            gpu_lookup=no_gpus,
        )

    first = make(0)
    with first:
        first.stateful["sampler"].set_position(1, 5)
        first.extras.update(
            best=np.float64(0.25),
            count=np.int64(6),
            flag=np.bool_(True),
            history=[np.float32(1.5), 2.0],
            config=RunConfig("a", 3),
        )
        optimizer, scaler = first.optimizer, first.scaler
        assert optimizer is not None
        for _ in first.steps():
            loss = first.model(torch.randn(5, 4)).pow(2).mean()
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            first.lr_scheduler.step()
            np.random.rand()
            random.random()
        first.checkpoint()
        rngs = (random.getstate(), torch.get_rng_state(), np.random.get_state())
    scramble_rngs()
    second = make(1)
    with second:
        assert second.step == 6 and second.session.resumed_from is not None
        assert_same(random.getstate(), rngs[0], "python rng")
        assert_same(torch.get_rng_state(), rngs[1], "torch rng")
        assert_same(np.random.get_state(), rngs[2], "numpy rng")
    assert_same(second.model.state_dict(), first.model.state_dict(), "model")
    assert first.optimizer is not None and second.optimizer is not None
    assert_same(second.optimizer.state_dict(), first.optimizer.state_dict(), "optimizer")
    assert_same(second.lr_scheduler.state_dict(), first.lr_scheduler.state_dict(), "scheduler")
    assert_same(second.scaler.state_dict(), first.scaler.state_dict(), "scaler")
    assert_same(second.stateful["sampler"].state_dict(), {"epoch": 1, "offset": 5, "seed": 0})
    assert_same(second.extras, first.extras, "extras")


# ------------------------------------------------------------------- distributed (gloo)
def _ddp_worker(rank: int, world: int, init_file: str, root: str, results: Any) -> None:
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world
    )
    try:
        results.put((rank, _ddp_runs(rank, Path(root))))
    finally:
        torch.distributed.destroy_process_group()


def _ddp_runs(rank: int, root: Path) -> dict[str, Any]:
    writes: list[int] = []

    def train(state: Path, restart: int, stop_at: int | None) -> str:
        torch.manual_seed(100 + rank)  # ranks draw different dropout masks
        model = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.3), nn.Linear(16, 1))
        with torch.no_grad():  # identical start on every rank
            for p in model.parameters():
                p.copy_(torch.linspace(-1, 1, p.numel()).reshape(p.shape))
        ddp = nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
        env = make_env(state, rank=rank, world_size=2, restart_count=restart)
        trainer = TorchTrainer(
            ddp, optimizer, total_steps=10, env=env, gpu_lookup=no_gpus, checkpoint_every_steps=4
        )
        original = trainer.session.store.save
        trainer.session.store.save = lambda *a, **k: writes.append(rank) or original(*a, **k)
        try:
            with trainer:
                for step in trainer.steps():
                    loss = ddp(torch.randn(8, 4)).pow(2).mean()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    if stop_at is not None and step + 1 == stop_at and rank == 1:
                        raise_signal(signal.SIGTERM)  # only rank 1 is told; both must stop
        except Terminated:
            pass
        return digest(model)

    expected = train(root / "a", 0, None)
    train(root / "b", 0, 6)
    return {"expected": expected, "resumed": train(root / "b", 1, None), "writes": writes}


def test_distributed_only_rank_zero_writes_and_all_ranks_resume(tmp_path: Path) -> None:
    context = mp.get_context("spawn")
    results = context.Queue()
    processes = [
        context.Process(
            target=_ddp_worker, args=(rank, 2, str(tmp_path / "init"), str(tmp_path), results)
        )
        for rank in range(2)
    ]
    for process in processes:
        process.start()
    outcome = dict(results.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=30)
    assert outcome[0]["writes"] and not outcome[1]["writes"], "only rank 0 writes"
    for rank in (0, 1):
        assert outcome[rank]["resumed"] == outcome[rank]["expected"]
    assert outcome[0]["expected"] == outcome[1]["expected"]
    assert sorted(p.name for p in (tmp_path / "b").glob("ckpt-*")) == ["ckpt-4", "ckpt-8"]
