"""build_problem: a job's own measured steps/s rescale its throughput row (the online
estimate of docs/interfaces.md), the same way for the controller and a replay."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_hetsched.core.model import ClusterSnapshot, Job, Node
from slurm_hetsched.core.problem import SiteData, build_problem
from slurm_hetsched.core.throughput import ThroughputTable

TABLE = ThroughputTable.from_dict(
    {
        "format": "hetsched-throughputs/1",
        "throughputs": {"c": {"1": {"v100": 10.0, "p100": 5.0, "k80": 2.0}}},
    }
)
NODES = (Node("n1", {"v100": 1}), Node("n2", {"p100": 1}), Node("n3", {"k80": 1}))


def _row(**measured: float) -> dict[str, float]:
    jobs = (Job("a", "c", measured_steps_per_s=measured), Job("b", "c"))
    problem = build_problem(ClusterSnapshot(0.0, NODES, jobs), SiteData(TABLE))
    assert problem.throughput[1].tolist() == [2.0, 5.0, 10.0], "an unmeasured job keeps the table"
    return dict(zip(problem.gpu_types, problem.throughput[0].tolist(), strict=True))


def test_one_measured_type_rescales_the_others_by_the_same_factor() -> None:
    # Measured at half the table's speed on p100: every type is taken as half as fast,
    # so the ratios between types still come from the table.
    assert _row(p100=2.5) == pytest.approx({"k80": 1.0, "p100": 2.5, "v100": 5.0})


def test_each_measured_type_keeps_its_own_figure() -> None:
    # Geometric mean of the two ratios (0.5 and 2.0) is 1: the k80 keeps its table figure.
    assert _row(p100=2.5, v100=20.0) == pytest.approx({"k80": 2.0, "p100": 2.5, "v100": 20.0})


def test_an_implausible_measurement_is_clipped_to_five_times_the_table() -> None:
    row = _row(v100=1000.0)
    assert row["v100"] == pytest.approx(50.0) and np.isclose(row["k80"], 10.0)
