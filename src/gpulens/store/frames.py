"""The interval frame from the store: one row per GPU entity per `step_s` interval.

`gpu_intervals` builds the table `gpulens.analyze.schema` describes (its columns, in its order;
`tests/unit/store/test_frames.py` checks the two agree, because `store` and `analyze` may not
import each other) with one DuckDB query over the store's views:

- `gpu` is scanned once and grouped by (host, gpu_uuid, mig_instance, bucket), where bucket =
  epoch_ns(ts) // step: every mean, spread, level, energy and throttle column comes from that
  one pass. Nothing is joined on the raw side; every join is between per-bucket aggregates.
- attribution comes from `process` rows that carry a GPU and a memory figure: per (GPU,
  bucket, pid) the peak memory, then per (GPU, bucket) the process with the largest peak (ties
  go to the lowest pid) lends its labels; `processes` counts distinct pids and
  `process_memory_bytes` sums the per-process peaks (the peak of the sum when processes do not
  peak at different moments, an upper bound otherwise: exact would need a (GPU, ts) grouping of
  the whole process table, which costs as much as the gpu scan).
- host context (`host_cpu`, `host_iowait`) is joined by (host, bucket);
- application context by (job_id of the attributed process, bucket): app readings that carry a
  `gpu_uuid` are matched to that GPU first, job-wide readings fill in what they lack.
- `energy_j`: the energy counter's increase over the interval, measured from the previous
  interval's last reading when that interval is the adjacent one (so consecutive intervals sum
  to the counter's total increase), else from the interval's first reading. The counter only
  grows, so first and last are its min and max (cheaper than ordering by time). A reset
  (driver reload) inside an interval makes it count only the rise up to its largest reading,
  an underestimate; when even that is negative the interval falls back to max − min.
- throttle fractions: `throttle_power_ratio` / `throttle_thermal_ratio` per sample, or the
  matching bits of `clocks_event_reasons` where only the bitmask was stored; `clock_idle` is
  the GPU_IDLE bit (0x1).

`where` filters on labels: `host`, `gpu_uuid`, `gpu_index`, `gpu_model`, `mig_instance` on the
GPU rows; `pid`, `process_name`, `user`, `project`, `team`, `job_id`, `container`, `pod`,
`namespace`, `engine` on the attributed process (an interval whose top process does not match
is left out). Values are always bound as query parameters.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from gpulens.catalog import POWER_REASON_BITS, THERMAL_REASON_BITS
from gpulens.store.query import Store

GPU_LABELS: tuple[str, ...] = ("host", "gpu_uuid", "gpu_index", "gpu_model", "mig_instance")
PROCESS_LABELS: tuple[str, ...] = (
    "pid",
    "process_name",
    "user",
    "project",
    "team",
    "job_id",
    "container",
    "pod",
    "namespace",
    "engine",
)
_ATTR_LABELS = PROCESS_LABELS  # the attribution columns, in schema order

# frame column → gpu metric averaged over the interval (analyze.schema.MEAN_COLUMNS)
_MEANS: tuple[tuple[str, str], ...] = (
    ("duty", "gpu_util_ratio"),
    ("mem_copy", "mem_copy_util_ratio"),
    ("graphics_active", "graphics_active_ratio"),
    ("sm_active", "sm_active_ratio"),
    ("sm_occupancy", "sm_occupancy_ratio"),
    ("tensor_active", "tensor_active_ratio"),
    ("dram_active", "dram_active_ratio"),
    ("fp32_active", "fp32_active_ratio"),
    ("fp16_active", "fp16_active_ratio"),
    ("fp64_active", "fp64_active_ratio"),
    ("pcie_rx_bps", "pcie_rx_bytes_per_second"),
    ("pcie_tx_bps", "pcie_tx_bytes_per_second"),
    ("sm_clock_hz", "sm_clock_hertz"),
    ("power_w", "power_watts"),
    ("temperature_c", "temperature_celsius"),
)
# frame column → (app metric, aggregate)
_APP: tuple[tuple[str, str, str], ...] = (
    ("data_wait", "app_data_wait_ratio", "avg"),
    ("tokens_per_s", "app_tokens_per_second", "avg"),
    ("model_parameters", "app_model_parameters", "max"),
    ("kernel_launches_per_s", "app_kernel_launches_per_second", "avg"),
    ("latency_p50_s", "app_latency_p50_seconds", "avg"),
)

# The output, in analyze.schema.ALL_COLUMNS order: (column, SQL expression over the joined
# aggregates, DuckDB type).
_OUTPUT: tuple[tuple[str, str, str], ...] = (
    ("start_ns", "g.b * $step_ns", "BIGINT"),
    ("step_s", "$step_s", "DOUBLE"),
    ("samples", "g.samples", "BIGINT"),
    ("host", "g.host", "VARCHAR"),
    ("gpu_uuid", "g.gpu_uuid", "VARCHAR"),
    ("gpu_index", "g.gpu_index", "VARCHAR"),
    ("gpu_model", "g.gpu_model", "VARCHAR"),
    ("mig_instance", "g.mig_instance", "VARCHAR"),
    ("parent_uuid", "g.parent_uuid", "VARCHAR"),
    *((c, f"pa.{c}", "VARCHAR") for c in _ATTR_LABELS),
    ("processes", "coalesce(pa.processes, 0)", "BIGINT"),
    *((c, f"g.{c}", "DOUBLE") for c, _ in _MEANS),
    ("sm_active_min", "g.sm_active_min", "DOUBLE"),
    ("sm_active_max", "g.sm_active_max", "DOUBLE"),
    ("duty_min", "g.duty_min", "DOUBLE"),
    ("sm_clock_max_hz", "g.sm_clock_max_hz", "DOUBLE"),
    ("power_limit_w", "g.power_limit_w", "DOUBLE"),
    ("memory_total_bytes", "g.memory_total_bytes", "DOUBLE"),
    ("memory_used_bytes", "g.memory_used_bytes", "DOUBLE"),
    ("memory_used_first", "g.memory_used_first", "DOUBLE"),
    ("memory_used_last", "g.memory_used_last", "DOUBLE"),
    ("process_memory_bytes", "pa.process_memory_bytes", "DOUBLE"),
    ("nvlink_bps", "g.nvlink_bps", "DOUBLE"),
    ("energy_j", "g.energy_j", "DOUBLE"),
    ("energy_power_j", "g.power_w * $step_s", "DOUBLE"),
    ("throttle_power", "g.throttle_power", "DOUBLE"),
    ("throttle_thermal", "g.throttle_thermal", "DOUBLE"),
    ("clock_idle", "g.clock_idle", "DOUBLE"),
    ("host_cpu", "h.host_cpu", "DOUBLE"),
    ("host_iowait", "h.host_iowait", "DOUBLE"),
    *((c, f"coalesce(ag.{c}, aj.{c})", "DOUBLE") for c, _, _ in _APP),
)
COLUMNS: tuple[str, ...] = tuple(c for c, _, _ in _OUTPUT)


def _gpu_sql(filters: str) -> str:
    means = ",\n    ".join(f"avg({m}) AS {c}" for c, m in _MEANS)
    bits_p, bits_t = POWER_REASON_BITS, THERMAL_REASON_BITS
    return f"""
  SELECT host, gpu_uuid, mig_instance, epoch_ns(ts) // $step_ns AS b,
    any_value(gpu_index) AS gpu_index, any_value(gpu_model) AS gpu_model,
    any_value(parent_uuid) AS parent_uuid, count(*) AS samples,
    {means},
    min(sm_active_ratio) AS sm_active_min, max(sm_active_ratio) AS sm_active_max,
    min(gpu_util_ratio) AS duty_min,
    max(sm_clock_max_hertz) AS sm_clock_max_hz, max(power_limit_watts) AS power_limit_w,
    max(memory_total_bytes) AS memory_total_bytes, max(memory_used_bytes) AS memory_used_bytes,
    arg_min(memory_used_bytes, ts) FILTER (WHERE memory_used_bytes IS NOT NULL)
      AS memory_used_first,
    arg_max(memory_used_bytes, ts) FILTER (WHERE memory_used_bytes IS NOT NULL)
      AS memory_used_last,
    CASE WHEN count(nvlink_rx_bytes_per_second) + count(nvlink_tx_bytes_per_second) > 0
      THEN coalesce(avg(nvlink_rx_bytes_per_second), 0)
         + coalesce(avg(nvlink_tx_bytes_per_second), 0) END AS nvlink_bps,
    min(energy_joules) AS e_first, max(energy_joules) AS e_last,
    avg(coalesce(throttle_power_ratio,
        ((clocks_event_reasons::BIGINT & {bits_p}) <> 0)::DOUBLE)) AS throttle_power,
    avg(coalesce(throttle_thermal_ratio,
        ((clocks_event_reasons::BIGINT & {bits_t}) <> 0)::DOUBLE)) AS throttle_thermal,
    avg((clocks_event_reasons::BIGINT & 1)::DOUBLE) AS clock_idle
  FROM gpu
  WHERE {filters}
  GROUP BY host, gpu_uuid, mig_instance, b"""


def _energy_sql() -> str:
    """Per-bucket energy from the counter's first/last samples and the previous bucket's last."""
    return """
  SELECT *,
    CASE
      WHEN prev_b = b - 1 AND prev_last IS NOT NULL AND e_last >= prev_last
        THEN e_last - prev_last
      WHEN e_last >= e_first THEN e_last - e_first
    END AS energy_j
  FROM (
    SELECT *,
      lag(b) OVER w AS prev_b, lag(e_last) OVER w AS prev_last
    FROM g0
    WINDOW w AS (PARTITION BY host, gpu_uuid, mig_instance ORDER BY b)
  )"""


def _process_sql(filters: str) -> str:
    labels = ", ".join(f"any_value({c}) AS {c}" for c in _ATTR_LABELS if c != "pid")
    top = ", ".join(f"arg_max({c}, sort_key) AS {c}" for c in _ATTR_LABELS)
    return f"""
  p0 AS (
    SELECT gpu_uuid, epoch_ns(ts) // $step_ns AS b, pid, {labels},
      max(process_memory_used_bytes) AS mem
    FROM process
    WHERE gpu_uuid IS NOT NULL AND process_memory_used_bytes IS NOT NULL AND {filters}
    GROUP BY gpu_uuid, b, pid
  ),
  pa AS (
    SELECT gpu_uuid, b, {top}, count(*) AS processes, sum(mem) AS process_memory_bytes
    FROM (SELECT *, (mem, -coalesce(TRY_CAST(pid AS BIGINT), 0)) AS sort_key FROM p0)
    GROUP BY gpu_uuid, b
  )"""


def _app_sql(filters: str) -> str:
    aggs = ", ".join(f"{agg}({m}) AS {c}" for c, m, agg in _APP)
    return f"""
  ag AS (
    SELECT job_id, gpu_uuid, epoch_ns(ts) // $step_ns AS b, {aggs}
    FROM app WHERE job_id IS NOT NULL AND gpu_uuid IS NOT NULL AND {filters}
    GROUP BY job_id, gpu_uuid, b
  ),
  aj AS (
    SELECT job_id, epoch_ns(ts) // $step_ns AS b, {aggs}
    FROM app WHERE job_id IS NOT NULL AND gpu_uuid IS NULL AND {filters}
    GROUP BY job_id, b
  )"""


def _host_sql(filters: str) -> str:
    return f"""
  h AS (
    SELECT host, epoch_ns(ts) // $step_ns AS b,
      avg(host_cpu_util_ratio) AS host_cpu, avg(host_cpu_iowait_ratio) AS host_iowait
    FROM host
    WHERE (host_cpu_util_ratio IS NOT NULL OR host_cpu_iowait_ratio IS NOT NULL) AND {filters}
    GROUP BY host, b
  )"""


def build_sql(where: Mapping[str, str] | None, bounded: tuple[bool, bool]) -> tuple[str, int]:
    """The query and how many `where` parameters it binds ($w0, $w1, ...)."""
    time_parts = ["true"]
    if bounded[0]:
        time_parts.append("ts >= make_timestamp_ns($start_ns) AND date >= $start_date::DATE")
    if bounded[1]:
        time_parts.append("ts < make_timestamp_ns($end_ns) AND date <= $end_date::DATE")
    span = " AND ".join(time_parts)
    gpu_filters = [span]
    final_filters = ["true"]
    items = sorted((where or {}).items())
    for i, (key, _value) in enumerate(items):
        if key in GPU_LABELS:
            gpu_filters.append(f"{key} = $w{i}")
        elif key in PROCESS_LABELS:
            final_filters.append(f"pa.{key} = $w{i}")
        else:
            allowed = ", ".join(GPU_LABELS + PROCESS_LABELS)
            raise ValueError(f"cannot filter frames on {key!r}: use one of {allowed}")
    select = ",\n  ".join(f"CAST({expr} AS {t}) AS {c}" for c, expr, t in _OUTPUT)
    sql = f"""
