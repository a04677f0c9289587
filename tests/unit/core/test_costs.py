"""core/costs.py (energy and tardiness), the catalog's energy keys and the shipped defaults.

Every expected number is worked out by hand in the comments next to it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from slurm_hetsched.core.catalog import merge_gpu_types, parse_gpu_types, parse_site_energy
from slurm_hetsched.core.costs import (
    EnergyModel,
    Interval,
    SiteEnergy,
    decision_costs,
    job_energy_kwh,
    run_energy_kwh,
    tardiness_cost,
    tardiness_s,
    window_energy_kwh,
)
from slurm_hetsched.core.model import GpuSlice, GpuType, Node, Placement, Problem
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy
from slurm_hetsched.errors import ConfigError

# ANDREAS's price and PUE, a 200 W node base; V100 300 W busy / 40 W idle, T4 70 / 10.
MODEL = EnergyModel(
    busy_w={"v100": 300.0, "t4": 70.0},
    idle_w={"v100": 40.0, "t4": 10.0},
    site=SiteEnergy(electricity_per_kwh=0.172, pue=1.33, node_base_w=200.0),
)
NODES = {"n1": {"v100": 4}, "n2": {"t4": 1}}


def test_cost_per_kwh_is_price_times_pue() -> None:
    assert MODEL.cost_per_kwh == pytest.approx(0.172 * 1.33)  # 0.22876, ANDREAS's figure
    assert MODEL.cost(10.0) == pytest.approx(2.2876)


def test_node_power_and_cost_per_hour() -> None:
    # 200 base + 1 x 300 busy + 3 x 40 idle = 620 W
    assert MODEL.node_power_w("v100", 4, 1) == pytest.approx(620.0)
    # c(n, g) = 0.620 kW x 1.33 x 0.172 EUR/kWh = 0.1418312 EUR/h
    assert MODEL.node_cost_per_h("v100", 4, 1) == pytest.approx(0.1418312)
    # an idle T4 node: 200 + 10 = 210 W -> 0.21 x 0.22876 = 0.0480396 EUR/h
    assert MODEL.node_cost_per_h("t4", 1, 0) == pytest.approx(0.0480396)
    # c grows linearly in g: each busy GPU adds (300 - 40) W
    costs = MODEL.node_cost_per_h("v100", 4, np.arange(5))
    assert np.diff(costs) == pytest.approx(np.full(4, 0.260 * 0.22876))


def test_job_power_is_busy_gpus_plus_base_share() -> None:
    # 2 of 4 GPUs: 2 x 300 + 2/4 x 200 = 700 W
    assert MODEL.job_power_w("v100", 4, 2) == pytest.approx(700.0)
    # per second: 0.7 kW x 0.22876 EUR/kWh / 3600 s
    assert MODEL.job_cost_per_s("v100", 4, 2) == pytest.approx(0.7 * 0.22876 / 3600)
    # the jobs of a full node add up to the node's power
    assert MODEL.job_power_w("v100", 4, 1) * 4 == pytest.approx(MODEL.node_power_w("v100", 4, 4))


INTERVALS = [
    Interval("a", "n1", "v100", 2, 0.0, 3600.0),
    Interval("b", "n1", "v100", 1, 1800.0, 5400.0),
    Interval("c", "n2", "t4", 1, 0.0, 1800.0),
]


def test_job_energy() -> None:
    energy = job_energy_kwh(MODEL, INTERVALS, NODES)
    # a: 700 W x 3600 s = 0.7 kWh; b: (300 + 50) W x 3600 s = 0.35 kWh;
    # c: (70 + 200) W x 1800 s = 486 kJ = 0.135 kWh
    assert energy == pytest.approx({"a": 0.7, "b": 0.35, "c": 0.135})


def test_run_and_round_energy() -> None:
    # n1: 0-1800 s two busy: 200 + 600 + 80 = 880 W -> 1584 kJ
    #     1800-3600 three busy: 200 + 900 + 40 = 1140 W -> 2052 kJ
    #     3600-5400 one busy: 620 W -> 1116 kJ; n1 total 4752 kJ = 1.32 kWh
    # n2: 0-1800 busy: 270 W -> 486 kJ = 0.135 kWh; afterwards powered down
    assert run_energy_kwh(MODEL, INTERVALS, NODES) == pytest.approx(1.455)
    # with idle nodes on, n2 also draws 210 W for 3600 s = 0.21 kWh
    assert run_energy_kwh(MODEL, INTERVALS, NODES, idle_nodes_on=True) == pytest.approx(1.665)
    # one round, 1800-3600 s: only n1 at 1140 W -> 2052 kJ = 0.57 kWh
    assert window_energy_kwh(MODEL, INTERVALS, NODES, 1800.0, 3600.0) == pytest.approx(0.57)
    # the run's cost: 1.455 kWh x 0.22876 = 0.3328458 EUR
    assert MODEL.cost(run_energy_kwh(MODEL, INTERVALS, NODES)) == pytest.approx(0.3328458)


def test_energy_rejects_impossible_intervals() -> None:
    with pytest.raises(ValueError, match="not in `nodes`"):
        run_energy_kwh(MODEL, [Interval("a", "n9", "v100", 1, 0.0, 1.0)], NODES)
    with pytest.raises(ValueError, match="5 busy v100 GPUs"):
        run_energy_kwh(MODEL, [Interval("a", "n1", "v100", 5, 0.0, 1.0)], NODES)
    with pytest.raises(ValueError, match="end >= start"):
        Interval("a", "n1", "v100", 1, 2.0, 1.0)


def test_tardiness() -> None:
    end = [100.0, 50.0, 300.0, 10.0]
    due = [80.0, math.nan, 400.0, 10.0]
    # late by 20; no due date; early; exactly on time
    assert tardiness_s(end, due).tolist() == [20.0, 0.0, 0.0, 0.0]
    assert tardiness_cost(end, due, [0.5, 1.0, 2.0, 3.0]).tolist() == [10.0, 0.0, 0.0, 0.0]


def _placed_problem() -> Problem:
    return Problem(
        job_ids=("a", "b"),
        gpu_types=("v100", "t4"),
        throughput=np.array([[1.0, 0.0], [0.5, 0.2]]),  # steps/s at num_gpus
        capacity=np.array([4.0, 1.0]),
        num_gpus=np.array([2, 1]),
        steps=np.array([3600.0, 100.0]),
        due_s=np.array([3000.0, math.nan]),
        tardiness_weight=np.array([0.01, 0.0]),
        nodes=(Node("n1", {"v100": 4}), Node("n2", {"t4": 1})),
        energy=MODEL,
    )


def test_decision_costs_of_a_placement() -> None:
    problem = _placed_problem()
    placement = {"a": Placement("a", (GpuSlice("n1", "v100", 2),))}  # b is postponed
    x = np.array([[1.0, 0.0], [0.0, 0.0]])
    out = decision_costs(problem, x, placement)
    # n1: 200 + 2 x 300 + 2 x 40 = 880 W; n2 idle: 210 W; 1.09 kW -> 1.09 kWh per hour
    assert out["energy_kwh_per_h"] == pytest.approx(1.09)
    assert out["energy_cost_per_h"] == pytest.approx(1.09 * 0.22876, abs=1e-6)
    # a: 3600 steps at 1 step/s = 3600 s at 700 W = 0.7 kWh, ends 600 s late at 0.01/s
    assert out["jobs"] == {
        "a": {"end_s": 3600.0, "energy_kwh": 0.7, "tardiness_s": 600.0, "tardiness_cost": 6.0}
    }
    assert out["energy_kwh"] == pytest.approx(0.7)
    assert out["energy_cost"] == pytest.approx(0.7 * 0.22876, abs=1e-6)
    assert out["tardiness_cost"] == pytest.approx(6.0)
    assert out["not_running"] == ["b"]


def test_decision_costs_of_a_gang_across_types_count_every_gpu_at_the_slowest_rate() -> None:
    problem = _placed_problem()
    # b (1 GPU) does 0.5 steps/s on v100, 0.2 on t4; as a 2-GPU gang v100 + t4 it runs at
    # the t4's rate at 2 GPUs (0.2 x 2 ** 0.8, scaled from 1 GPU as rates_at does).
    gang = {"b": Placement("b", (GpuSlice("n1", "v100", 1), GpuSlice("n2", "t4", 1)))}
    out = decision_costs(problem, np.array([[0.0, 0.0], [0.5, 0.5]]), gang)
    rate = 0.2 * 2**0.8
    assert out["jobs"]["b"]["end_s"] == pytest.approx(100 / rate, abs=1e-3)
    # Its power: one v100 busy (300 W + a quarter of n1's base) and the t4 (70 W + n2's base).
    watts = 300 + 200 / 4 + 70 + 200 / 1
    assert out["jobs"]["b"]["energy_kwh"] == pytest.approx(watts * (100 / rate) / 3.6e6, rel=1e-4)


def test_decision_costs_of_time_fractions() -> None:
    problem = _placed_problem()
    # a all the time on 2 V100s; b half the time on the T4
    x = np.array([[1.0, 0.0], [0.0, 0.5]])
    out = decision_costs(problem, x)
    # GPUs: v100 2 busy (600) + 2 idle (80); t4 half busy (35) + half idle (5); two node
    # bases (400): 1120 W
    assert out["energy_kwh_per_h"] == pytest.approx(1.12)
    # b: 100 steps at 0.5 x 0.2 = 0.1 steps/s -> 1000 s, drawing 0.5 x (70 + 200 base per
    # T4 GPU) = 135 W -> 135 kJ = 0.0375 kWh; a as above 0.7 kWh (base 50 W per V100)
    assert out["jobs"]["b"]["end_s"] == pytest.approx(1000.0)
    assert out["jobs"]["b"]["energy_kwh"] == pytest.approx(0.0375)
    assert out["energy_kwh"] == pytest.approx(0.7375)
    assert out["not_running"] == []


def test_decision_costs_need_an_energy_model() -> None:
    problem = Problem(
        job_ids=("a",), gpu_types=("v100",), throughput=np.ones((1, 1)), capacity=np.ones(1)
    )
    assert decision_costs(problem, np.ones((1, 1))) == {}


# ----------------------------------------------------------------------------------------------
# The catalog's energy keys


def test_shipped_energy_defaults() -> None:
    catalog = shipped_gpu_types()
    for t in ("v100", "p100", "k80", "t4", "a100", "h100"):
        assert catalog[t].busy_w is not None and catalog[t].idle_w is not None, t
        assert 0 < catalog[t].idle_w < catalog[t].busy_w, t  # type: ignore[operator]
    assert catalog["t4"].busy_w == 70.0  # the T4's 70 W TDP
    site = shipped_site_energy()
    assert (site.electricity_per_kwh, site.pue) == (0.172, 1.33)  # ANDREAS's
    assert site.node_base_w > 0
    model = EnergyModel.from_catalog(catalog, site, ("v100", "t4"))
    assert model is not None and model.busy_w == {"v100": 300.0, "t4": 70.0}


def test_catalog_parses_power_and_site_keys() -> None:
    data = {"pue": 1.2, "node_base_w": 150, "a100": {"busy_w": 400, "idle_w": 50}}
    assert parse_gpu_types(data) == {"a100": GpuType("a100", None, 400.0, 50.0)}
    assert parse_site_energy(data) == SiteEnergy(0.0, 1.2, 150.0)
    base = SiteEnergy(0.172, 1.33, 200.0)
    assert parse_site_energy({"pue": 1.1}, base=base) == SiteEnergy(0.172, 1.1, 200.0)
    merged = merge_gpu_types(shipped_gpu_types(), parse_gpu_types({"v100": {"idle_w": 30}}))
    assert (merged["v100"].busy_w, merged["v100"].idle_w) == (300.0, 30.0)
    assert merged["v100"].price_per_hour == 0.74


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"v100": {"busy_w": -1}}, "busy_w -1"),
        ({"v100": {"busy_w": 100, "idle_w": 200}}, "idle_w 200.0 is above busy_w 100.0"),
        ({"price": 3}, "site keys"),
        ({"pue": 0.9}, "pue 0.9 must be >= 1"),
        ({"electricity_per_kwh": "cheap"}, "electricity_per_kwh 'cheap'"),
    ],
)
def test_bad_energy_entries_are_named(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_gpu_types(data)
        parse_site_energy(data)


def test_energy_model_needs_both_powers() -> None:
    with pytest.raises(ConfigError, match="both busy_w and idle_w"):
        EnergyModel({"v100": 300.0}, {})
    assert EnergyModel.from_catalog({"x": GpuType("x", 1.0)}, SiteEnergy(), ("x",)) is None
