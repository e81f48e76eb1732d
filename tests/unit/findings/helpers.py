"""Hand-built interval frames for the findings tests: a healthy busy H100 row to vary."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from gpulens.findings.engine import Context, build_context, run_rules
from gpulens.findings.model import Finding

T0 = 1_764_374_400 * 1_000_000_000
STEP = 60.0
NS = 1_000_000_000
_INTS = {"start_ns", "samples", "processes"}
_STRS = {
    "host", "gpu_uuid", "gpu_index", "gpu_model", "pid", "process_name", "user", "project",
    "team", "job_id", "engine",
}  # fmt: skip

BASE: dict[str, Any] = {
    "start_ns": T0,
    "step_s": STEP,
    "samples": 60,
    "host": "node1",
    "gpu_uuid": "GPU-0",
    "gpu_index": "0",
    "gpu_model": "NVIDIA H100 80GB HBM3",
    "pid": "100",
    "user": "alice",
    "job_id": "job-1",
    "engine": "pytorch",
    "process_name": "python train.py",
    "processes": 1,
    "duty": 0.99,
    "graphics_active": 0.99,
    "sm_active": 0.9,
    "sm_active_min": 0.85,
    "sm_active_max": 0.95,
    "tensor_active": 0.55,
    "fp32_active": 0.08,
    "fp16_active": 0.01,
    "fp64_active": 0.0,
    "dram_active": 0.35,
    "mem_copy": 0.45,
    "sm_clock_hz": 1.98e9,
    "sm_clock_max_hz": 1.98e9,
    "power_w": 600.0,
    "power_limit_w": 700.0,
    "temperature_c": 60.0,
    "memory_total_bytes": 80e9,
    "memory_used_bytes": 50e9,
    "memory_used_first": 50e9,
    "memory_used_last": 50e9,
    "process_memory_bytes": 50e9,
    "energy_j": 600.0 * STEP,
    "throttle_power": 0.0,
    "throttle_thermal": 0.0,
    "host_cpu": 0.3,
    "data_wait": 0.01,
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
