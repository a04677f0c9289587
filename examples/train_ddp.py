"""A small, deterministic data-parallel training job over several ranks (one per GPU), the
multi-rank example of slurm-hetsched's job-side wrapper (docs/job-side.md, "Multi-rank jobs").

An MLP without dropout learns a regression made here from the seed; a held-out set made the same
way reports the loss at the end. The global batch stays the same whatever the number of ranks:
each rank takes global / ranks samples of every step's block (ResumableSampler shards the same
permutation) and the ranks average their gradients, so a step does the same update on 2 ranks
as on 3 up to the order of floating-point sums. Run it on one machine with

    python examples/train_ddp.py --steps 200                        # one rank
    torchrun --nproc-per-node 3 examples/train_ddp.py --steps 200   # three ranks

or under Slurm with sbatch_templates/train.sbatch (one task per GPU, `srun` across the
components of a heterogeneous job). Rank 0 prints `step=<n> loss=... ranks=... node=...` per
step and at the end `final steps=<n> heldout_loss=<x> params_sha256=<hex>`.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from slurm_hetsched.wrapper import JobEnvironment, ResumableSampler, TorchTrainer
from slurm_hetsched.wrapper.distributed import init_distributed, leave_distributed

FEATURES, HIDDEN, OUTPUTS = 16, 64, 4
TRAIN_SAMPLES, HELDOUT_SAMPLES = 3072, 512


def make_data(seed: int) -> tuple[TensorDataset, TensorDataset]:
    """Training and held-out sets from one teacher network, with noise on the targets."""
    generator = torch.Generator().manual_seed(seed)
    teacher = torch.randn(FEATURES, OUTPUTS, generator=generator) / FEATURES**0.5

    def draw(n: int) -> TensorDataset:
        x = torch.randn(n, FEATURES, generator=generator)
        y = torch.sin(x @ teacher) + 0.1 * torch.randn(n, OUTPUTS, generator=generator)
        return TensorDataset(x, y)

    return draw(TRAIN_SAMPLES), draw(HELDOUT_SAMPLES)


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
        nn.Linear(HIDDEN, OUTPUTS),
    )  # fmt: skip


def average_gradients(model: nn.Module, world_size: int) -> None:
    """The mean of every rank's gradients, one all-reduce per parameter.

    Not DistributedDataParallel: DDP regroups gradients into new buckets after its first
    iteration, so the first step after a restart sums them in another grouping and the result
    may differ in the last bit from an uninterrupted run (docs/job-side.md)."""
    if world_size == 1:
        return
    for parameter in model.parameters():
        if parameter.grad is not None:
            dist.all_reduce(parameter.grad)
            parameter.grad /= world_size


def params_digest(model: nn.Module) -> str:
    """SHA-256 over the exact bytes of every parameter, in state_dict order."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data, model and order")
    parser.add_argument(
        "--global-batch", type=int, default=48, help="samples per step over all ranks (48)"
    )
    parser.add_argument(
        "--step-time-s",
        type=float,
        default=0.0,
        help="pad every step to at least this long (a stand-in for a bigger model, so that a "
        "test can move the job mid-training); does not change the result",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("HETSCHED_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)
    ranks = init_distributed()
    if args.global_batch % ranks.world_size:
        print(
            f"--global-batch {args.global_batch} does not divide over {ranks.world_size} ranks",
            file=sys.stderr,
        )
        return 2
    env = JobEnvironment.from_environ()
    train, heldout = make_data(args.seed)
    loader = DataLoader(
        train,
        batch_size=args.global_batch // ranks.world_size,
        sampler=ResumableSampler(
            len(train), seed=args.seed, num_replicas=ranks.world_size, rank=ranks.rank
        ),
    )
    model = make_model()  # the same initial weights on every rank (same seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.MSELoss()
    with TorchTrainer(model, optimizer, total_steps=args.steps, env=env) as trainer:
        where = f"ranks={ranks.world_size} node={env.node} restart={env.restart_count}"
        for x, y in trainer.batches(loader):
            started = time.monotonic()
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            average_gradients(model, ranks.world_size)
            optimizer.step()
            if ranks.rank == 0:
                print(f"step={trainer.step + 1} loss={loss.item():.6f} {where}", flush=True)
            pad = args.step_time_s - (time.monotonic() - started)
            if pad > 0:
                time.sleep(pad)
    with torch.no_grad():
        x, y = heldout.tensors
        heldout_loss = loss_fn(model(x), y).item()
    if ranks.rank == 0:
        print(
            f"final steps={trainer.step} heldout_loss={heldout_loss:.6f} "
            f"params_sha256={params_digest(model)}",
            flush=True,
        )
    leave_distributed()  # every rank, before exit
    return 0


if __name__ == "__main__":
    sys.exit(main())
