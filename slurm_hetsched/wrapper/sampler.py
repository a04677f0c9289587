"""A data sampler that can resume in the middle of an epoch, in the same order.

Each epoch's order is a permutation drawn from its own generator seeded with (seed + epoch), so
it does not depend on the global RNG or on when the job was restarted. `set_position(epoch,
offset)` makes the next iteration start `offset` samples into that epoch. With several ranks,
each takes every `num_replicas`-th index of the (padded) permutation, as DistributedSampler
does. `TorchTrainer.batches` calls `set_position` for you.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Sampler


class ResumableSampler(Sampler[int]):
    """Indices of a dataset of `num_samples`, reproducible per epoch and resumable mid-epoch.

    Args:
        num_samples: the dataset's length.
        shuffle: a new permutation per epoch (else 0, 1, 2, ...).
        seed: the permutation of epoch e is drawn with seed + e.
        num_replicas, rank: shard for distributed data parallel (default: one process).
        drop_last: drop the tail that does not divide evenly over the ranks (else pad by
            repeating indices, as DistributedSampler does).
    """

    def __init__(
        self,
        num_samples: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        drop_last: bool = False,
    ) -> None:
        if num_samples < 1:
            raise ValueError(f"num_samples must be at least 1, got {num_samples}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, num_replicas={num_replicas})")
        self.num_samples = num_samples
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = drop_last
        self.epoch = 0
        self.offset = 0

    @property
    def per_replica(self) -> int:
        """Samples each rank gets per epoch."""
        if self.drop_last:
            return self.num_samples // self.num_replicas
        return -(-self.num_samples // self.num_replicas)

    def set_epoch(self, epoch: int) -> None:
        """Start epoch `epoch` from its beginning (DistributedSampler's interface)."""
        self.set_position(epoch, 0)

    def set_position(self, epoch: int, offset: int) -> None:
        """Make the next iteration start `offset` samples into epoch `epoch` (this rank's)."""
        if epoch < 0 or offset < 0:
            raise ValueError(f"epoch and offset must be >= 0, got {epoch}, {offset}")
        self.epoch = epoch
        self.offset = offset

    def epoch_indices(self, epoch: int) -> list[int]:
        """This rank's full index list for `epoch`."""
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + epoch)
            order = torch.randperm(self.num_samples, generator=generator).tolist()
        else:
            order = list(range(self.num_samples))
        total = self.per_replica * self.num_replicas
        if total > len(order):
            order += (order * (-(-total // len(order))))[: total - len(order)]
        return order[:total][self.rank :: self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        indices = self.epoch_indices(self.epoch)[self.offset :]
        self.offset = 0  # the position applies to one iteration only
        return iter(indices)

    def __len__(self) -> int:
        return max(0, self.per_replica - self.offset)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "offset": self.offset, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_position(int(state["epoch"]), int(state["offset"]))
        self.seed = int(state.get("seed", self.seed))
