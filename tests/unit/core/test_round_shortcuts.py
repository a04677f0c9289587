"""The shortcuts the rounds take on their hot path give what the long way gives: a job copied
with new steps, job groups found by sorting, the capacity of nodes seen before."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from slurm_hetsched.core.model import (
    ClusterSnapshot,
    GpuSlice,
    InvalidProblemError,
    Job,
    Node,
    Placement,
    RoundState,
)
from slurm_hetsched.core.policies.symmetry import group_jobs


def test_a_job_with_new_steps_equals_the_job_built_with_them() -> None:
    job = Job(
        "7",
        "resnet50",
        num_gpus=2,
        steps_remaining=100.0,
        total_steps=300.0,
        weight=2.0,
        account="a",
        allowed_gpus=(2, 4),
        measured_steps_per_s={"v100": 3.0},
        restart_s=12.0,
    )
    moved_on = job.with_steps_remaining(40.0)
    assert moved_on == dataclasses.replace(job, steps_remaining=40.0)
    assert job.steps_remaining == 100.0  # the original is untouched
    with pytest.raises(InvalidProblemError, match="steps_remaining"):
        job.with_steps_remaining(-1.0)
    with pytest.raises(InvalidProblemError, match="steps_remaining"):
        job.with_steps_remaining(float("nan"))


def _groups_by_brute_force(features: np.ndarray) -> list[list[int]]:
    groups: dict[tuple[float, ...], list[int]] = {}
    for m, row in enumerate(features.tolist()):
        groups.setdefault(tuple(row), []).append(m)
    return list(groups.values())  # in order of first appearance


@pytest.mark.parametrize("seed", range(20))
def test_groups_are_the_equal_rows_numbered_by_first_appearance(seed: int) -> None:
    rng = np.random.default_rng(seed)
    distinct = rng.integers(0, 3, size=(int(rng.integers(1, 6)), int(rng.integers(1, 5))))
    features = distinct[rng.integers(0, len(distinct), size=int(rng.integers(1, 40)))] * 0.1
    groups = group_jobs(features)
    expected = _groups_by_brute_force(features)
    assert groups.n_groups == len(expected)
    for g, members in enumerate(expected):
        assert np.flatnonzero(groups.of_job == g).tolist() == members
        assert groups.representative[g] == members[0]
        assert groups.size[g] == len(members)


def test_rows_equal_but_for_rounding_noise_share_a_group() -> None:
    row = np.array([0.3, 1.7, 2.0])
    groups = group_jobs(np.array([row, row * (1 + 1e-15), row * 1.01]))
    assert groups.of_job.tolist() == [0, 0, 1]


def test_capacity_follows_the_nodes_and_cannot_be_written() -> None:
    one = ClusterSnapshot(0.0, (Node("a", {"v100": 4}, gpus_in_use={"v100": 1}),), ())
    two = ClusterSnapshot(0.0, (Node("a", {"v100": 4}), Node("b", {"k80": 2})), ())
    assert one.capacity(["v100", "k80"]).tolist() == [3.0, 0.0]
    assert two.capacity(["v100", "k80"]).tolist() == [4.0, 2.0]
    assert two.capacity(("k80",)).tolist() == [2.0]
    assert one.capacity(["v100", "k80"]).tolist() == [3.0, 0.0]  # not the last nodes' answer
    with pytest.raises(ValueError):
        one.capacity(["v100"])[0] = 9.0


def test_a_state_with_new_received_time_equals_the_state_built_with_it() -> None:
    placement = Placement("b", (GpuSlice("n1", "v100", 1),))
    state = RoundState(
        round=3,
        job_ids=("a", "b"),
        gpu_types=("k80", "v100"),
        received_s=np.zeros((2, 2)),
        placements={"b": placement},
        placed_at_s={"b": 10.0},
        last_reset_s=0.0,
    )
    received = np.array([[1.0, 0.0], [0.0, 360.0]])
    moved_on = state.with_received_s(received)
    built = dataclasses.replace(state, received_s=received)
    for name in ("round", "job_ids", "gpu_types", "placements", "placed_at_s", "last_reset_s"):
        assert getattr(moved_on, name) == getattr(built, name)
    assert np.array_equal(moved_on.received_s, received)
    assert np.array_equal(moved_on.deficit_s, built.deficit_s)
    assert not moved_on.received_s.flags.writeable
    assert state.received_s.sum() == 0.0  # the original is untouched
    with pytest.raises(InvalidProblemError, match="received_s"):
        state.with_received_s(np.zeros((2, 3)))
    with pytest.raises(InvalidProblemError, match="received_s"):
        state.with_received_s(np.array([[1.0, np.nan], [0.0, 0.0]]))
