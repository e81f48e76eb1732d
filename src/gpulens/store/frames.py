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
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pyarrow as pa

from gpulens.catalog import POWER_REASON_BITS, THERMAL_REASON_BITS
from gpulens.clock import Clock, SystemClock
from gpulens.errors import StoreError
from gpulens.store.frame_cache import (
    CACHE_STEP_S,
    INPUT_KINDS,
    CacheStats,
    cached_days,
    fresh_file,
    inputs_digest,
    write_frame,
)
from gpulens.store.layout import NS_PER_DAY, LiveFiles, day_of, day_start_ns, partitions
from gpulens.store.query import Queryable, Store

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


def _process_sql(filters: str) -> tuple[str, str]:
    """(p0, pa): per (GPU, bucket, pid) the peak memory; per (GPU, bucket) the top process."""
    labels = ", ".join(f"any_value({c}) AS {c}" for c in _ATTR_LABELS if c != "pid")
    fields = ", ".join(f"{c} := {c}" for c in _ATTR_LABELS)
    top = ", ".join(f"top.{c} AS {c}" for c in _ATTR_LABELS)
    p0 = f"""
    SELECT gpu_uuid, epoch_ns(ts) // $step_ns AS b, pid, {labels},
      max(process_memory_used_bytes) AS mem
    FROM process
    WHERE gpu_uuid IS NOT NULL AND process_memory_used_bytes IS NOT NULL AND {filters}
    GROUP BY gpu_uuid, b, pid"""
    pa_ = f"""
    SELECT gpu_uuid, b, {top}, processes, process_memory_bytes
    FROM (
      SELECT gpu_uuid, b, arg_max(struct_pack({fields}), sort_key) AS top,
        count(*) AS processes, sum(mem) AS process_memory_bytes
      FROM (SELECT *, (mem, -coalesce(TRY_CAST(pid AS BIGINT), 0)) AS sort_key FROM p0)
      GROUP BY gpu_uuid, b
    )"""
    return p0, pa_


def _app_sql(filters: str) -> tuple[str, str]:
    """(ag, aj): app readings per (job, GPU, bucket) and job-wide per (job, bucket)."""
    aggs = ", ".join(f"{agg}({m}) AS {c}" for c, m, agg in _APP)
    ag = f"""
    SELECT job_id, gpu_uuid, epoch_ns(ts) // $step_ns AS b, {aggs}
    FROM app WHERE job_id IS NOT NULL AND gpu_uuid IS NOT NULL AND {filters}
    GROUP BY job_id, gpu_uuid, b"""
    aj = f"""
    SELECT job_id, epoch_ns(ts) // $step_ns AS b, {aggs}
    FROM app WHERE job_id IS NOT NULL AND gpu_uuid IS NULL AND {filters}
    GROUP BY job_id, b"""
    return ag, aj


def _host_sql(filters: str) -> str:
    return f"""
    SELECT host, epoch_ns(ts) // $step_ns AS b,
      avg(host_cpu_util_ratio) AS host_cpu, avg(host_cpu_iowait_ratio) AS host_iowait
    FROM host
    WHERE (host_cpu_util_ratio IS NOT NULL OR host_cpu_iowait_ratio IS NOT NULL) AND {filters}
    GROUP BY host, b"""


