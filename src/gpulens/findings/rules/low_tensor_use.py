"""low_tensor_use: matrix work on the FP32 pipes of a GPU that has tensor cores."""

from __future__ import annotations

import numpy as np

from gpulens.analyze import peaks
from gpulens.findings.columns import floats, in_states, strings
from gpulens.findings.context import Context
from gpulens.findings.model import Evidence, Finding, which_held
from gpulens.findings.runs import finding, hours, mean, qualifying

RULE_ID = "low_tensor_use"


def _has_tensor_cores(ctx: Context) -> np.ndarray:
    cache: dict[str | None, bool] = {}
    out = []
    for model in strings(ctx, "gpu_model"):
        if model not in cache:
            spec = peaks.lookup(model)
            cache[model] = spec is not None and peaks.tensor_peak(spec) is not None
        out.append(cache[model])
    return np.array(out, dtype=bool)


def _precision_advice(model: str | None) -> str:
    spec = peaks.lookup(model)
    head = peaks.tensor_peak(spec) if spec is not None else None
    fp32 = spec.peak("fp32") if spec is not None else None
    tf32 = spec.peak("tf32") if spec is not None else None
    if head is None:
        return "Use mixed precision (`torch.autocast`)."
    precision, tflops = head
    gains = f"{precision.upper()} tensor peak {tflops:.0f} TFLOP/s"
    if fp32:
        gains += f" vs FP32 {fp32:.0f} TFLOP/s on {spec.name if spec else model}"
    scaler = " with `torch.cuda.amp.GradScaler`" if precision == "fp16" else ""
    tf32_text = (
        f"; at least allow TF32 ({tf32:.0f} TFLOP/s): `torch.backends.cuda.matmul.allow_tf32 = "
        "True` or `torch.set_float32_matmul_precision('high')`"
        if tf32
        else ""
    )
    return (
        f"Run the forward and backward pass under `torch.autocast('cuda', "
        f"dtype=torch.{'bfloat16' if precision == 'bf16' else 'float16'})`{scaler} ({gains})"
        f"{tf32_text}."
    )


def check(ctx: Context) -> list[Finding]:
    """Runs of `compute_fp32` intervals, or of busy intervals with SM activity at least
    `low_tensor_sm` and tensor activity under `tensor_min`, on GPUs with tensor cores."""
    th = ctx.states
    sm, tensor = floats(ctx, "sm_active"), floats(ctx, "tensor_active")
    fp32_state = in_states(ctx, "compute_fp32")
    quiet = in_states(ctx, "busy") & (np.nan_to_num(sm) >= ctx.thresholds.low_tensor_sm)
    quiet &= ~np.isnan(tensor) & (np.nan_to_num(tensor) < th.tensor_min)
    mask = (fp32_state | quiet) & _has_tensor_cores(ctx)
    out = []
    # what sets the state apart: SMs at work, tensor cores not
    for run in qualifying(ctx, RULE_ID, mask, signal=sm - tensor):
        rows = run.rows
        t_mean, fp32 = mean(ctx, "tensor_active", run), mean(ctx, "fp32_active", run)
        sm_mean = mean(ctx, "sm_active", run)
        evidence = [
            *which_held(
                Evidence("tensor_active", t_mean, th.tensor_min, "<", "tensor cores nearly idle")
            ),
            # either the FP32 pipe is busy, or the SMs are
            *which_held(
                Evidence("fp32_active", fp32, th.fp32_high, ">=", "matrix work on FP32 pipes"),
                Evidence("sm_active", sm_mean, ctx.thresholds.low_tensor_sm, ">="),
            ),
        ]
        model = strings(ctx, "gpu_model")[int(rows[0])]
        out.append(
            finding(
                ctx,
                RULE_ID,
                run,
                f"tensor cores idle for {hours(run.duration_s)}: tensor {t_mean:.2f}, FP32 "
                f"pipe {fp32:.2f}",
                evidence,
                _precision_advice(model),
                level=ctx.thresholds.level(RULE_ID, run.duration_s),
            )
        )
    return out
