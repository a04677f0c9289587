"""A small, deterministic PyTorch training job that uses slurm-hetsched's job-side wrapper.

It trains a 3-layer MLP (with dropout, an Adam optimizer and an LR schedule, so every kind of
state a real job has must survive a move) on a synthetic classification problem generated
here from the seed. It runs in seconds on a CPU. Submit it with sbatch_templates/train.sbatch,
or run it locally:

    python examples/train_mlp.py --steps 300 --seed 0

Each step prints one line `step=<n> loss=... node=... restart=...`; the end prints
`final steps=<n> params_sha256=<hex>`, a digest of the exact bits of every parameter, so two
runs can be compared (a moved run must match an uninterrupted one). Checkpoint signal, lease,
periodic checkpoints and the state folder come from the HETSCHED_* environment variables
(docs/job-side.md).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import signal
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from slurm_hetsched.wrapper import JobEnvironment, ResumableSampler, TorchTrainer

FEATURES, CLASSES, SAMPLES = 32, 10, 2048


def make_data(seed: int) -> TensorDataset:
    """A fixed synthetic dataset: labels from a random teacher network, plus label noise."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=generator)
    teacher = torch.randn(FEATURES, CLASSES, generator=generator)
    y = torch.tanh(x @ teacher) + 0.3 * torch.randn(SAMPLES, CLASSES, generator=generator)
    return TensorDataset(x, y.argmax(dim=1))


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, 128),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(128, 128),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(128, CLASSES),
    )


def params_digest(model: nn.Module) -> str:
    """SHA-256 over the exact bytes of every parameter, in state_dict order."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps (default 300)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data, model and order")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--step-time-s",
        type=float,
        default=0.0,
        help="pad every step to at least this long (a stand-in for a bigger model, so that a "
        "test can signal the job mid-training); does not change the result",
    )
    parser.add_argument(
        "--ignore-checkpoint-signal",
        action="store_true",
        help="ignore the checkpoint signal (a job that does not cooperate; for tests)",
    )
    parser.add_argument("--final-out", type=Path, help="also save the final state_dict here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("HETSCHED_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Bit-identical results across runs and restarts: one thread, deterministic kernels.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)

    env = JobEnvironment.from_environ()
    if args.ignore_checkpoint_signal:
        env = _without_checkpoint_signal(env)

    dataset = make_data(args.seed)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=ResumableSampler(len(dataset), seed=args.seed),
    )
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100, gamma=0.5)
    loss_fn = nn.CrossEntropyLoss()
    extras: dict[str, float] = {"best_loss": float("inf")}

    with TorchTrainer(
        model,
        optimizer,
        total_steps=args.steps,
        lr_scheduler=scheduler,
        extras=extras,
        env=env,
    ) as trainer:
        where = f"node={env.node} restart={env.restart_count}"
        for x, y in trainer.batches(loader):
            started = time.monotonic()
            model.train()
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            extras["best_loss"] = min(extras["best_loss"], loss.item())
            print(f"step={trainer.step + 1} loss={loss.item():.6f} {where}", flush=True)
            pad = args.step_time_s - (time.monotonic() - started)
            if pad > 0:
                time.sleep(pad)
    digest = params_digest(model)
    print(f"final steps={trainer.step} params_sha256={digest}", flush=True)
    if args.final_out is not None:
        torch.save(model.state_dict(), args.final_out)
    return 0


def _without_checkpoint_signal(env: JobEnvironment) -> JobEnvironment:
    """The same environment with the checkpoint signal ignored, not handled."""
    import dataclasses

    if env.checkpoint_signal is not None:
        signal.signal(env.checkpoint_signal, signal.SIG_IGN)
    return dataclasses.replace(env, checkpoint_signal=None)


if __name__ == "__main__":
    sys.exit(main())
