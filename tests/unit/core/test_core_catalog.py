"""core/catalog.py and the shipped gpu_types.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hetsched.core.catalog import merge_gpu_types, parse_gpu_types
from slurm_hetsched.core.model import GpuType
from slurm_hetsched.data_files import load_gpu_types, shipped_gpu_types
from slurm_hetsched.errors import ConfigError


def test_shipped_prices_are_gavels() -> None:
    catalog = shipped_gpu_types()
    assert {t: g.price_per_hour for t, g in catalog.items() if g.price_per_hour is not None} == {
        "v100": 0.74,
        "p100": 0.43,
        "k80": 0.135,
    }


def test_any_type_name_is_data(tmp_path: Path) -> None:
    path = tmp_path / "gpu_types.toml"
    path.write_text("[a100]\nprice_per_hour = 3.2\n\n[h100]\n")
    assert load_gpu_types(path) == {"a100": GpuType("a100", 3.2), "h100": GpuType("h100", None)}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"v100": {"price": 1.0}},
            "unknown key\\(s\\) \\['price'\\]; valid keys are "
            "\\['busy_w', 'fp16_tflops', 'fp32_tflops', 'idle_w', 'mem_bw_gbs', 'mem_gib', "
            "'price_per_hour'\\]",
        ),
        ({"v100": {"price_per_hour": -1}}, "price_per_hour -1"),
        ({"v100": {"price_per_hour": "cheap"}}, "price_per_hour 'cheap'"),
        ({"v100": 0.74}, "must be a table"),
    ],
)
def test_bad_entries_are_named(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_gpu_types(data)


def test_overrides_replace_only_given_fields() -> None:
    merged = merge_gpu_types(
        shipped_gpu_types(),
        {"v100": GpuType("v100", 2.0, mem_gib=32.0), "a100": GpuType("a100", None)},
    )
    assert merged["v100"].price_per_hour == 2.0
    assert merged["v100"].mem_gib == 32.0  # the 32 GB part
    assert merged["v100"].mem_bw_gbs == 900.0  # kept from the shipped file
    assert merged["k80"].price_per_hour == 0.135
    assert merged["a100"].price_per_hour is None


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read GPU types"):
        load_gpu_types(tmp_path / "missing.toml")


def test_every_type_the_estimates_need_has_its_speed_figures() -> None:
    # The types the estimator must know (docs/throughput.md, "Estimates for unprofiled types").
    catalog = shipped_gpu_types()
    for name in ("a100", "h100", "h200", "l40s", "l4", "a10", "t4", "v100", "p100", "k80"):
        entry = catalog[name]
        assert entry.fp32_tflops and entry.mem_bw_gbs and entry.mem_gib, name
        assert entry.fp16_tflops is None or entry.fp16_tflops > entry.fp32_tflops, name
