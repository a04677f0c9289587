"""HadarE's consolidation (Sultana et al., section V, the job tracker): the copies' parameters
averaged, each weighted by the steps it trained this round. Periodic model averaging (local
SGD): the result is not the result of unforked training.

Floating-point tensors are averaged in float64 and cast back to their own dtype; other
tensors (counters such as BatchNorm's num_batches_tracked) are taken from the copy that
trained the most steps. A copy that trained no step adds nothing. Runs with the job's user's
rights (it loads the copies' checkpoints): never as root.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


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
