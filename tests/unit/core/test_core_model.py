"""core/model/: validation, immutability, derived fields and the JSON of an Allocation."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from problem_builders import gavel_example, make_job, make_problem

from slurm_hetsched.core.model import (
    Allocation,
    ClusterSnapshot,
    GpuSlice,
    InvalidProblemError,
    Job,
    Node,
    Placement,
    Problem,
    RoundState,
)
from slurm_hetsched.errors import HetschedError


def test_problem_defaults_and_runnable_mask() -> None:
    p = make_problem(
        [make_job("a").tput(v100=2.0, k80=1.0), make_job("b").gpus(4).tput(v100=8.0, k80=3.0)],
        v100=2,
        k80=4,
    )
    assert p.weight.tolist() == [1.0, 1.0]
    assert p.num_gpus.dtype == np.int64
    # b needs 4 GPUs of one type: only k80 has 4.
    assert p.runnable.tolist() == [[True, True], [False, True]]


def test_problem_arrays_are_read_only_copies() -> None:
    throughput = np.array([[1.0, 2.0]])
    p = Problem(job_ids=("a",), gpu_types=("v100", "k80"), throughput=throughput, capacity=[1, 1])
    throughput[0, 0] = 99.0
    assert p.throughput[0, 0] == 1.0
    with pytest.raises(ValueError):
        p.throughput[0, 0] = 5.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.capacity = np.zeros(2)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"throughput": [[0.0, 0.0], [1.0, 1.0]]}, "job 'a'.*cannot run on any GPU type"),
        ({"num_gpus": [3, 1]}, "job 'a' \\(num_gpus=3\\) cannot run"),
        ({"throughput": [[1.0, -1.0], [1.0, 1.0]]}, "job 'a': throughput .* negative"),
        ({"steps": [10.0, -1.0]}, "job 'b': steps .* negative"),
        ({"weight": [1.0, 0.0]}, "job 'b': weight"),
        ({"capacity": [0.0, 0.0]}, "zero total capacity"),
        ({"capacity": [-1.0, 2.0]}, "GPU type 'v100': capacity"),
        ({"job_ids": ("a", "a")}, "job id 'a' appears twice"),
        ({"throughput": [[1.0, np.nan], [1.0, 1.0]]}, "non-finite"),
        ({"throughput": [[1.0, 1.0]]}, "shape"),
        ({"num_gpus": [1.5, 1]}, "whole number"),
    ],
)
def test_invalid_problems_name_the_culprit(change: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {
        "job_ids": ("a", "b"),
        "gpu_types": ("v100", "k80"),
        "throughput": [[1.0, 1.0], [1.0, 1.0]],
        "capacity": [2.0, 2.0],
    }
    fields.update(change)
    with pytest.raises(InvalidProblemError, match=message) as info:
        Problem(**fields)  # type: ignore[arg-type]
    assert isinstance(info.value, HetschedError)


def test_empty_problem_is_valid() -> None:
    p = Problem(job_ids=(), gpu_types=("v100",), throughput=np.zeros((0, 1)), capacity=[0])
    assert p.n_jobs == 0


def test_require_names_missing_field_and_policy() -> None:
    with pytest.raises(InvalidProblemError, match="'fifo_perf' needs `steps`"):
        gavel_example().require("steps", "fifo_perf")


def test_unlisted_account_defaults_to_weight_one_fair() -> None:
    account = gavel_example().account("nobody")
    assert (account.name, account.weight, account.policy.value) == ("nobody", 1.0, "fair")


def test_allocation_to_json_rounds_and_keeps_every_type() -> None:
    alloc = Allocation(
        job_ids=("j0", "j1"),
        gpu_types=("v100", "k80"),
        x=np.array([[0.45454545, -0.0], [0.5454, 0.0909090]]),
        objective=0.72727,
        solve_s=0.0123,
        policy="max_min_fairness_perf",
    )
    assert alloc.to_json() == {
        "policy": "max_min_fairness_perf",
        "allocation": {"j0": {"v100": 0.455, "k80": 0.0}, "j1": {"v100": 0.545, "k80": 0.091}},
        "objective": 0.727,
        "solve_s": 0.012,
    }
    assert str(alloc.to_json()["allocation"]["j0"]["k80"]) == "0.0"  # not -0.0
    assert alloc.share("j1") == {"v100": 0.5454, "k80": 0.090909}


def test_node_free_gpus_respects_use_and_availability() -> None:
    node = Node("n1", {"v100": 4}, {"v100": 1})
    assert node.free_gpus("v100") == 3
    assert node.free_gpus("k80") == 0
    assert Node("n2", {"v100": 4}, available=False).free_gpus("v100") == 0
    with pytest.raises(InvalidProblemError, match="node 'n3'"):
        Node("n3", {"v100": 1}, {"v100": 2})


def test_snapshot_capacity_and_types_come_from_nodes() -> None:
    snapshot = ClusterSnapshot(
        now_s=0.0,
        nodes=(
            Node("n1", {"v100": 2}),
            Node("n2", {"k80": 4}, {"k80": 1}),
            Node("n3", {"a100": 8}),
        ),
        jobs=(Job("j1", "A3C"),),
    )
    assert snapshot.gpu_types == ("a100", "k80", "v100")
    assert snapshot.capacity(("v100", "k80")).tolist() == [2.0, 3.0]


def test_job_validation() -> None:
    with pytest.raises(InvalidProblemError, match="job 'j': steps_remaining"):
        Job("j", "A3C", steps_remaining=-5)
    with pytest.raises(InvalidProblemError, match="num_gpus"):
        Job("j", "A3C", num_gpus=0)


def test_placement_and_round_state() -> None:
    placement = Placement("j1", (GpuSlice("n1", "v100", 2), GpuSlice("n2", "v100", 2)))
    assert (placement.num_gpus, placement.gpu_types, placement.nodes) == (
        4,
        ("v100",),
        ("n1", "n2"),
    )
    state = RoundState.initial(("v100", "k80"))
    assert state.round == 0 and state.received_s.shape == (0, 2) and state.allocation is None
    with pytest.raises(InvalidProblemError, match="shape"):
        RoundState(round=1, job_ids=("a",), gpu_types=("v100",), received_s=np.zeros((2, 1)))
