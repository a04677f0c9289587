"""Builders shared by the forked-copy tests (HadarE copy mode and the merge helper)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from wrapper_fakes import FakeClock, make_env, no_gpus

from slurm_hetsched.wrapper import ResumableSampler, TorchTrainer
from slurm_hetsched.wrapper.checkpoint import CheckpointStore
from slurm_hetsched.wrapper.env import JobEnvironment
from slurm_hetsched.wrapper.session import Terminated

SAMPLES, BATCH = 100, 16  # 7 batches per epoch, the last one short
STATE = "state.bin"


def build(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, DataLoader[Any]]:
    """The same initial model in every copy (seeded), SGD with momentum, a loader whose
    batches carry the samples' indices so a test can see which data a copy read."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    generator = torch.Generator().manual_seed(seed)
    data = TensorDataset(
        torch.arange(SAMPLES),
        torch.randn(SAMPLES, 4, generator=generator),
        torch.randn(SAMPLES, 2, generator=generator),
    )
    loader = DataLoader(data, batch_size=BATCH, sampler=ResumableSampler(SAMPLES, seed=seed))
    return model, optimizer, loader


def copy_env(key_dir: Path, copy: int, **overrides: Any) -> JobEnvironment:
    """Copy `copy` of job 42 (copy 0: the job itself, its state folder the key folder)."""
    state_dir = key_dir if copy == 0 else key_dir / f"copy-{copy}"
    return make_env(state_dir, copy=copy, job_id=str(42 + copy), **overrides)


def write_fork(state_dir: Path, *, source: str | None = None, **fork: Any) -> None:
    """placement.json with a `fork` object (as the controller writes it); `source` is its
    `from`."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    payload = {"round": fork["round"], "gpu_type": "v100", "num_gpus": 1, "nodes": ["n3"]}
    defaults = {"from": source, "start_step": 0, "data_offset": 0}
    payload["fork"] = {**defaults, **fork}
    (state_dir / "placement.json").write_text(json.dumps(payload))


def write_resume(state_dir: Path, env: JobEnvironment, at: float) -> None:
    payload = {"job_id": env.job_id, "restart_count": env.restart_count, "requested_at": at}
    (state_dir / "resume_request.json").write_text(json.dumps(payload))


def raise_signal(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(0.01)


class CopyRun:
    """One process of a copy: trains with a TorchTrainer; `on_pause(run, n)` runs at the n-th
    poll of every pause (default: SIGTERM, as a requeue would)."""

    def __init__(
        self,
        env: JobEnvironment,
        total: int,
        on_pause: Callable[[CopyRun, int], None] | None = None,
        **options: Any,
    ) -> None:
        self.env = env
        self.model, self.optimizer, self.loader = build()
        self.clock = FakeClock()
        self.batches: list[list[int]] = []
        self.steps_at_pause: list[int] = []
        self.on_pause = on_pause
        self.clock.on_sleep = self._sleeping
        self.trainer = TorchTrainer(
            self.model,
            self.optimizer,
            total_steps=total,
            env=env,
            gpu_lookup=no_gpus,
            clock=self.clock.monotonic,
            wall=self.clock.wall,
            sleep=self.clock.sleep,
            lease_timeout_s=options.pop("lease_timeout_s", 3600.0),
            **options,
        )
        self.terminated = False

    def _sleeping(self, n: int) -> None:
        if self.on_pause is None:
            raise_signal(signal.SIGTERM)
        else:
            self.on_pause(self, n)

    def train(self) -> CopyRun:
        try:
            with self.trainer:
                for index, x, y in self.trainer.batches(self.loader):
                    self.batches.append(index.tolist())
                    loss = ((self.model(x) - y) ** 2).mean()
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
        except Terminated:
            self.terminated = True
        return self


def params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def trainer_state(
    w: list[float], momentum: list[float], *, tag: str, data: tuple[int, int], **more: Any
) -> dict[str, Any]:
    """A TorchTrainer state (wrapper/torch.py) made by hand: two parameters, SGD momentum."""
    return {
        "format": 1,
        "step": 0,
        "model": OrderedDict(
            w=torch.tensor(w), b=torch.tensor([w[0] * 10]), count=torch.tensor(len(tag))
        ),
        "optimizer": more.pop(
            "optimizer",
            {
                "state": {
                    0: {"momentum_buffer": torch.tensor(momentum)},
                    1: {"momentum_buffer": torch.tensor([momentum[0] * 10])},
                },
                "param_groups": [{"lr": 0.1 if tag == "a" else 0.2, "params": [0, 1]}],
            },
        ),
        "lr_scheduler": {"last_epoch": len(tag) * 7},
        "scaler": None,
        "stateful": {},
        "extras": {"tag": tag},
        "data": {"epoch": data[0], "batch_in_epoch": data[1]},
        "rng": [{"tag": tag}],
        "world_size": 1,
        **more,
    }


def plant(folder: Path, step: int, state: dict[str, Any]) -> str:
    """Commit `state` as `<folder>/ckpt-<step>` with the wrapper's writer."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    CheckpointStore(folder).save(step, lambda w: w.save_object("state.bin", state))
    return f"ckpt-{step}"


def two_copies(key: Path) -> tuple[str, str]:
    """Copy 0 trained 30 steps this round, copy 1 10 steps; copy 1's data range ends last."""
    a = trainer_state([1.0, 2.0], [0.5, -1.0], tag="a", data=(2, 3))
    b = trainer_state([4.0, 8.0], [1.5, 3.0], tag="bb", data=(2, 6))
    plant(key, 130, a)
    plant(key / "copy-1", 110, b)
    return "ckpt-130:30:30", "copy-1/ckpt-110:10:40"


def load_merged(key: Path, step: int) -> dict[str, Any]:
    store = CheckpointStore(key / "merged")
    info = next(i for i in store.checkpoints() if i.step == step)
    state: dict[str, Any] = store.open(info).load_object("state.bin")
    return state
