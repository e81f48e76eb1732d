"""Hand-built interval frames for the analysis tests."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from gpulens.analyze.schema import ALL_COLUMNS, ATTRIBUTION_COLUMNS, IDENTITY_COLUMNS

T0 = 1_764_374_400 * 1_000_000_000
STEP_NS = 60 * 1_000_000_000
_INTS = {"start_ns", "samples", "processes"}
_STRS = {*IDENTITY_COLUMNS, *ATTRIBUTION_COLUMNS}

# A busy, healthy H100 interval with a process: every rule's starting point.
BASE: dict[str, Any] = {
    "start_ns": T0,
    "step_s": 60.0,
    "samples": 60,
    "host": "node1",
    "gpu_uuid": "GPU-0",
    "gpu_index": "0",
    "gpu_model": "NVIDIA H100 80GB HBM3",
    "pid": "100",
    "job_id": "job-1",
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
    "memory_used_bytes": 50e9,
    "memory_used_first": 50e9,
    "process_memory_bytes": 50e9,
    "throttle_power": 0.0,
    "throttle_thermal": 0.0,
    "host_cpu": 0.3,
    "data_wait": 0.01,
}


def row(**changes: Any) -> dict[str, Any]:
    out = dict(BASE)
    out.update(changes)
    return out


def frame(*rows: dict[str, Any]) -> pa.Table:
    """A frame with every schema column, null where a row does not say."""
    cols: dict[str, pa.Array] = {}
    for name in ALL_COLUMNS:
        values = [r.get(name) for r in rows]
        t = pa.int64() if name in _INTS else pa.string() if name in _STRS else pa.float64()
        cols[name] = pa.array(values, type=t)
    return pa.table(cols)
