"""Prices: model-name matching, defaults, settings parsing and validation."""

from __future__ import annotations

import pytest

from gpulens.analyze.prices import (
    DEFAULT_GPU_HOUR_PRICES,
    Prices,
    mig_slices,
    model_tokens,
    parse_assignments,
)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA B200", "B200"),
        ("Tesla T4", "T4"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "A100 40GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10G", "A10G"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("nvidia h100 80gb hbm3", "H100"),
    ],
)
def test_model_names_match_their_entry(name: str, key: str) -> None:
    assert Prices().match(name) == key
    assert Prices().gpu_hour_price(name) == DEFAULT_GPU_HOUR_PRICES[key]


@pytest.mark.parametrize(
    "name", ["NVIDIA GH200 480GB", "NVIDIA A10", "NVIDIA GeForce RTX 4090", ""]
)
def test_unknown_models_get_the_default_price(name: str) -> None:
    prices = Prices(unknown_gpu_hour=1.25)
    assert prices.match(name) is None
    assert prices.gpu_hour_price(name) == 1.25
    assert prices.gpu_hour_price(None) == 1.25


def test_tokens_normalise_vendor_words_and_sizes() -> None:
    assert model_tokens("NVIDIA A100-SXM4-80G") == {"A100", "SXM4", "80GB"}
    assert model_tokens("Tesla T4") == {"T4"}


def test_mig_slices() -> None:
    assert mig_slices("1g.10gb") == 1
    assert mig_slices("NVIDIA H100 80GB HBM3 MIG 3g.40gb") == 3
    assert mig_slices("NVIDIA H100") is None
    assert mig_slices(None) is None


def test_from_settings_overrides_and_replaces() -> None:
    p = Prices.from_settings(["H100=2.5", "my-gpu=9"], currency="EUR", pue=1.4)
    assert p.gpu_hour_price("NVIDIA H100 80GB HBM3") == 2.5
    assert p.gpu_hour_price("Tesla T4") == DEFAULT_GPU_HOUR_PRICES["T4"]
    assert p.gpu_hour_price("my-gpu") == 9.0
    assert p.currency == "EUR" and p.pue == 1.4
    only = Prices.from_settings({"T4": 0.1}, replace_defaults=True, unknown_gpu_hour=3.0)
    assert only.gpu_hour_price("Tesla T4") == 0.1
    assert only.gpu_hour_price("NVIDIA H100") == 3.0


def test_most_specific_key_wins_whatever_the_order() -> None:
    p = Prices(gpu_hour={"A100": 1.0, "A100-80GB": 2.0, "a100 sxm4 80gb": 3.0})
    assert p.gpu_hour_price("NVIDIA A100-SXM4-80GB") == 3.0
    assert p.gpu_hour_price("NVIDIA A100 80GB PCIe") == 2.0
    assert p.gpu_hour_price("NVIDIA A100-PCIE-40GB") == 1.0


def test_energy_cost_includes_pue() -> None:
    assert Prices(electricity_per_kwh=0.2, pue=1.5).energy_cost(10.0) == pytest.approx(3.0)
    assert Prices().energy_cost(10.0) == 0.0  # cloud default: in the GPU-hour price


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpu_hour": {"H100": -1.0}}, "GPU-hour price of 'H100'"),
        ({"pue": 0.9}, "PUE"),
        ({"electricity_per_kwh": -0.1}, "electricity"),
        ({"currency": " "}, "currency"),
        ({"gpu_hour": {"--": 1.0}}, "names no model"),
    ],
)
def test_invalid_prices_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Prices(**kwargs)  # type: ignore[arg-type]


def test_parse_assignments_quotes_the_bad_item() -> None:
    assert parse_assignments(["a=1", "b = 2.5"]) == {"a": 1.0, "b": 2.5}
    with pytest.raises(ValueError, match="'H100'"):
        parse_assignments(["H100"])
    with pytest.raises(ValueError, match="'cheap'"):
        parse_assignments(["H100=cheap"])
