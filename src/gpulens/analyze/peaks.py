"""Dense peak TFLOP/s per GPU model and precision, from NVIDIA's datasheets.

Figures are dense (without 2:4 structured sparsity, which the datasheets print as the larger
number with an asterisk) at the boost clock the datasheet uses; tensor figures are with FP32
accumulate where the datasheet distinguishes (GeForce and RTX parts). Precisions: `bf16`,
`fp16` (tensor cores), `tf32` (tensor cores), `fp8` (tensor cores, Hopper/Ada and later),
`fp32` (non-tensor FMA), `fp64` (non-tensor). A precision the datasheet does not list is None.

Sources (NVIDIA product datasheets and architecture whitepapers):
- H100 SXM5 / PCIe / NVL: "NVIDIA H100 Tensor Core GPU" datasheet (2023), boost 1980 / 1755 /
  1785 MHz; H200 SXM / NVL: "NVIDIA H200 Tensor Core GPU" datasheet (same compute as H100 SXM
  and NVL); GH200: "NVIDIA GH200 Grace Hopper Superchip" datasheet (H100 SXM compute);
- B200: "NVIDIA DGX B200" / HGX B200 datasheet (system figures ÷ 8 GPUs; boost not published);
- A100 SXM4 and PCIe 40/80 GB: "NVIDIA A100 Tensor Core GPU" datasheet (boost 1410 MHz);
  A30, A10, A40: their NVIDIA datasheets;
- L4, L40, L40S: NVIDIA L4 / L40 / L40S datasheets (boost 2040 / 2490 / 2520 MHz);
- T4: "NVIDIA T4 Tensor Core GPU" datasheet (boost 1590 MHz, 70 W);
- V100 SXM2 / PCIe / V100S: "NVIDIA V100 Tensor Core GPU" datasheet;
- RTX 4090, RTX 6000 Ada: "NVIDIA Ada GPU Architecture" whitepaper, appendix tables;
  RTX 3090, RTX A6000: "NVIDIA Ampere GA102 GPU Architecture" whitepaper, appendix tables.

A10G (AWS) is recognised but NVIDIA publishes no datasheet for it: its peaks are None. A model
the table does not know gives None from `lookup`: gpulens never presents a guess as a figure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "tf32", "fp8", "fp32", "fp64")


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model: dense peaks in TFLOP/s per precision, the datasheet's boost clock and
    board power (None where the datasheet gives none)."""

    name: str
    peaks: Mapping[str, float | None]
    boost_clock_mhz: float | None
    tdp_w: float | None
    source: str
    aliases: tuple[str, ...] = field(default=())

    def peak(self, precision: str) -> float | None:
        """Dense peak TFLOP/s for `precision` (one of PRECISIONS), None when not published."""
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}: use one of {PRECISIONS}")
        return self.peaks.get(precision)


def _spec(
    name: str,
    bf16: float | None,
    fp16: float | None,
    tf32: float | None,
    fp8: float | None,
    fp32: float | None,
    fp64: float | None,
    boost: float | None,
    tdp: float | None,
    source: str,
) -> GpuSpec:
    peaks = dict(zip(PRECISIONS, (bf16, fp16, tf32, fp8, fp32, fp64), strict=True))
    return GpuSpec(name, MappingProxyType(peaks), boost, tdp, source)


_H100 = "NVIDIA H100 datasheet"
_H200 = "NVIDIA H200 datasheet"
_A100 = "NVIDIA A100 datasheet"
_V100 = "NVIDIA V100 datasheet"
_ADA = "NVIDIA Ada GPU Architecture whitepaper"
_GA102 = "NVIDIA Ampere GA102 GPU Architecture whitepaper"

