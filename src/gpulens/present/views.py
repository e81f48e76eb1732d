"""View models: what front ends render. Built from readings or store queries, no formatting."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from gpulens.model import Kind, Reading
from gpulens.store import Store


@dataclass(frozen=True, slots=True)
class TickLine:
    """One tick of the whole fleet, for the live line of `demo` and `record`."""

    ts: int
    gpus: int
    duty: float | None
    sm_active: float | None
    tensor_active: float | None
    power_watts: float
    memory_used_bytes: float
    processes: int
    readings: int


def _mean(values: list[float]) -> float | None:
    return fmean(values) if values else None


def tick_line(ts: int, readings: Iterable[Reading]) -> TickLine:
    """Fleet means of duty cycle, SM and tensor activity, and totals of power and memory."""
    duty: list[float] = []
    sm: list[float] = []
    tensor: list[float] = []
    power = memory = 0.0
    gpus = processes = count = 0
    for r in readings:
        count += 1
        if r.kind is Kind.PROCESS:
            processes += 1
        if r.kind is not Kind.GPU:
            continue
        gpus += 1
        v = r.values
        if "gpu_util_ratio" in v:
            duty.append(v["gpu_util_ratio"])
        if "sm_active_ratio" in v:
            sm.append(v["sm_active_ratio"])
        if "tensor_active_ratio" in v:
            tensor.append(v["tensor_active_ratio"])
        power += v.get("power_watts", 0.0)
        memory += v.get("memory_used_bytes", 0.0)
    return TickLine(
        ts, gpus, _mean(duty), _mean(sm), _mean(tensor), power, memory, processes, count
    )


FLEET_SUMMARY_SQL = """
WITH g AS (
    SELECT host, gpu_index, gpu_uuid, any_value(gpu_model) AS gpu_model,
           avg(gpu_util_ratio) AS duty, avg(sm_active_ratio) AS sm_active,
           avg(tensor_active_ratio) AS tensor_active, avg(dram_active_ratio) AS dram_active,
           max(memory_used_bytes) AS memory_peak_bytes, avg(power_watts) AS power_watts,
           (max(energy_joules) - min(energy_joules)) / 3.6e6 AS energy_kwh,
           count(*) AS samples
    FROM gpu GROUP BY host, gpu_index, gpu_uuid
), p AS (
    SELECT gpu_uuid, string_agg(DISTINCT job_id, ',') AS jobs,
           string_agg(DISTINCT "user", ',') AS users, string_agg(DISTINCT engine, ',') AS engines
    FROM process GROUP BY gpu_uuid
)
SELECT g.*, p.jobs, p.users, p.engines
FROM g LEFT JOIN p USING (gpu_uuid)
ORDER BY g.host, try_cast(g.gpu_index AS INTEGER), g.gpu_index
"""


def fleet_summary(store: Store) -> list[dict[str, Any]]:
    """One row per GPU: means of duty cycle and useful work, peak memory, power and energy, and
    the jobs, users and engines that ran on it."""
    return list(store.query(FLEET_SUMMARY_SQL).to_pylist())
