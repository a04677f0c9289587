"""The table the decisions use: estimated columns for types with figures and no column, the
neutral prior for classes in no table, and how they are marked (core/throughput/prior.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slurm_hetsched.core.model import ClusterSnapshot, GpuType, Job, Node
from slurm_hetsched.core.problem import SiteData, build_problem
from slurm_hetsched.core.throughput import ThroughputTable, UnknownJobClassError
from slurm_hetsched.core.throughput.estimate import catalog_figures, estimate_rates, fit_share
from slurm_hetsched.core.throughput.prior import estimated_entries, with_estimates, without
from slurm_hetsched.data_files import shipped_gpu_types, shipped_throughputs

RESNET = "ResNet-50 (batch size 64)"
CATALOG = shipped_gpu_types()


def test_types_with_figures_get_estimated_columns_and_measured_ones_stay() -> None:
    table = shipped_throughputs()
    est = with_estimates(table, CATALOG)
    added = set(est.gpu_types) - set(table.gpu_types)
    assert {"a100", "h100", "l4", "t4"} <= added
    assert set(est.estimated_types) == added
    for key, row in table.rows.items():
        assert est.row(key[0], key[1], table.gpu_types).tolist() == row.tolist()
    # Each estimate is the estimator's, with the share fitted on the whole table.
    figures = catalog_figures(CATALOG)
    rows = [dict(zip(table.gpu_types, r.tolist(), strict=True)) for r in table.rows.values()]
    share = fit_share(rows, figures)
    measured = dict(zip(table.gpu_types, table.row(RESNET, 1, table.gpu_types), strict=True))
    expected = estimate_rates(measured, figures, share, ["a100"])["a100"]
    assert est.steps_per_s(RESNET, "a100") == pytest.approx(expected)
    assert est.steps_per_s(RESNET, "a100") > est.steps_per_s(RESNET, "v100")
    assert est.estimated_types and estimated_entries(est, RESNET, ["v100", "a100"]) == ["a100"]


def test_a_class_in_no_table_gets_the_figures_ratios_and_is_marked_everywhere() -> None:
    est = with_estimates(shipped_throughputs(), CATALOG)
    assert est.is_prior("my-own-model") and not est.is_prior(RESNET)
    row = est.row("my-own-model", 1, ["v100", "a100", "k80"])
    assert (row > 0).all()
    prior = est.prior
    assert prior is not None
    # The ratio between two types is the figures' alone: C^w B^(1-w) with the table's share.
    f = catalog_figures(CATALOG)
    w = prior.share  # type: ignore[attr-defined]
    ratio = (f["a100"].compute / f["v100"].compute) ** w * (
        f["a100"].bandwidth / f["v100"].bandwidth
    ) ** (1 - w)
    assert row[1] / row[0] == pytest.approx(ratio)
    # More GPUs: sublinear, never less.
    assert (est.row("my-own-model", 4, ["v100"]) > row[0]).all()
    assert estimated_entries(est, "my-own-model", ["v100", "k80"]) == ["v100", "k80"]


def test_without_a_prior_an_unknown_class_still_raises() -> None:
    est = with_estimates(shipped_throughputs(), CATALOG, prior=False)
    assert not est.is_prior("my-own-model")
    with pytest.raises(UnknownJobClassError):
        est.row("my-own-model", 1, ["v100"])
    # A merge forgets estimates: estimate again on the merged table.
    merged = est.merged(shipped_throughputs())
    assert merged.estimated_types == () and merged.prior is None


def test_a_type_without_figures_is_neither_estimated_nor_run_by_the_prior() -> None:
    catalog = {**CATALOG, "odd": GpuType("odd")}
    table = ThroughputTable(
        gpu_types=("v100", "odd"),
        rows={(RESNET, 1): np.array([10.0, 5.0])},
        unconsolidated={},
        packed={},
    )
    est = with_estimates(table, catalog)
    assert "odd" not in est.estimated_types
    assert est.row("new", 1, ["odd"]).tolist() == [0.0]


def test_without_hides_columns_or_everything() -> None:
    table = shipped_throughputs()
    less = without(table, ["k80"])
    assert set(less.gpu_types) == {"p100", "v100"}
    assert less.row(RESNET, 1, ["v100"]).tolist() == table.row(RESNET, 1, ["v100"]).tolist()
    nothing = without(table, every=True)
    assert nothing.classes == () and nothing.gpu_types == ()
    prior_only = with_estimates(nothing, CATALOG)
    assert prior_only.is_prior(RESNET)
    assert set(prior_only.estimated_types) == set(catalog_figures(CATALOG))


def _problem_of(table: ThroughputTable, measured: dict[str, float]) -> np.ndarray:
    snapshot = ClusterSnapshot(
        now_s=0.0,
        nodes=(Node("n1", {"v100": 4, "k80": 4, "a100": 4}),),
        jobs=(Job("j", "my-own-model", steps_remaining=100.0, measured_steps_per_s=measured),),
    )
    problem = build_problem(snapshot, SiteData(table, CATALOG))
    return dict(zip(problem.gpu_types, problem.throughput[0].tolist(), strict=True))


def test_a_class_in_no_table_learns_its_scale_unclipped_and_each_type_measured() -> None:
    est = with_estimates(shipped_throughputs(), CATALOG)
    prior = _problem_of(est, {})
    # Measured at 50x the prior on v100: the whole row follows (no 5x clip on the scale).
    learned = _problem_of(est, {"v100": 50 * prior["v100"]})
    assert learned["v100"] == pytest.approx(50 * prior["v100"])
    assert learned["a100"] / learned["v100"] == pytest.approx(prior["a100"] / prior["v100"])
    # Measured on two types: each takes its measurement.
    both = _problem_of(est, {"v100": 2.0, "k80": 1.5})
    assert both["v100"] == pytest.approx(2.0) and both["k80"] == pytest.approx(1.5)
    # A measured 0 rules the type out (a simulated job known not to run there).
    ruled = _problem_of(est, {"v100": 2.0, "k80": 0.0})
    assert ruled["k80"] == 0.0 and ruled["v100"] == pytest.approx(2.0)
    assert math.isfinite(ruled["a100"]) and ruled["a100"] > 0
