"""The PyTorch loop helper: a JobSession that knows how to save and restore a training run.

    model, optimizer, scheduler = ..., ..., ...
    loader = DataLoader(dataset, batch_size=64, sampler=ResumableSampler(len(dataset), seed=0))
    with TorchTrainer(model, optimizer, total_steps=10_000, lr_scheduler=scheduler) as trainer:
        for x, y in trainer.batches(loader):      # resumes at the right batch of the right epoch
            loss = loss_fn(model(x), y)
            optimizer.zero_grad(); loss.backward(); optimizer.step(); scheduler.step()

A checkpoint holds the model, optimizer, LR scheduler, AMP GradScaler, any other object with
`state_dict()`/`load_state_dict()` (`stateful=`), user `extras` (a dict restored in place),
the data position (epoch and batch within it), the step count, and each rank's RNG states of
Python, NumPy and PyTorch (CPU and CUDA). Resuming restores all of them, so a moved job ends
with exactly the parameters of an uninterrupted run (deterministic code assumed: see
docs/job-side.md). `for step in trainer.steps()` is the same without a DataLoader.

Distributed data parallel: if torch.distributed is initialised, only rank 0 writes, all ranks
wait at a barrier after each checkpoint, and all ranks load the same checkpoint.

A forked copy (HadarE, copymode.py) starts each round from the consolidated checkpoint with its
data position advanced by the round's `data_offset` batches (wrapping over epochs), so the
copies of a round read consecutive, different batches; `batches` restarts its loader there.
"""

from __future__ import annotations

import logging
import random
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from slurm_hetsched.wrapper.checkpoint import CheckpointReader, CheckpointWriter
from slurm_hetsched.wrapper.collective import Collective, LocalCollective
from slurm_hetsched.wrapper.env import JobEnvironment
from slurm_hetsched.wrapper.forkfiles import ForkRound
from slurm_hetsched.wrapper.sampler import ResumableSampler
from slurm_hetsched.wrapper.serialize import register_safe_type
from slurm_hetsched.wrapper.session import JobSession

logger = logging.getLogger(__name__)

STATE_FILE = "state.bin"
STATE_FORMAT = 1
B = TypeVar("B")


class TorchCollective:
    """Collective over the default torch.distributed process group (gloo or NCCL)."""

    def __init__(self) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("TorchCollective needs torch.distributed.init_process_group first")
        self._device = torch.device("cpu")
        if dist.get_backend() == "nccl":
            self._device = torch.device("cuda", torch.cuda.current_device())

    @property
    def rank(self) -> int:
        return dist.get_rank()

    @property
    def world_size(self) -> int:
        return dist.get_world_size()

    def any(self, flags: Sequence[bool]) -> list[bool]:
        tensor = torch.tensor([int(f) for f in flags], dtype=torch.int32, device=self._device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return [bool(value) for value in tensor.tolist()]

    def barrier(self) -> None:
        dist.barrier()

    def broadcast_int(self, value: int) -> int:
        tensor = torch.tensor([value], dtype=torch.int64, device=self._device)
        dist.broadcast(tensor, src=0)
        return int(tensor.item())

    def all_gather(self, value: Any) -> list[Any]:
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, value)
        return gathered


def default_collective() -> Collective:
    """TorchCollective when a process group with several ranks exists, else a single process."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return TorchCollective()
    return LocalCollective()


def rng_state() -> dict[str, Any]:
    """This process's RNG states: Python, NumPy (if loaded), torch CPU and CUDA (if used)."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        state["numpy"] = numpy.random.get_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what `rng_state` returned (CUDA states only for the devices there are)."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy

        numpy.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        saved = list(state["cuda"])
        count = torch.cuda.device_count()
        if len(saved) != count:
            logger.warning("CUDA RNG states saved for %d devices, %d now", len(saved), count)
        for index, device_state in enumerate(saved[:count]):
            torch.cuda.set_rng_state(device_state, index)