# name: bf16, fp16, tf32, fp8, fp32, fp64, boost MHz, board power W, source
SPECS: Mapping[str, GpuSpec] = MappingProxyType(
    {
        s.name: s
        for s in (
            _spec("H100 SXM", 989.4, 989.4, 494.7, 1978.9, 67.0, 34.0, 1980, 700, _H100),
            _spec("H100 PCIe", 756.0, 756.0, 378.0, 1513.0, 51.0, 26.0, 1755, 350, _H100),
            _spec("H100 NVL", 835.5, 835.5, 417.5, 1670.5, 60.0, 30.0, 1785, 400, _H100),
            _spec("H200 SXM", 989.4, 989.4, 494.7, 1978.9, 67.0, 34.0, 1980, 700, _H200),
            _spec("H200 NVL", 835.5, 835.5, 417.5, 1670.5, 60.0, 30.0, 1785, 600, _H200),
            _spec("GH200", 989.4, 989.4, 494.7, 1978.9, 67.0, 34.0, 1980, None, "NVIDIA GH200"),
            _spec("B200", 2250.0, 2250.0, 1100.0, 4500.0, 75.0, 37.0, None, 1000, "DGX B200"),
            _spec("A100 SXM", 312.0, 312.0, 156.0, None, 19.5, 9.7, 1410, 400, _A100),
            _spec("A100 PCIe 40GB", 312.0, 312.0, 156.0, None, 19.5, 9.7, 1410, 250, _A100),
            _spec("A100 PCIe 80GB", 312.0, 312.0, 156.0, None, 19.5, 9.7, 1410, 300, _A100),
            _spec("A30", 165.0, 165.0, 82.0, None, 10.3, 5.2, 1440, 165, "NVIDIA A30"),
            _spec("A10", 125.0, 125.0, 62.5, None, 31.2, None, 1695, 150, "NVIDIA A10"),
            _spec("A10G", None, None, None, None, None, None, None, None, "no NVIDIA datasheet"),
            _spec("A40", 149.7, 149.7, 74.8, None, 37.4, None, 1740, 300, "NVIDIA A40"),
            _spec("L4", 121.0, 121.0, 60.0, 242.5, 30.3, None, 2040, 72, "NVIDIA L4"),
            _spec("L40", 181.0, 181.0, 90.5, 362.0, 90.5, None, 2490, 300, "NVIDIA L40"),
            _spec("L40S", 362.05, 362.05, 183.0, 733.0, 91.6, None, 2520, 350, "NVIDIA L40S"),
            _spec("T4", None, 65.0, None, None, 8.1, None, 1590, 70, "NVIDIA T4 datasheet"),
            _spec("V100 SXM2", None, 125.0, None, None, 15.7, 7.8, 1530, 300, _V100),
            _spec("V100 PCIe", None, 112.0, None, None, 14.0, 7.0, 1380, 250, _V100),
            _spec("V100S PCIe", None, 130.0, None, None, 16.4, 8.2, 1601, 250, _V100),
            _spec("RTX 4090", 165.2, 165.2, 82.6, 330.3, 82.6, None, 2520, 450, _ADA),
            _spec("RTX 6000 Ada", 364.2, 364.2, 182.1, 728.5, 91.1, None, 2505, 300, _ADA),
            _spec("RTX 3090", 71.0, 71.0, 35.6, None, 35.6, None, 1695, 350, _GA102),
            _spec("RTX A6000", 154.8, 154.8, 77.4, None, 38.7, None, 1800, 300, _GA102),
        )
    }
)

# (pattern over the normalised name, spec name), most specific first.
_RULES: tuple[tuple[re.Pattern[str], str | None], ...] = tuple(
    (re.compile(p), n)
    for p, n in (
        (r"\bgb200\b", None),  # Grace Blackwell: per-GPU figures differ from B200
        (r"\bgh200\b", "GH200"),
        (r"\bh200\b.*\bnvl\b", "H200 NVL"),
        (r"\bh200\b", "H200 SXM"),
        (r"\bh100\b.*\bnvl\b", "H100 NVL"),
        (r"\bh100\b.*\bpcie\b", "H100 PCIe"),
        (r"\bh100\b", "H100 SXM"),
        (r"\bb200\b", "B200"),
        (r"\ba100\b.*\bpcie\b.*\b80 ?gb\b|\ba100\b.*\b80 ?gb\b.*\bpcie\b", "A100 PCIe 80GB"),
        (r"\ba100\b.*\bpcie\b", "A100 PCIe 40GB"),
        (r"\ba100\b", "A100 SXM"),
        (r"\ba30\b", "A30"),
        (r"\ba10g\b", "A10G"),
        (r"\ba10\b", "A10"),
        (r"\ba40\b", "A40"),
        (r"\bl40s\b", "L40S"),
        (r"\bl40\b", "L40"),
        (r"\bl4\b", "L4"),
        (r"\bt4\b", "T4"),
        (r"\bv100s\b", "V100S PCIe"),
        (r"\bv100\b.*\bpcie\b", "V100 PCIe"),
        (r"\bv100\b", "V100 SXM2"),
        (r"\brtx 4090\b", "RTX 4090"),
        (r"\brtx 6000 ada\b", "RTX 6000 Ada"),
        (r"\brtx 3090\b", "RTX 3090"),
        (r"\brtx a6000\b", "RTX A6000"),
    )
)
_DROP = re.compile(r"\b(nvidia|tesla|geforce|quadro)\b")


def normalise(model: str) -> str:
    """Lower case, vendor words dropped, separators as single spaces: "NVIDIA A100-SXM4-80GB"
    → "a100 sxm4 80gb"."""
    text = re.sub(r"[-_/,()]+", " ", model.lower())
    text = _DROP.sub(" ", text)
    return " ".join(text.split())


def lookup(model: str | None) -> GpuSpec | None:
    """The datasheet spec of a GPU model name as nvidia-smi, NVML or DCGM print it, or None
    when the model is not in the table."""
    if not model:
        return None
    text = normalise(model)
    for pattern, name in _RULES:
        if pattern.search(text):
            return SPECS[name] if name is not None else None
    return None


def peak_tflops(model: str | None, precision: str = "bf16") -> float | None:
    """Dense peak TFLOP/s of `model` at `precision`, or None when unknown."""
    spec = lookup(model)
    return None if spec is None else spec.peak(precision)


def tensor_peak(spec: GpuSpec) -> tuple[str, float] | None:
    """The headline tensor precision of a GPU (bf16, else fp16 for pre-Ampere parts) and its
    dense peak, or None when neither is published."""
    for precision in ("bf16", "fp16"):
        value = spec.peaks.get(precision)
        if value is not None:
            return precision, value
    return None