WITH g0 AS ({_gpu_sql(" AND ".join(gpu_filters))}
),
g AS ({_energy_sql()}
),
{_process_sql(span)},
{_host_sql(span)},
{_app_sql(span)}
SELECT
  {select}
FROM g
LEFT JOIN pa ON pa.gpu_uuid = g.gpu_uuid AND pa.b = g.b
LEFT JOIN h ON h.host = g.host AND h.b = g.b
LEFT JOIN ag ON ag.job_id = pa.job_id AND ag.gpu_uuid = g.gpu_uuid AND ag.b = g.b
LEFT JOIN aj ON aj.job_id = pa.job_id AND aj.b = g.b
WHERE {" AND ".join(final_filters)}
ORDER BY g.host, g.gpu_uuid, g.mig_instance, g.b
"""
    return sql, len(items)


def gpu_intervals(
    store: Store,
    step_s: float = 60.0,
    start_ns: int | None = None,
    end_ns: int | None = None,
    where: Mapping[str, str] | None = None,
) -> pa.Table:
    """The interval frame of the GPU entities in `store` over [start_ns, end_ns).

    Intervals are aligned to the epoch (`start_ns` = a multiple of the step). ValueError for a
    step that is not positive or a `where` key that is not a filterable label.
    """
    step_ns = round(step_s * 1e9)
    if step_ns <= 0:
        raise ValueError(f"step_s must be positive, got {step_s!r}")
    sql, _n = build_sql(where, (start_ns is not None, end_ns is not None))
    params: dict[str, object] = {"step_ns": step_ns, "step_s": float(step_s)}
    if start_ns is not None:
        params["start_ns"] = int(start_ns)
        params["start_date"] = _day(start_ns)
    if end_ns is not None:
        params["end_ns"] = int(end_ns)
        params["end_date"] = _day(end_ns)
    for i, (_key, value) in enumerate(sorted((where or {}).items())):
        params[f"w{i}"] = str(value)
    return store.query(sql, params)


def _day(ns: int) -> str:
    """The UTC date of `ns` as ISO text (for the `date` partition column)."""
    import datetime as dt

    day = dt.datetime.fromtimestamp(ns // 1_000_000_000, tz=dt.UTC).date()
    return day.isoformat()