class TorchTrainer:
    """Checkpoint/resume for a PyTorch training loop, around a JobSession.

    Args:
        model: the module (possibly DDP-wrapped: save and load the same wrapping).
        optimizer: its optimizer (optional).
        total_steps: optimizer steps of the whole run.
        lr_scheduler: an LR scheduler (optional).
        scaler: an AMP GradScaler (optional).
        stateful: further objects with state_dict()/load_state_dict(), by name.
        extras: a dict of your own picklable values; restored in place on resume.
        safe_types: classes of yours that the state holds (in extras or a stateful's state),
            registered with register_safe_type before resuming: loading a checkpoint builds
            only allow-listed types (docs/job-side.md, "Loading checkpoints safely").
        env: the job environment (default: from os.environ).
        collective: how ranks agree (default: torch.distributed if initialised).
        **session_options: passed to JobSession (checkpoint_every_steps, checkpoint_every_s,
            keep, lease_timeout_s, progress_every_s, ...).

    Attributes:
        step: optimizer steps done so far (restored on resume).
        epoch: the data epoch `batches` is in.
        session: the underlying JobSession (resumed_from, last_checkpoint, gpu_type, ...).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        total_steps: int,
        lr_scheduler: Any | None = None,
        scaler: Any | None = None,
        stateful: Mapping[str, Any] | None = None,
        extras: dict[str, Any] | None = None,
        safe_types: Iterable[type] = (),
        env: JobEnvironment | None = None,
        collective: Collective | None = None,
        **session_options: Any,
    ) -> None:
        for cls in safe_types:
            register_safe_type(cls)
        self.model = model
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.scaler = scaler
        self.stateful = dict(stateful or {})
        self.extras: dict[str, Any] = extras if extras is not None else {}
        self.epoch = 0
        self._batch_in_epoch = 0
        self._pending_offset = 0  # batches a fork round still has to skip (copymode.py)
        self._generation = 0  # counts fork rounds started: the loader restarts at each
        self.session = JobSession(
            total_steps=total_steps,
            save=self._save,
            load=self._load,
            rank_state=rng_state,
            env=env,
            collective=collective or default_collective(),
            **session_options,
        )
        self.session.copy_mode.on_round = self._on_fork_round

    @property
    def step(self) -> int:
        return self.session.step

    @property
    def total_steps(self) -> int:
        assert self.session.total_steps is not None
        return self.session.total_steps

    def __enter__(self) -> TorchTrainer:
        self.session.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.session.__exit__(exc_type, exc, tb)

    # ----------------------------------------------------------------- loops
    def steps(self) -> Iterator[int]:
        """Yield the index of each remaining step (0-based); the step boundary (progress,
        checkpoint signal, periodic checkpoint, SIGTERM) is handled after each one."""
        while not self.session.finished:
            yield self.session.step
            self.session.step_done()

    def batches(self, loader: Iterable[B]) -> Iterator[B]:
        """Yield batches from `loader` for the remaining steps, over as many epochs as needed.

        With a ResumableSampler (as the loader's sampler or its batch sampler's sampler) a
        resumed run starts at the next batch of the saved epoch. Otherwise the loader's
        sampler gets `set_epoch` if it has one and the batches already done in the epoch
        are read and dropped, which reproduces the order only if the sampler is
        deterministic per epoch.
        """
        while not self.session.finished:
            if self._pending_offset:
                self._advance_data(loader, self._pending_offset)
            generation = self._generation
            skip = self._start_epoch(loader)
            # Making an iterator draws a seed from the global RNG; keep that out of the
            # training's random stream so a resumed run draws exactly what the original did.
            with torch.random.fork_rng(devices=[]):
                iterator = iter(loader)
            for batch in iterator:
                if skip:
                    skip -= 1
                    continue
                yield batch
                self._batch_in_epoch += 1
                self.session.step_done()
                if self.session.finished:
                    return
                if self._generation != generation:
                    break  # a fork round started in the pause: its own data position
            else:
                self.epoch += 1
                self._batch_in_epoch = 0

    def _on_fork_round(self, fork: ForkRound) -> None:
        """A fork round started (its checkpoint loaded): skip `data_offset` batches next."""
        self._pending_offset = fork.data_offset
        self._generation += 1

    def _advance_data(self, loader: Iterable[Any], batches: int) -> None:
        """Move the data position `batches` batches on, wrapping over epochs."""
        per_epoch = _batches_per_epoch(loader)
        position = self._batch_in_epoch + batches
        self.epoch += position // per_epoch
        self._batch_in_epoch = position % per_epoch
        self._pending_offset = 0

    def _start_epoch(self, loader: Iterable[Any]) -> int:
        """Position the loader's sampler; returns how many batches to drop instead."""
        sampler = _find_sampler(loader)
        if isinstance(sampler, ResumableSampler):
            batch_size = getattr(loader, "batch_size", None)
            if batch_size is None and self._batch_in_epoch:
                raise ValueError(
                    "cannot resume mid-epoch: the loader has no batch_size; give the "
                    "DataLoader batch_size= instead of a custom batch_sampler"
                )
            sampler.set_position(self.epoch, self._batch_in_epoch * (batch_size or 0))
            return 0
        if sampler is not None and hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.epoch)
        if self._batch_in_epoch:
            logger.warning(
                "the loader's sampler is not a ResumableSampler: skipping %d batches to resume; "
                "the order matches the original run only if the sampler is deterministic",
                self._batch_in_epoch,
            )
        return self._batch_in_epoch

    def checkpoint(self) -> Any:
        """Write a checkpoint now (every rank must call it); returns its folder or None."""
        return self.session.checkpoint()

    # ----------------------------------------------------------------- state
    def _save(self, writer: CheckpointWriter) -> None:
        data = {"epoch": self.epoch, "batch_in_epoch": self._batch_in_epoch}
        if self._pending_offset:  # a fork round checkpointed before its first batch
            data["pending_batches"] = self._pending_offset
        state = {
            "format": STATE_FORMAT,
            "step": writer.step,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
            "lr_scheduler": _state_of(self.lr_scheduler),
            "scaler": _state_of(self.scaler),
            "stateful": {name: obj.state_dict() for name, obj in self.stateful.items()},
            "extras": self.extras,
            "data": data,
            "rng": writer.rank_states,
            "world_size": self.session.collective.world_size,
        }
        writer.save_object(STATE_FILE, state)

    def _load(self, reader: CheckpointReader) -> None:
        state = reader.load_object(STATE_FILE)
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"{reader.folder}: unknown trainer state format {state.get('format')}")
        self.model.load_state_dict(state["model"])
        _load_into(self.optimizer, state["optimizer"], "optimizer")
        _load_into(self.lr_scheduler, state["lr_scheduler"], "lr_scheduler")
        _load_into(self.scaler, state["scaler"], "scaler")
        for name, obj in self.stateful.items():
            if name not in state["stateful"]:
                raise KeyError(f"{reader.folder} has no state for stateful object {name!r}")
            obj.load_state_dict(state["stateful"][name])
        self.extras.clear()
        self.extras.update(state["extras"])
        self.epoch = int(state["data"]["epoch"])
        self._batch_in_epoch = int(state["data"]["batch_in_epoch"])
        self._pending_offset = int(state["data"].get("pending_batches", 0))
        rng = state["rng"]
        rank = self.session.collective.rank
        if rng:
            if len(rng) != self.session.collective.world_size:
                logger.warning(
                    "checkpoint has RNG states of %d ranks, the job now has %d: every rank "
                    "takes rank 0's (the random stream differs from an uninterrupted run)",
                    len(rng),
                    self.session.collective.world_size,
                )
                rank = 0
            set_rng_state(rng[rank])


