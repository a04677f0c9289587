"""core/throughput/estimate.py: speeds of GPU types the table lacks, from datasheet figures."""

from __future__ import annotations

import math

import pytest

from slurm_hetsched.core.model import GpuType
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.core.throughput.estimate import (
    NEUTRAL_SHARE,
    Figures,
    catalog_figures,
    estimate_rates,
    fit_share,
    leave_one_type_out,
    type_figures,
)
from slurm_hetsched.data_files import shipped_gpu_types, shipped_throughputs

# Three made-up types: "c" has compute, "b" bandwidth, "m" some of both.
FIGURES = {"c": Figures(100.0, 100.0), "b": Figures(10.0, 1000.0), "m": Figures(40.0, 400.0)}


def model_rate(scale: float, share: float, gpu_type: str) -> float:
    f = FIGURES[gpu_type]
    return scale * f.compute**share * f.bandwidth ** (1 - share)


def test_the_share_and_a_left_out_type_are_recovered_from_rates_made_by_the_model() -> None:
    # Two classes of different scales, both 30% compute-bound.
    rows = [{t: model_rate(scale, 0.3, t) for t in ("c", "b")} for scale in (2.0, 7.0)]
    assert fit_share(rows, FIGURES) == pytest.approx(0.3)
    guess = estimate_rates(rows[1], FIGURES, 0.3, ["m"])
    assert guess["m"] == pytest.approx(model_rate(7.0, 0.3, "m"))


def test_by_hand_one_measured_type_and_half_shares() -> None:
    # Share 0.5: speed goes with sqrt(compute x bandwidth): c 100, b 100, m 126.49.
    guess = estimate_rates({"b": 3.0}, FIGURES, 0.5, ["c", "m", "unknown"])
    assert guess["c"] == pytest.approx(3.0)
    assert guess["m"] == pytest.approx(3.0 * math.sqrt(40.0 * 400.0) / 100.0)
    assert "unknown" not in guess  # no figures, nothing to go on


def test_nothing_to_fit_on_gives_the_neutral_share() -> None:
    assert fit_share([{"c": 1.0}, {"c": 2.0, "x": 3.0}], FIGURES) == NEUTRAL_SHARE
    assert estimate_rates({"x": 1.0}, FIGURES, 0.5, ["c"]) == {}


def test_figures_fall_back_to_fp32_without_fast_half_precision() -> None:
    assert type_figures(GpuType("k80", fp32_tflops=4.37, mem_bw_gbs=240.0)) == Figures(4.37, 240.0)
    assert type_figures(GpuType("v100", fp16_tflops=125.0, fp32_tflops=15.7, mem_bw_gbs=900.0)) == (
        Figures(125.0, 900.0)
    )
    assert type_figures(GpuType("mystery", fp32_tflops=1.0)) is None


def test_leaving_each_type_of_gavels_table_out_beats_the_neutral_prior() -> None:
    """Every class's rate on V100, P100 and K80 predicted from the other two (240 predictions):
    the share fitted on the table against the neutral half-and-half share. The errors are in
    docs/throughput.md; asserted is only that the estimator does better."""
    score = leave_one_type_out(shipped_throughputs(), catalog_figures(shipped_gpu_types()))
    assert score.predictions == 240
    assert score.estimator_error < score.neutral_error
    assert set(score.shares) == {"k80", "p100", "v100"}


def test_a_table_without_figures_predicts_nothing() -> None:
    table = ThroughputTable.from_dict(
        {"format": "hetsched-throughputs/1", "throughputs": {"x": {"1": {"v100": 1.0}}}}
    )
    score = leave_one_type_out(table, {})
    assert score.predictions == 0
    assert math.isnan(score.estimator_error)