def build_sql(
    where: Mapping[str, str] | None,
    bounded: tuple[bool, bool],
    cache: _CachePlan | None = None,
) -> tuple[str, int]:
    """The query and how many `where` parameters it binds ($w0, $w1, ...).

    With `cache`, the buckets inside its ranges come from the cache files (re-aggregated from
    60 s partial aggregates) and only the rest from raw rows; everything after the per-bucket
    aggregates (energy carried across buckets, attribution, joins) runs on the union.
    """
    time_parts = ["true"]
    if bounded[0]:
        time_parts.append("ts >= make_timestamp_ns($start_ns) AND date >= $start_date::DATE")
    if bounded[1]:
        time_parts.append("ts < make_timestamp_ns($end_ns) AND date <= $end_date::DATE")
    if cache is not None:
        time_parts.extend(cache.raw_exclusions())
    span = " AND ".join(time_parts)
    gpu_filters = [span]
    cached_gpu_filters = ["true"]
    final_filters = ["true"]
    items = sorted((where or {}).items())
    for i, (key, _value) in enumerate(items):
        if key in GPU_LABELS:
            gpu_filters.append(f"{key} = $w{i}")
            cached_gpu_filters.append(f"{key} = $w{i}")
        elif key in PROCESS_LABELS:
            final_filters.append(f"pa.{key} = $w{i}")
        else:
            allowed = ", ".join(GPU_LABELS + PROCESS_LABELS)
            raise ValueError(f"cannot filter frames on {key!r}: use one of {allowed}")
    select = ",\n  ".join(f"CAST({expr} AS {t}) AS {c}" for c, expr, t in _OUTPUT)
    g0 = _gpu_sql(" AND ".join(gpu_filters))
    p0, pa_ = _process_sql(span)
    h = _host_sql(span)
    ag, aj = _app_sql(span)
    if cache is not None:
        g0 += f"\n  UNION ALL BY NAME\n{cache.gpu_sql(' AND '.join(cached_gpu_filters))}"
        p0 += f"\n  UNION ALL BY NAME\n{cache.process_sql()}"
        h += f"\n  UNION ALL BY NAME\n{cache.host_sql()}"
        ag += f"\n  UNION ALL BY NAME\n{cache.app_sql(by_gpu=True)}"
        aj += f"\n  UNION ALL BY NAME\n{cache.app_sql(by_gpu=False)}"
    sql = f"""
WITH g0 AS ({g0}
),
g AS ({_energy_sql()}
),
p0 AS ({p0}
),
pa AS ({pa_}
),
h AS ({h}
),
ag AS ({ag}
),
aj AS ({aj}
)
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
    store: Queryable,
    step_s: float = 60.0,
    start_ns: int | None = None,
    end_ns: int | None = None,
    where: Mapping[str, str] | None = None,
    *,
    use_cache: bool = True,
    cache_stats: CacheStats | None = None,
) -> pa.Table:
    """The interval frame of the GPU entities in `store` over [start_ns, end_ns).

    Intervals are aligned to the epoch (`start_ns` = a multiple of the step). ValueError for a
    step that is not positive or a `where` key that is not a filterable label.

    When `step_s` is a multiple of 60 s, whole days inside the window that have a fresh frames
    cache file (see `materialize_day`) are read from it instead of the raw rows; the result is
    the same within float rounding. `use_cache=False` always reads raw rows; `cache_stats`
    (a `CacheStats`) is filled in with what the cache contributed, stale or unreadable cache
    files, and failed cache queries that were answered from raw rows instead.
    """
    step_ns = round(step_s * 1e9)
    if step_ns <= 0:
        raise ValueError(f"step_s must be positive, got {step_s!r}")
    stats = cache_stats if cache_stats is not None else CacheStats()
    plan = (
        _plan_cache(store, step_ns, start_ns, end_ns, stats)
        if use_cache and isinstance(store, Store)
        else None
    )
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
    if plan is not None:
        cached_sql, _n = build_sql(where, (start_ns is not None, end_ns is not None), plan)
        try:
            result = store.query(cached_sql, params)
        except StoreError as exc:  # a cache file damaged or replaced under the query
            stats.fallbacks += 1
            stats.last_error = str(exc)
        else:
            stats.days_cached += len(plan.days)
            return result
    return store.query(sql, params)


# -- the frames cache (frame_cache.py has the files; this is the SQL) -------------------------

_FINE_NS = CACHE_STEP_S * 1_000_000_000
#: the bucket lengths (seconds) each cache file holds partial aggregates at, coarsest first: the
#: 60 s buckets, and coarser ones re-aggregated from them so that a long report at 900 s or
#: 3600 s steps reads 15 or 60 times fewer rows (the level is the `lvl` column; `fb` counts
#: buckets of that level since the epoch)
CACHE_LEVELS_S: tuple[int, ...] = (3600, 900, CACHE_STEP_S)
#: rows per Parquet row group of a cache file: small enough that a level's rows are read
#: without the other levels' (row groups are skipped by their `part` / `lvl` statistics)
CACHE_ROW_GROUP = 32_768
# partial aggregates kept per 60 s bucket: (name, expression over a gpu row) summed and counted
_THROTTLE: tuple[tuple[str, str], ...] = (
    (
        "throttle_power",
        f"coalesce(throttle_power_ratio, "
        f"((clocks_event_reasons::BIGINT & {POWER_REASON_BITS}) <> 0)::DOUBLE)",
    ),
    (
        "throttle_thermal",
        f"coalesce(throttle_thermal_ratio, "
        f"((clocks_event_reasons::BIGINT & {THERMAL_REASON_BITS}) <> 0)::DOUBLE)",
    ),
    ("clock_idle", "(clocks_event_reasons::BIGINT & 1)::DOUBLE"),
)
_SUMMED: tuple[tuple[str, str], ...] = (
    *_MEANS,
    ("nvlink_rx", "nvlink_rx_bytes_per_second"),
    ("nvlink_tx", "nvlink_tx_bytes_per_second"),
    *_THROTTLE,
)
# (name, aggregate, gpu metric): min/max, which re-aggregate with themselves
_EXTREMES: tuple[tuple[str, str, str], ...] = (
    ("sm_active_min", "min", "sm_active_ratio"),
    ("sm_active_max", "max", "sm_active_ratio"),
    ("duty_min", "min", "gpu_util_ratio"),
    ("sm_clock_max_hz", "max", "sm_clock_max_hertz"),
    ("power_limit_w", "max", "power_limit_watts"),
    ("memory_total_bytes", "max", "memory_total_bytes"),
    ("memory_used_bytes", "max", "memory_used_bytes"),
    ("e_first", "min", "energy_joules"),
    ("e_last", "max", "energy_joules"),
)
_HOST: tuple[tuple[str, str], ...] = (
    ("host_cpu", "host_cpu_util_ratio"),
    ("host_iowait", "host_cpu_iowait_ratio"),
)


def _fine_sql() -> str:
    """One day's partial aggregates per 60 s bucket `fb`, tagged by `part` (no order)."""
    fb = f"epoch_ns(ts) // {_FINE_NS} AS fb"
    span = (
        "ts >= make_timestamp_ns($start_ns) AND ts < make_timestamp_ns($end_ns) "
        "AND date = $day::DATE"
    )
    sums = ",\n    ".join(f"sum(({e})::DOUBLE) AS s_{c}, count({e}) AS n_{c}" for c, e in _SUMMED)
    extremes = ",\n    ".join(f"{agg}({m}) AS {c}" for c, agg, m in _EXTREMES)
    labels = ", ".join(f"any_value({c}) AS {c}" for c in _ATTR_LABELS if c != "pid")
    host = ", ".join(f"sum({m}) AS s_{c}, count({m}) AS n_{c}" for c, m in _HOST)

    def app(by_gpu: bool) -> str:
        aggs = ", ".join(
            f"max({m}) AS x_{c}" if agg == "max" else f"sum({m}) AS s_{c}, count({m}) AS n_{c}"
            for c, m, agg in _APP
        )
        keys = "job_id, gpu_uuid" if by_gpu else "job_id"
        null = "IS NOT NULL" if by_gpu else "IS NULL"
        return f"""
  SELECT '{"app_gpu" if by_gpu else "app_job"}' AS part, {keys}, {fb}, {aggs}
  FROM app WHERE job_id IS NOT NULL AND gpu_uuid {null} AND {span}
  GROUP BY {keys}, fb"""

    return f"""
  SELECT 'gpu' AS part, host, gpu_uuid, mig_instance, {fb},
    any_value(gpu_index) AS gpu_index, any_value(gpu_model) AS gpu_model,
    any_value(parent_uuid) AS parent_uuid, count(*) AS samples,
    {sums},
    {extremes},
    arg_min(memory_used_bytes, ts) FILTER (WHERE memory_used_bytes IS NOT NULL)
      AS memory_used_first,
    arg_max(memory_used_bytes, ts) FILTER (WHERE memory_used_bytes IS NOT NULL)
      AS memory_used_last
  FROM gpu WHERE {span}
  GROUP BY host, gpu_uuid, mig_instance, fb
UNION ALL BY NAME
  SELECT 'process' AS part, gpu_uuid, {fb}, pid, {labels},
    max(process_memory_used_bytes) AS mem
  FROM process
  WHERE gpu_uuid IS NOT NULL AND process_memory_used_bytes IS NOT NULL AND {span}
  GROUP BY gpu_uuid, fb, pid
UNION ALL BY NAME
  SELECT 'host' AS part, host, {fb}, {host}
  FROM host
  WHERE (host_cpu_util_ratio IS NOT NULL OR host_cpu_iowait_ratio IS NOT NULL) AND {span}
  GROUP BY host, fb
UNION ALL BY NAME{app(True)}
UNION ALL BY NAME{app(False)}
"""


