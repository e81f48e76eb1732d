"""Hand-built interval frames for the findings tests: a healthy busy H100 row to vary."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from analyze.helpers import _INTS, _STRS, T0
from analyze.helpers import BASE as FRAME_BASE

from gpulens.findings.engine import Context, build_context, run_rules
from gpulens.findings.model import Finding

STEP = 60.0
NS = 1_000_000_000

# the analysis tests' healthy busy H100 row, with who runs it, its temperature, memory
# total and last sample, and its energy
BASE: dict[str, Any] = {
    **FRAME_BASE,
    "user": "alice",
    "engine": "pytorch",
    "process_name": "python train.py",
    "temperature_c": 60.0,
    "memory_total_bytes": 80e9,
    "memory_used_last": 50e9,
    "energy_j": 600.0 * STEP,
}


IDLE: dict[str, Any] = {
    "duty": 0.0,
    "graphics_active": 0.0,
    "sm_active": 0.0,
    "sm_active_min": 0.0,
    "sm_active_max": 0.0,
    "tensor_active": 0.0,
    "fp32_active": 0.0,
    "fp16_active": 0.0,
    "dram_active": 0.0,
    "mem_copy": 0.0,
    "power_w": 90.0,
}


def series(minutes: int, first: int = 0, **changes: Any) -> list[dict[str, Any]]:
    """`minutes` consecutive 60 s rows from minute `first`, BASE with `changes`."""
    out = []
    for m in range(first, first + minutes):
        row = dict(BASE)
        row.update(changes)
        row["start_ns"] = T0 + m * int(STEP * NS)
        out.append(row)
    return out


def frame(rows: list[dict[str, Any]]) -> pa.Table:
    names = list(dict.fromkeys(k for r in rows for k in r))
    fields = [
        pa.field(n, pa.int64() if n in _INTS else pa.string() if n in _STRS else pa.float64())
        for n in names
    ]
    return pa.Table.from_pylist(rows, schema=pa.schema(fields))


def findings(rows: list[dict[str, Any]], rule: str, **kwargs: Any) -> tuple[list[Finding], Context]:
    """The findings of `rule` over `rows` (a Context built from them, no warm-up detection
    beyond what classify finds)."""
    ctx = build_context(frame(rows), **kwargs)
    return run_rules(ctx, only=[rule]), ctx


def ddp_rows(sm: list[list[float]], clocks: list[float]) -> list[dict[str, Any]]:
    """One data-parallel job on len(sm) GPUs: per GPU its SM activity per minute and SM clock."""
    rows = []
    for g, (values, clock) in enumerate(zip(sm, clocks, strict=True)):
        for m, v in enumerate(values):
            rows += series(1, first=m, gpu_uuid=f"GPU-{g}", gpu_index=str(g), sm_active=v,
                           sm_clock_hz=clock, pid=str(100 + g))  # fmt: skip
    return rows
