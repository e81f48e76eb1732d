"""The datasheet table and model-name matching."""

from __future__ import annotations

import pytest

from gpulens.analyze.peaks import PRECISIONS, SPECS, lookup, normalise, peak_tflops, tensor_peak


@pytest.mark.parametrize(
    ("name", "spec"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A30", "A30"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        ("NVIDIA RTX A6000", "RTX A6000"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
    ],
)
def test_names_as_tools_print_them(name: str, spec: str) -> None:
    found = lookup(name)
    assert found is not None and found.name == spec


@pytest.mark.parametrize(
    "name", ["NVIDIA A800-SXM4-80GB", "Quadro RTX 6000", "NVIDIA GB200", "", None, "Tesla P100"]
)
def test_unknown_models_give_none(name: str | None) -> None:
    assert lookup(name) is None
    assert peak_tflops(name) is None


def test_datasheet_figures() -> None:
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.4
    assert peak_tflops("NVIDIA H100 80GB HBM3", "fp8") == 1978.9
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "tf32") == 156.0
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "fp8") is None  # Ampere has no FP8
    assert peak_tflops("Tesla T4", "fp16") == 65.0
    assert peak_tflops("Tesla T4", "bf16") is None
    t4 = lookup("Tesla T4")
    assert t4 is not None and (t4.boost_clock_mhz, t4.tdp_w) == (1590, 70)
    assert tensor_peak(t4) == ("fp16", 65.0)
    a10g = lookup("NVIDIA A10G")
    assert a10g is not None and tensor_peak(a10g) is None
    with pytest.raises(ValueError, match="precision"):
        t4.peak("int8")


def test_table_is_consistent() -> None:
    for spec in SPECS.values():
        assert set(spec.peaks) == set(PRECISIONS)
        values = [v for v in spec.peaks.values() if v is not None]
        assert all(v > 0 for v in values), spec.name
        if spec.peaks["bf16"] is not None and spec.peaks["tf32"] is not None:
            assert spec.peaks["tf32"] <= spec.peaks["bf16"], spec.name
        if spec.peaks["fp8"] is not None and spec.peaks["bf16"] is not None:
            # the L40S datasheet prints BF16 362.05 but FP8 733 (2.02x)
            assert spec.peaks["fp8"] == pytest.approx(2 * spec.peaks["bf16"], rel=0.02), spec.name


def test_normalise() -> None:
    assert normalise("NVIDIA A100-SXM4-80GB") == "a100 sxm4 80gb"
    assert normalise("Tesla T4") == "t4"