def _coarse_sql(level_s: int) -> str:
    """The partial aggregates of CTE `fine` (60 s) summed into buckets of `level_s` seconds:
    the same columns, so they re-aggregate the same way."""
    k = level_s // CACHE_STEP_S
    fb = f"fb // {k}"
    head = f"{level_s}::BIGINT AS lvl, {fb} AS fb"
    sums = ",\n    ".join(f"sum(s_{c}) AS s_{c}, sum(n_{c})::BIGINT AS n_{c}" for c, _ in _SUMMED)
    extremes = ",\n    ".join(f"{agg}({c}) AS {c}" for c, agg, _ in _EXTREMES)
    labels = ", ".join(f"any_value({c}) AS {c}" for c in _ATTR_LABELS if c != "pid")
    host = ", ".join(f"sum(s_{c}) AS s_{c}, sum(n_{c})::BIGINT AS n_{c}" for c, _ in _HOST)

    def app(by_gpu: bool) -> str:
        aggs = ", ".join(
            f"max(x_{c}) AS x_{c}"
            if agg == "max"
            else f"sum(s_{c}) AS s_{c}, sum(n_{c})::BIGINT AS n_{c}"
            for c, _, agg in _APP
        )
        keys = "job_id, gpu_uuid" if by_gpu else "job_id"
        part = "app_gpu" if by_gpu else "app_job"
        return f"""
  SELECT '{part}' AS part, {head}, {keys}, {aggs}
  FROM fine WHERE part = '{part}'
  GROUP BY {keys}, {fb}"""

    return f"""
  SELECT 'gpu' AS part, {head}, host, gpu_uuid, mig_instance,
    any_value(gpu_index) AS gpu_index, any_value(gpu_model) AS gpu_model,
    any_value(parent_uuid) AS parent_uuid, sum(samples)::BIGINT AS samples,
    {sums},
    {extremes},
    arg_min(memory_used_first, fb) FILTER (WHERE memory_used_first IS NOT NULL)
      AS memory_used_first,
    arg_max(memory_used_last, fb) FILTER (WHERE memory_used_last IS NOT NULL)
      AS memory_used_last
  FROM fine WHERE part = 'gpu'
  GROUP BY host, gpu_uuid, mig_instance, {fb}
UNION ALL BY NAME
  SELECT 'process' AS part, {head}, gpu_uuid, pid, {labels}, max(mem) AS mem
  FROM fine WHERE part = 'process'
  GROUP BY gpu_uuid, {fb}, pid
UNION ALL BY NAME
  SELECT 'host' AS part, {head}, host, {host}
  FROM fine WHERE part = 'host'
  GROUP BY host, {fb}
UNION ALL BY NAME{app(True)}
UNION ALL BY NAME{app(False)}"""


