"""HadarE's consolidation (Sultana et al., section V, the job tracker): the copies' parameters
averaged, each weighted by the steps it trained this round. Periodic model averaging (local
SGD): the result is not the result of unforked training.

Floating-point tensors are averaged in float64 and cast back to their own dtype; other
tensors (counters such as BatchNorm's num_batches_tracked) are taken from the copy that
trained the most steps. A copy that trained no step adds nothing. Runs with the job's user's
rights (it loads the copies' checkpoints): never as root.

`merge_trainer_states` applies this to whole TorchTrainer states (wrapper/torch.py):
- model parameters and buffers: averaged as above;
- optimizer: its per-parameter float state tensors (SGD's momentum_buffer, Adam's exp_avg and
  exp_avg_sq, ...) averaged the same way, weighted by steps; its `step` counters, any other
  value and the param_groups (learning rates) from the copy with the most steps;
- LR scheduler, GradScaler, `stateful=` objects, extras, RNG states, world size: from the copy
  with the most steps (so an LR schedule counts that copy's steps, not the job's);
- data position: from the copy whose data range ends last;
- step: the consolidated step the caller gives.
"""

from __future__ import annotations

import copy as copying
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

STEP_KEY = "step"  # an optimizer's per-parameter step counter: not averaged


def average_states(
    copies: Sequence[tuple[Mapping[str, torch.Tensor], int]],
) -> dict[str, torch.Tensor]:
    """The step-weighted average of the copies' state dicts ((state, steps) pairs).

    Raises:
        ValueError: no copy trained a step, a step count is negative, or the copies' keys,
            shapes or dtypes differ (naming the first key that does).
    """
    if any(steps < 0 for _, steps in copies):
        raise ValueError("a copy's step count is negative")
    trained = [(state, steps) for state, steps in copies if steps > 0]
    if not trained:
        raise ValueError("no copy trained a step this round: nothing to average")
    first, _ = trained[0]
    for state, _ in trained[1:]:
        if list(state) != list(first):
            raise ValueError(f"the copies' tensors differ: {sorted(set(state) ^ set(first))[:3]}")
        for key, tensor in state.items():
            if tensor.shape != first[key].shape or tensor.dtype != first[key].dtype:
                raise ValueError(f"tensor {key!r} differs between copies (shape or dtype)")
    total = sum(steps for _, steps in trained)
    most, _ = max(trained, key=lambda pair: pair[1])
    out: dict[str, torch.Tensor] = {}
    for key, tensor in first.items():
        if not tensor.is_floating_point():
            out[key] = most[key].clone()
            continue
        acc = torch.zeros(tensor.shape, dtype=torch.float64)
        for state, steps in trained:
            acc += state[key].detach().to(torch.float64) * (steps / total)
        out[key] = acc.to(tensor.dtype)
    return out


@dataclass(frozen=True, slots=True)
class CopyState:
    """One copy's TorchTrainer state, the steps it trained this round, and where its data
    range ends (any measure that grows along the data; the largest wins)."""

    state: Mapping[str, Any]
    steps: int
    data_end: int


def average_optimizer_states(
    copies: Sequence[tuple[Mapping[str, Any], int]],
) -> dict[str, Any]:
    """The copies' optimizer state dicts merged: float state tensors averaged weighted by
    steps (`average_states`), the rest (step counters, param_groups) from the copy with the
    most steps.

    Raises:
        ValueError: the copies' optimizer states do not match (parameters, state names,
            shapes, dtypes), or a state dict is malformed.
    """
    trained = [(state, steps) for state, steps in copies if steps > 0]
    if not trained:
        raise ValueError("no copy trained a step this round: nothing to average")
    flat: list[tuple[dict[str, torch.Tensor], int]] = []
    for state, steps in trained:
        per_param = state.get("state") if isinstance(state, Mapping) else None
        if not isinstance(per_param, Mapping) or not isinstance(state.get("param_groups"), list):
            raise ValueError("an optimizer state has no 'state' mapping or 'param_groups' list")
        flat.append((_float_state(per_param), steps))
    averaged = average_states(flat)
    most, _ = max(trained, key=lambda pair: pair[1])
    out_state: dict[Any, dict[str, Any]] = {}
    for param, entry in most["state"].items():
        out_state[param] = {
            name: averaged.get(_flat_key(param, name), _clone(value))
            for name, value in entry.items()
        }
    return {"state": out_state, "param_groups": copying.deepcopy(most["param_groups"])}


def merge_trainer_states(copies: Sequence[CopyState], step: int) -> dict[str, Any]:
    """One TorchTrainer state from the copies' (module docstring: what is averaged and what
    is taken from which copy). Copies of 0 steps are left out.

    Raises:
        ValueError: no copy trained a step, or the copies' states do not match (different
            models, one with an optimizer and one without, ...); the message says what.
    """
    trained = [c for c in copies if c.steps > 0]
    if any(c.steps < 0 for c in copies):
        raise ValueError("a copy's step count is negative")
    if not trained:
        raise ValueError("no copy trained a step this round: nothing to average")
    for c in trained:
        model = c.state.get("model")
        if not isinstance(model, Mapping) or not all(
            isinstance(t, torch.Tensor) for t in model.values()
        ):
            raise ValueError("a copy's state has no model state dict of tensors")
    most = max(trained, key=lambda c: c.steps)
    last = max(trained, key=lambda c: (c.data_end, c.steps))
    model = OrderedDict(average_states([(c.state["model"], c.steps) for c in trained]))
    metadata = getattr(most.state["model"], "_metadata", None)
    if metadata is not None:
        model._metadata = copying.deepcopy(metadata)  # type: ignore[attr-defined]
    optimizers = [c.state.get("optimizer") for c in trained]
    if all(o is None for o in optimizers):
        optimizer = None
    elif any(o is None for o in optimizers):
        raise ValueError("some copies' states have an optimizer state and some do not")
    else:
        optimizer = average_optimizer_states(
            [(o, c.steps) for o, c in zip(optimizers, trained, strict=True) if o is not None]
        )
    merged = dict(most.state)  # freshly loaded: nothing else holds these objects
    merged.update(
        model=model, optimizer=optimizer, data=copying.deepcopy(last.state.get("data")), step=step
    )
    return merged


def _flat_key(param: Any, name: str) -> str:
    return f"{param!r}/{name}"


def _float_state(per_param: Mapping[Any, Any]) -> dict[str, torch.Tensor]:
    """The float tensors of an optimizer's per-parameter state, by 'param/name' (not `step`)."""
    flat: dict[str, torch.Tensor] = {}
    for param, entry in per_param.items():
        if not isinstance(entry, Mapping):
            raise ValueError(f"optimizer state of parameter {param!r} is not a mapping")
        for name, value in entry.items():
            if isinstance(value, torch.Tensor) and value.is_floating_point() and name != STEP_KEY:
                flat[_flat_key(param, name)] = value
    return flat


def _clone(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else copying.deepcopy(value)
