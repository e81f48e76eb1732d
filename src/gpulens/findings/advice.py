"""Recommendation fragments several rules share, with the measured numbers quoted."""

from __future__ import annotations

import numpy as np

from gpulens.findings.columns import strings
from gpulens.findings.context import Context
from gpulens.findings.runs import gb, headroom_bytes, peak
from gpulens.numbers import is_nan


def batch_advice(ctx: Context, rows: np.ndarray) -> str:
    """A larger batch when the measured memory headroom allows one, else why not."""
    free = headroom_bytes(ctx, rows)
    used = peak(ctx, "memory_used_bytes", rows)
    if is_nan(free):
        return "Try a larger batch (memory headroom unknown: watch `memory_used_bytes`)."
    if free >= ctx.thresholds.batch_headroom_bytes:
        return (
            f"Raise the batch size: peak memory is {gb(used)} with {gb(free)} free on the "
            "fullest GPU, room for a larger batch (more work per kernel launch)."
        )
    return (
        f"Memory headroom is only {gb(free)} (peak {gb(used)}), so a larger batch needs "
        "activation checkpointing or gradient accumulation."
    )


def engine_of(ctx: Context, rows: np.ndarray) -> str | None:
    """The engine most of the rows ran on (None when unlabelled; a tie goes to the name that
    sorts first, so the advice is the same on every run)."""
    engine = strings(ctx, "engine")
    names = [e for i in rows.tolist() if (e := engine[i]) is not None]
    return min(set(names), key=lambda n: (-names.count(n), n)) if names else None


def optimised(ctx: Context, engine: str | None) -> bool:
    """True for an engine already optimised for inference (TensorRT, vLLM, ...)."""
    return engine is not None and engine.lower() in {
        e.lower() for e in ctx.engines.optimised_engines
    }