def _day_sql() -> str:
    """One day's cache table: the 60 s partial aggregates and every coarser level, ordered by
    part and level so that each level's rows sit in their own row groups."""
    coarse = "".join(
        f"\nUNION ALL BY NAME{_coarse_sql(level)}"
        for level in CACHE_LEVELS_S
        if level != CACHE_STEP_S
    )
    return f"""
WITH fine AS MATERIALIZED ({_fine_sql()}
)
SELECT {CACHE_STEP_S}::BIGINT AS lvl, * FROM fine{coarse}
ORDER BY part, lvl, host, gpu_uuid, mig_instance, job_id, fb
"""


@dataclass(frozen=True, slots=True)
class _CachePlan:
    """Which buckets come from which cache files: `ranges` are [lo, hi) in ns, multiples of
    the step, each covered by the fresh cache files of `days`; `level_s` is the coarsest cache
    level the step is a multiple of (its rows are the ones read)."""

    step_ns: int
    level_s: int
    ranges: tuple[tuple[int, int], ...]
    days: tuple[str, ...]  # days wholly inside a range (the raw side skips their partitions)
    files: tuple[Path, ...]

    def raw_exclusions(self) -> list[str]:
        parts = [f"NOT (ts >= make_timestamp_ns({lo}) AND ts < make_timestamp_ns({hi}))"
                 for lo, hi in self.ranges]  # fmt: skip
        if self.days:
            listing = ", ".join(f"DATE '{d}'" for d in self.days)
            parts.append(f"date NOT IN ({listing})")
        return parts

    def _scan(self, part: str) -> str:
        listing = ", ".join("'" + str(p).replace("'", "''") + "'" for p in self.files)
        level_ns = self.level_s * 1_000_000_000
        fine = " OR ".join(
            f"(fb >= {lo // level_ns} AND fb < {hi // level_ns})" for lo, hi in self.ranges
        )
        return (
            f"read_parquet([{listing}], union_by_name = true) "
            f"WHERE part = '{part}' AND lvl = {self.level_s} AND ({fine})"
        )

    @property
    def _one_row(self) -> bool:
        """Each bucket is one cache row (the step is the level): nothing to re-aggregate, the
        partial sums are divided in place (the same numbers, without a hash aggregation)."""
        return self.step_ns == self.level_s * 1_000_000_000

    @property
    def _b(self) -> str:
        if self._one_row:
            return "fb AS b"
        return f"fb // {self.step_ns // (self.level_s * 1_000_000_000)} AS b"

    def _agg(self, fn: str, expr: str) -> str:
        return expr if self._one_row else f"{fn}({expr})"

    def _ratio(self, name: str) -> str:
        return f"{self._agg('sum', f's_{name}')} / nullif({self._agg('sum', f'n_{name}')}, 0)"

    def _edge(self, fn: str, name: str) -> str:
        """The first / last known value of `name` over the bucket's cache rows."""
        if self._one_row:
            return name
        return f"{fn}({name}, fb) FILTER (WHERE {name} IS NOT NULL)"

    def _group(self, keys: str) -> str:
        return "" if self._one_row else f"\n  GROUP BY {keys}"

    def gpu_sql(self, filters: str) -> str:
        means = ",\n    ".join(f"{self._ratio(c)} AS {c}" for c, _ in _MEANS)
        extremes = ",\n    ".join(f"{self._agg(agg, c)} AS {c}" for c, agg, _ in _EXTREMES)
        throttle = ", ".join(f"{self._ratio(c)} AS {c}" for c, _ in _THROTTLE)
        nvlink_n = f"{self._agg('sum', 'n_nvlink_rx')} + {self._agg('sum', 'n_nvlink_tx')}"
        any_ = "any_value"
        return f"""
  SELECT host, gpu_uuid, mig_instance, {self._b},
    {self._agg(any_, "gpu_index")} AS gpu_index, {self._agg(any_, "gpu_model")} AS gpu_model,
    {self._agg(any_, "parent_uuid")} AS parent_uuid,
    {self._agg("sum", "samples")}::BIGINT AS samples,
    {means},
    {extremes},
    {self._edge("arg_min", "memory_used_first")} AS memory_used_first,
    {self._edge("arg_max", "memory_used_last")} AS memory_used_last,
    CASE WHEN {nvlink_n} > 0
      THEN coalesce({self._ratio("nvlink_rx")}, 0) + coalesce({self._ratio("nvlink_tx")}, 0)
      END AS nvlink_bps,
    {throttle}
  FROM {self._scan("gpu")} AND {filters}{self._group("host, gpu_uuid, mig_instance, b")}"""

    def process_sql(self) -> str:
        labels = ", ".join(
            f"{self._agg('any_value', c)} AS {c}" for c in _ATTR_LABELS if c != "pid"
        )
        return f"""
  SELECT gpu_uuid, {self._b}, pid, {labels}, {self._agg("max", "mem")} AS mem
  FROM {self._scan("process")}{self._group("gpu_uuid, b, pid")}"""

    def host_sql(self) -> str:
        aggs = ", ".join(f"{self._ratio(c)} AS {c}" for c, _ in _HOST)
        return f"""
  SELECT host, {self._b}, {aggs}
  FROM {self._scan("host")}{self._group("host, b")}"""

    def app_sql(self, *, by_gpu: bool) -> str:
        aggs = ", ".join(
            f"{self._agg('max', f'x_{c}')} AS {c}" if agg == "max" else f"{self._ratio(c)} AS {c}"
            for c, _, agg in _APP
        )
        keys = "job_id, gpu_uuid" if by_gpu else "job_id"
        return f"""
  SELECT {keys}, {self._b}, {aggs}
  FROM {self._scan("app_gpu" if by_gpu else "app_job")}{self._group(f"{keys}, b")}"""


