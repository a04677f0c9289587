"""HadarE's consolidation (wrapper/averaging.py) against the test's own arithmetic."""

from __future__ import annotations

import pytest
import torch

from slurm_hetsched.wrapper.averaging import average_states


def test_parameters_are_averaged_weighted_by_steps() -> None:
    a = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.0]), "n": torch.tensor(5)}
    b = {"w": torch.tensor([4.0, 8.0]), "b": torch.tensor([3.0]), "n": torch.tensor(9)}
    # 30 steps on copy a, 10 on copy b: weights 3/4 and 1/4.
    out = average_states([(a, 30), (b, 10)])
    assert out["w"].tolist() == [1.0 * 0.75 + 4.0 * 0.25, 2.0 * 0.75 + 8.0 * 0.25]
    assert out["b"].tolist() == [0.75]
    assert out["n"].item() == 5  # a counter: the copy that trained most
    assert out["w"].dtype == torch.float32


def test_a_copy_that_trained_nothing_adds_nothing() -> None:
    a = {"w": torch.tensor([1.0])}
    dead = {"w": torch.tensor([100.0])}
    assert average_states([(a, 12), (dead, 0)])["w"].tolist() == [1.0]


def test_half_precision_is_averaged_in_double_and_cast_back() -> None:
    a = {"w": torch.tensor([1.0], dtype=torch.float16)}
    b = {"w": torch.tensor([2.0], dtype=torch.float16)}
    out = average_states([(a, 1), (b, 1)])
    assert out["w"].dtype == torch.float16 and out["w"].item() == 1.5


@pytest.mark.parametrize(
    ("copies", "message"),
    [
        ([({"w": torch.zeros(1)}, 0)], "no copy trained"),
        ([({"w": torch.zeros(1)}, -1)], "negative"),
        ([({"w": torch.zeros(1)}, 1), ({"v": torch.zeros(1)}, 1)], "tensors differ"),
        ([({"w": torch.zeros(1)}, 1), ({"w": torch.zeros(2)}, 1)], "'w' differs"),
    ],
)
def test_copies_that_do_not_match_are_refused(copies: list, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=message):
        average_states(copies)
