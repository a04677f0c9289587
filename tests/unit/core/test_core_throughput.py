"""core/throughput.py: Gavel import, our own format, lookups and the online update."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from slurm_hetsched.core.model import InvalidProblemError
from slurm_hetsched.core.throughput import (
    FORMAT,
    ThroughputFormatError,
    ThroughputTable,
    UnknownJobClassError,
    rescale_row,
)
from slurm_hetsched.data_files import load_throughputs, shipped_throughputs

EXCERPT = Path(__file__).parent / "data" / "gavel_excerpt.json"
R50 = "ResNet-50 (batch size 64)"


@pytest.fixture(scope="module")
def gavel() -> ThroughputTable:
    return ThroughputTable.from_gavel(json.loads(EXCERPT.read_text()))


def test_gavel_import_reads_isolated_throughputs(gavel: ThroughputTable) -> None:
    assert set(gavel.gpu_types) == {"k80", "p100", "v100"}  # no "_unconsolidated" types
    assert gavel.steps_per_s(R50, "v100", 1) == pytest.approx(4.394774823323071)
    assert gavel.steps_per_s(R50, "k80", 4) == pytest.approx(2.4122290974193286)
    assert gavel.steps_per_s("A3C", "p100") == pytest.approx(5.681346110543853)


def test_gavel_zero_means_cannot_run(gavel: ThroughputTable) -> None:
    assert gavel.steps_per_s("ResNet-50 (batch size 128)", "k80", 2) == 0.0
    assert gavel.steps_per_s("ResNet-50 (batch size 128)", "v100", 2) > 0


def test_gavel_unconsolidated_is_a_variant_not_a_type(gavel: ThroughputTable) -> None:
    assert gavel.steps_per_s(R50, "v100", 4) == pytest.approx(9.451949566394442)
    assert gavel.steps_per_s(R50, "v100", 4, consolidated=False) == pytest.approx(
        11.136430014818272
    )
    # No unconsolidated k80 entry at 4 GPUs in the excerpt: falls back to consolidated.
    assert gavel.steps_per_s(R50, "k80", 4, consolidated=False) == pytest.approx(2.4122290974193286)


def test_gavel_packed_pairs(gavel: ThroughputTable) -> None:
    pair = gavel.packed_pair(R50, "A3C", 1, ["v100", "k80"])
    assert pair is not None
    np.testing.assert_allclose(
        pair, [[2.950603089845603, 1.6837215567338348], [0.30924078600857285, 1.8687176360231106]]
    )
    swapped = gavel.packed_pair("A3C", R50, 1, ["v100"])
    np.testing.assert_allclose(swapped, [[1.6837215567338348, 2.950603089845603]])
    assert gavel.packed_pair(R50, "CycleGAN", 1, ["v100"]) is None


def test_matrix_rows_follow_jobs_and_columns_follow_types(gavel: ThroughputTable) -> None:
    matrix = gavel.matrix([("A3C", 1), (R50, 4), ("A3C", 1), (R50, 3)], ["v100", "k80"])
    assert matrix.shape == (4, 2)
    np.testing.assert_allclose(matrix[0], [7.175767179667988, 3.4387678290723933])
    np.testing.assert_allclose(matrix[2], matrix[0])
    np.testing.assert_allclose(matrix[1], [9.451949566394442, 2.4122290974193286])
    assert matrix[3].tolist() == [0.0, 0.0]  # a GPU count the table does not have


def test_unknown_class_and_type_are_named(gavel: ThroughputTable) -> None:
    with pytest.raises(UnknownJobClassError, match=r"'BERT'.*known classes"):
        gavel.matrix([("A3C", 1), ("BERT", 1)], ["v100"])
    with pytest.raises(InvalidProblemError, match="GPU type 'a100'"):
        gavel.row("A3C", 1, ["v100", "a100"])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"v100": {"ResNet-50, 1": {"null": 1.0}}}, "is not \"\\('<class>', <num_gpus>\\)\""),
        ({"v100": {"('A3C', 1)": {"x": 1.0}}}, 'no "null" entry'),
        ({"v100": {"('A3C', 1)": {"null": -2.0}}}, "must be finite and >= 0"),
        ({"v100": {"('A3C', 1)": {"null": "fast"}}}, "not a number"),
        ({"v100": {"('A3C', 1)": {"null": 1.0, "('A3C', 1)": [1.0]}}}, "expected \\[a, b\\]"),
        ({}, "expected an object of worker types"),
    ],
)
def test_gavel_format_errors(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ThroughputFormatError, match=message):
        ThroughputTable.from_gavel(data)


def test_own_format_round_trip(gavel: ThroughputTable) -> None:
    data = json.loads(json.dumps(gavel.to_dict()))
    assert data["format"] == FORMAT
    back = ThroughputTable.from_dict(data)
    for key in gavel.rows:
        np.testing.assert_allclose(
            back.row(key[0], key[1], gavel.gpu_types), gavel.row(key[0], key[1], gavel.gpu_types)
        )
    assert back.steps_per_s(R50, "v100", 4, consolidated=False) == pytest.approx(11.136430014818272)
    assert set(back.packed) == set(gavel.packed)


def test_own_format_example_from_docs() -> None:
    table = ThroughputTable.from_dict(
        {
            "format": FORMAT,
            "source": "site profile 2026-05",
            "throughputs": {"BERT-base": {"1": {"a100": 12.5, "v100": 6.1}, "4": {"a100": 44.0}}},
        }
    )
    assert table.gpu_types == ("a100", "v100")
    assert table.steps_per_s("BERT-base", "v100", 4) == 0.0
    assert table.steps_per_s("BERT-base", "a100", 4) == 44.0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"throughputs": {}}, "`format`"),
        ({"format": FORMAT}, "missing `throughputs`"),
        ({"format": FORMAT, "throughputs": {}, "extra": 1}, "unknown key\\(s\\) \\['extra'\\]"),
        ({"format": FORMAT, "throughputs": {"X": {"0": {"v100": 1.0}}}}, "GPU count '0'"),
        ({"format": FORMAT, "throughputs": {"X": {"1": {"v100": -1}}}}, "must be finite"),
    ],
)
def test_own_format_errors(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ThroughputFormatError, match=message):
        ThroughputTable.from_dict(data)


def test_merged_site_profile_overrides_and_adds_types(gavel: ThroughputTable) -> None:
    site = ThroughputTable.from_dict(
        {"format": FORMAT, "throughputs": {"A3C": {"1": {"v100": 8.0, "a100": 12.0}}}}
    )
    merged = gavel.merged(site)
    assert merged.steps_per_s("A3C", "v100") == 8.0
    assert merged.steps_per_s("A3C", "a100") == 12.0
    assert merged.steps_per_s("A3C", "k80") == 0.0  # the site's row replaces the whole row
    assert merged.steps_per_s(R50, "k80") == pytest.approx(0.6190282202246573)


def test_shipped_table_is_gavels_whole_table() -> None:
    table = shipped_throughputs()
    assert len(table.classes) == 26
    assert set(table.gpu_types) == {"v100", "p100", "k80"}
    assert len([k for k in table.rows if k[1] == 1]) == 26
    assert table.steps_per_s("Recommendation (batch size 2048)", "p100") == pytest.approx(
        16.60, abs=0.01
    )
    assert table.steps_per_s(R50, "v100", 4, consolidated=False) == pytest.approx(
        11.136430014818272
    )


def test_load_throughputs_detects_the_format(tmp_path: Path, gavel: ThroughputTable) -> None:
    ours = tmp_path / "ours.json"
    ours.write_text(json.dumps(gavel.to_dict()))
    assert load_throughputs(ours).steps_per_s("A3C", "v100") == pytest.approx(7.175767179667988)
    assert load_throughputs(EXCERPT).steps_per_s("A3C", "v100") == pytest.approx(7.175767179667988)


# ----------------------------------------------------------------------------------------------
# Online update


TYPES = ("v100", "p100", "k80")
PROFILE = np.array([8.0, 4.0, 2.0])


def test_rescale_without_measurements_keeps_profile() -> None:
    row = rescale_row(PROFILE, TYPES, {})
    np.testing.assert_array_equal(row.steps_per_s, PROFILE)
    assert row.factor == 1.0 and row.outliers == ()


def test_rescale_one_measured_type_scales_the_whole_row() -> None:
    row = rescale_row(PROFILE, TYPES, {"v100": 10.0})
    np.testing.assert_allclose(row.steps_per_s, [10.0, 5.0, 2.5])
    assert row.factor == pytest.approx(1.25)


def test_rescale_measured_types_keep_their_own_ratio() -> None:
    row = rescale_row(PROFILE, TYPES, {"v100": 16.0, "p100": 2.0})  # ratios 2 and 0.5
    np.testing.assert_allclose(row.steps_per_s, [16.0, 2.0, 2.0])  # k80: geometric mean 1
    assert row.factor == pytest.approx(1.0)


@pytest.mark.parametrize(("measured", "clipped"), [(100.0, 5.0), (0.01, 0.2)])
def test_rescale_clips_outliers_and_logs_them(
    caplog: pytest.LogCaptureFixture, measured: float, clipped: float
) -> None:
    with caplog.at_level(logging.WARNING, logger="slurm_hetsched.core.throughput"):
        row = rescale_row(PROFILE, TYPES, {"v100": measured}, job_id="j7")
    assert row.factor == pytest.approx(clipped)
    np.testing.assert_allclose(row.steps_per_s, PROFILE * clipped)
    assert row.outliers == ("v100",)
    assert "job_id=j7" in caplog.text and "outlier" in caplog.text


def test_rescale_ignores_bad_measurements_and_keeps_cannot_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    profile = np.array([8.0, 0.0, 2.0])
    with caplog.at_level(logging.WARNING):
        row = rescale_row(profile, TYPES, {"v100": float("nan"), "k80": -1.0, "h100": 3.0})
    np.testing.assert_array_equal(row.steps_per_s, profile)
    assert caplog.text.count("ignored") == 3


def test_rescale_measured_where_profile_says_cannot_run() -> None:
    row = rescale_row(np.array([8.0, 0.0, 2.0]), TYPES, {"p100": 3.0})
    np.testing.assert_allclose(row.steps_per_s, [8.0, 3.0, 2.0])
