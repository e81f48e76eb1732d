"""memory_bound: DRAM (or memory-copy) traffic is saturated while the math pipes idle."""

from __future__ import annotations

import numpy as np

from gpulens.findings.advice import batch_advice, engine_of, optimised
from gpulens.findings.columns import floats, in_states
from gpulens.findings.context import Context
from gpulens.findings.model import Evidence, Finding, Severity, which_held
from gpulens.findings.runs import finding, hours, mean, qualifying
from gpulens.numbers import is_nan

RULE_ID = "memory_bound"


def check(ctx: Context) -> list[Finding]:
    """Runs of `memory_bound` intervals at the duration ladder's severity; on an already
    optimised engine they stay info (its fix is quantisation, not a code change)."""
    th = ctx.states
    # the memory traffic sets the state apart: DRAM active, else memory-copy utilisation
    dram_active = floats(ctx, "dram_active")
    traffic_signal = np.where(np.isnan(dram_active), floats(ctx, "mem_copy"), dram_active)
    out = []
    for run in qualifying(ctx, RULE_ID, in_states(ctx, RULE_ID), signal=traffic_signal):
        rows = run.rows
        dram, copy = mean(ctx, "dram_active", run), mean(ctx, "mem_copy", run)
        tensor, fp32 = mean(ctx, "tensor_active", run), mean(ctx, "fp32_active", run)
        engine = engine_of(ctx, rows)
        # DRAM active where reported, else memory-copy utilisation; a pipe not reported
        # counts as idle
        evidence = [
            *which_held(
                Evidence("dram_active", dram, th.dram_bound, ">=", "DCGM: saturates near 0.8"),
                Evidence("mem_copy", copy, th.mem_copy_bound, ">="),
            ),
            *which_held(
                Evidence("tensor_active", tensor, th.pipes_low, "<"),
                Evidence("fp32_active", fp32, th.pipes_low, "<"),
            ),
        ]
        traffic = f"DRAM active {dram:.2f}" if not is_nan(dram) else f"memory-copy {copy:.2f}"
        if optimised(ctx, engine):
            fix = (
                f"{engine} already runs fused kernels: quantize (FP8 or INT8 weights and KV "
                f"cache) to move fewer bytes per token, and batch more requests. "
                f"{batch_advice(ctx, rows)}"
            )
            level = Severity.INFO
        else:
            fix = (
                "Move fewer bytes per FLOP: run in BF16/FP16 "
                "(`torch.autocast('cuda', dtype=torch.bfloat16)`, half the bytes of FP32), "
                "fuse element-wise chains with `torch.compile`, use fused attention "
                "(`scaled_dot_product_attention` / FlashAttention), and raise arithmetic "
                f"intensity with a larger batch. {batch_advice(ctx, rows)} For inference, "
                "TensorRT with FP16 does all of this (see engine_migration)."
            )
            level = ctx.thresholds.level(RULE_ID, run.duration_s)
        out.append(
            finding(
                ctx,
                RULE_ID,
                run,
                f"memory-bound for {hours(run.duration_s)}: {traffic} while tensor "
                f"{tensor:.2f} and FP32 {fp32:.2f}",
                evidence,
                fix,
                level=level,
            )
        )
    return out