def _state_of(obj: Any | None) -> Any:
    return None if obj is None else obj.state_dict()


def _load_into(obj: Any | None, state: Any, what: str) -> None:
    if obj is None:
        return
    if state is None:
        raise ValueError(f"the checkpoint has no {what} state but the trainer was given one")
    obj.load_state_dict(state)


def _batches_per_epoch(loader: Iterable[Any]) -> int:
    """Batches in a whole epoch of `loader` (a ResumableSampler's, else len(loader))."""
    sampler = _find_sampler(loader)
    batch_size = getattr(loader, "batch_size", None)
    count: int
    if isinstance(sampler, ResumableSampler) and batch_size:
        full, tail = divmod(sampler.per_replica, batch_size)
        count = full if getattr(loader, "drop_last", False) else full + bool(tail)
    else:
        try:
            count = len(loader)  # type: ignore[arg-type]
        except TypeError:
            raise ValueError(
                "a fork round's data_offset needs a loader with a length: use a DataLoader "
                "with a ResumableSampler"
            ) from None
    if count < 1:
        raise ValueError("the loader has no batch in an epoch")
    return count


def _find_sampler(loader: Iterable[Any]) -> Any:
    sampler = getattr(loader, "sampler", None)
    batch_sampler = getattr(loader, "batch_sampler", None)
    if not isinstance(sampler, ResumableSampler) and batch_sampler is not None:
        inner = getattr(batch_sampler, "sampler", None)
        if isinstance(inner, ResumableSampler):
            return inner
    return sampler
