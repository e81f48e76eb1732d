"""Model FLOPs of one step, counted once, and the peak they are measured against.

`FlopCount` runs `torch.utils.flop_counter.FlopCounterMode` over exactly one step (from the
end of the step before it to the end of that step): matrix multiplications, convolutions and
attention as torch's counter counts them (2 per multiply-add; a backward as its two matmuls),
nothing for element-wise work. The count is then reused for every step, so its cost is paid
once. The peak is the catalog's dense datasheet figure (gpulens.analyze.peaks) for the GPU
model and the step's precision; on a CPU, or for a GPU or precision the catalog does not know,
there is no peak and no MFU (never a guess).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from gpulens.analyze import peaks

_DTYPES: dict[torch.dtype, str] = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float64: "fp64",
}
PRECISIONS = peaks.PRECISIONS


def precision_of(model: torch.nn.Module | None, declared: str | None) -> str | None:
    """The precision to take the peak at: `declared` (one of peaks.PRECISIONS), else the dtype
    of the model's first floating-point parameter (float32 counts as tf32 when torch lets
    matmuls use TF32), else None."""
    if declared is not None:
        if declared not in PRECISIONS:
            raise ValueError(f"dtype {declared!r} is not one of {', '.join(PRECISIONS)}")
        return declared
    if model is None:
        return None
    for p in model.parameters():
        if p.is_floating_point():
            if p.dtype == torch.float32:
                return "fp32" if torch.get_float32_matmul_precision() == "highest" else "tf32"
            return _DTYPES.get(p.dtype)
    return None


def peak_flops(gpu_model: str | None, precision: str | None) -> float | None:
    """Dense peak FLOP/s of `gpu_model` at `precision` from the catalog, or None."""
    if gpu_model is None or precision is None:
        return None
    tflops = peaks.peak_tflops(gpu_model, precision)
    return None if tflops is None else tflops * 1e12


class FlopCount:
    """Counts the FLOPs of step number `at` (1-based) once."""

    def __init__(self, at: int) -> None:
        if at < 1:
            raise ValueError(f"count_flops_at must be a step number >= 1, got {at!r}")
        self.at = at
        self.flops: float | None = None
        self._mode: Any = None

    def step_ended(self, steps: int) -> None:
        """Call at the end of every step with the steps done so far (training thread)."""
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)
            self.flops = float(mode.get_total_flops())
        elif steps == self.at - 1 and self.flops is None:
            mode = FlopCounterMode(display=False)
            mode.__enter__()  # type: ignore[no-untyped-call]
            self._mode = mode

    @property
    def counting(self) -> bool:
        return self._mode is not None

    def abandon(self) -> None:
        """Leave the counter (the run ends inside the counted step)."""
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)
