"""A job's restart-cost estimate (controller/restart_cost.py): measured before the class table
before the default, the median of the last samples, and the cap on what a job can claim."""

from __future__ import annotations

import math

import pytest

from slurm_hetsched.controller.restart_cost import (
    KEPT_SAMPLES,
    RestartEstimate,
    RestartSettings,
    Samples,
    clamp_sample,
    describe_estimate,
    estimate,
)
from slurm_hetsched.core.mechanism import RoundOptions

RESNET = "ResNet-50 (batch size 64)"
SETTINGS = RestartSettings(default_s=30.0, by_class={RESNET: 60.0}, max_s=900.0)


def test_the_default_is_the_mechanisms_own() -> None:
    """A default estimate is left to the mechanism (None), whose default is the config's."""
    assert RestartSettings().default_s == RoundOptions().restart_s
    assert estimate("A3C", None, SETTINGS) == RestartEstimate(None, "default")


def test_a_class_value_comes_before_the_default() -> None:
    assert estimate(RESNET, None, SETTINGS) == RestartEstimate(60.0, "class")
    assert estimate(RESNET, Samples(), SETTINGS) == RestartEstimate(60.0, "class")


def test_a_measured_restart_comes_before_the_class_value() -> None:
    measured = Samples().add(8.0)
    assert estimate(RESNET, measured, SETTINGS) == RestartEstimate(8.0, "measured", 1)
    assert estimate("A3C", measured, SETTINGS) == RestartEstimate(8.0, "measured", 1)


def test_the_estimate_is_the_median_of_the_last_samples() -> None:
    samples = Samples()
    for seconds in (500.0, 400.0, 8.0, 9.0, 300.0, 7.0, 10.0):
        samples = samples.add(seconds)
    assert samples.recent == (8.0, 9.0, 300.0, 7.0, 10.0) and KEPT_SAMPLES == 5
    assert samples.measured == 7
    # One slow restart among the kept five does not make the job sticky.
    assert estimate("A3C", samples, SETTINGS) == RestartEstimate(9.0, "measured", 7)


def test_kept_samples_above_a_lowered_cap_are_held_to_it() -> None:
    """Samples are capped when taken; a cap lowered since applies when they are read."""
    samples = Samples((800.0, 850.0, 880.0), 3)
    lowered = RestartSettings(max_s=100.0)
    assert estimate("A3C", samples, lowered).seconds == 100.0


@pytest.mark.parametrize(
    ("seconds", "held"),
    [(-5.0, 0.0), (12.5, 12.5), (1e9, 900.0), (math.inf, 900.0), (math.nan, 900.0)],
)
def test_a_sample_is_held_to_zero_and_the_cap(seconds: float, held: float) -> None:
    assert clamp_sample(seconds, 900.0) == held


def test_what_status_shows() -> None:
    assert describe_estimate(RestartEstimate(8.31, "measured", 3), 30.0) == "8.3s measured 3x"
    assert describe_estimate(RestartEstimate(60.0, "class"), 30.0) == "60.0s class default"
    assert describe_estimate(RestartEstimate(None, "default"), 30.0) == "30.0s default"
    assert describe_estimate(RestartEstimate(240.4, "measured", 1), 30.0) == "240s measured 1x"