def _plan_cache(
    store: Store, step_ns: int, start_ns: int | None, end_ns: int | None, stats: CacheStats
) -> _CachePlan | None:
    """The fresh cache days inside the window, merged into step-aligned ranges; None if none."""
    if step_ns % _FINE_NS:
        return None
    level_s = next(lv for lv in CACHE_LEVELS_S if step_ns % (lv * 1_000_000_000) == 0)
    candidates = cached_days(store.data_dir)
    if not candidates:
        return None
    live = LiveFiles(store.data_dir)
    fresh: list[tuple[int, str, Path]] = []
    for day, _part in candidates:
        lo = day_start_ns(day)
        if (start_ns is not None and lo < start_ns) or (end_ns is not None
                                                        and lo + NS_PER_DAY > end_ns):  # fmt: skip
            continue
        path = fresh_file(store.data_dir, day, live, stats)
        if path is not None:
            fresh.append((lo, day, path))
    runs: list[list[tuple[int, str, Path]]] = []
    for item in fresh:  # consecutive days form one run
        if runs and runs[-1][-1][0] + NS_PER_DAY == item[0]:
            runs[-1].append(item)
        else:
            runs.append([item])
    ranges: list[tuple[int, int]] = []
    days: list[str] = []
    files: list[Path] = []
    for run in runs:
        # a step that does not divide a day: only whole steps inside the run come from cache
        lo = -(-run[0][0] // step_ns) * step_ns
        hi = (run[-1][0] + NS_PER_DAY) // step_ns * step_ns
        if lo >= hi:
            continue
        ranges.append((lo, hi))
        files.extend(p for _, _, p in run)
        days.extend(d for t, d, _ in run if t >= lo and t + NS_PER_DAY <= hi)
    if not ranges:
        return None
    return _CachePlan(step_ns, level_s, tuple(ranges), tuple(days), tuple(files))


def materialize_day(store_or_data_dir: Store | Path, day: date, step_s: int = CACHE_STEP_S) -> Path:
    """Compute and write the frames cache file of the UTC day `day`; returns its path.

    Meant for closed days (an open day's file goes stale with its next segment). ValueError for
    a step other than 60 s (the only one `gpu_intervals` reads).
    """
    if step_s != CACHE_STEP_S:
        raise ValueError(f"the frames cache is kept at step_s={CACHE_STEP_S}, got {step_s!r}")
    if isinstance(store_or_data_dir, Store):
        return _materialize(store_or_data_dir, day.isoformat())
    with Store(Path(store_or_data_dir)) as store:
        return _materialize(store, day.isoformat())


def _materialize(store: Store, day: str) -> Path:
    digest = inputs_digest(store.data_dir, day)  # before reading: a later change makes it stale
    lo = day_start_ns(day)
    table = store.query(_day_sql(), {"start_ns": lo, "end_ns": lo + NS_PER_DAY, "day": day})
    return write_frame(store.data_dir, day, table, digest, row_group_size=CACHE_ROW_GROUP)


def materialize_closed_days(data_dir: Path, *, clock: Clock | None = None) -> tuple[int, int]:
    """Write the frames cache of every closed day with raw data and no fresh cache file.

    Returns (days written, days that failed); a failing day (an unreadable raw file, a full
    disk) is skipped so the others still get their cache.
    """
    today = day_of((clock or SystemClock()).now_ns())
    data_dir = Path(data_dir)
    days = sorted({d for kind in INPUT_KINDS for d, _ in partitions(data_dir, kind)})
    live = LiveFiles(data_dir)
    written = failed = 0
    with Store(data_dir) as store:
        for day in days:
            if day >= today or fresh_file(data_dir, day, live) is not None:
                continue
            try:
                _materialize(store, day)
            except StoreError:
                failed += 1
            else:
                written += 1
    return written, failed


def _day(ns: int) -> str:
    """The UTC date of `ns` as ISO text (for the `date` partition column)."""
    import datetime as dt

    day = dt.datetime.fromtimestamp(ns // 1_000_000_000, tz=dt.UTC).date()
    return day.isoformat()
