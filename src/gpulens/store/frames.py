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
GPU rows; `pid` and `gpulens.model.ATTRIBUTION_LABELS` (`process_name`, `user`, `project`,
`team`, `job_id`, `container`, `pod`, `namespace`, `engine`) on the attributed process (an
interval whose top process does not match is left out). Values are always bound as query
parameters.

Every aggregated column is declared once (`Agg`, grouped by `_Part`); the query over raw rows
and the frames cache's queries (partial aggregates per 60 s, merged into coarser levels, read
back) are generated from those declarations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pyarrow as pa

from gpulens.clock import Clock
from gpulens.errors import StoreError
from gpulens.store.coverage import close_inner_tails, coverage_sql, tail_sql
from gpulens.store.frame_cache import (
    CACHE_STEP_NS,
    CACHE_STEP_S,
    CacheStats,
    cached_days,
    closed_days_to_cache,
    fresh_file,
    inputs_digest,
    write_frame,
)
from gpulens.store.frame_columns import (
    ANY,
    COUNT,
    FIRST,
    GPU_LABELS,
    LAST,
    MAX,
    MEAN,
    MIN,
    PROCESS_LABELS,
    SUM,
    Agg,
)
from gpulens.store.frame_columns import APP_GPU as _APP_GPU
from gpulens.store.frame_columns import APP_JOB as _APP_JOB
from gpulens.store.frame_columns import COLUMNS as COLUMNS
from gpulens.store.frame_columns import GPU as _GPU
from gpulens.store.frame_columns import HOST as _HOST
from gpulens.store.frame_columns import OUTPUT as _OUTPUT
from gpulens.store.frame_columns import PARTS as _PARTS
from gpulens.store.frame_columns import PROCESS as _PROCESS
from gpulens.store.frame_columns import Part as _Part
from gpulens.store.layout import NS_PER_DAY, LiveFiles, day_start_ns
from gpulens.store.location import StorePath, open_location
from gpulens.store.query import Queryable, Store

# -- the aggregated columns (declared in frame_columns.py) ------------------------------------
#
# Every per-bucket aggregate is declared once, as an `Agg` in one of the `_PARTS`; the SQL over
# raw rows (`_raw_sql`) and the frames cache's SQL (partial aggregates per 60 s in `_fine_sql`,
# re-aggregated to coarser levels in `_coarse_sql`, read back by `_CachePlan`) are all generated
# from it, so the two paths cannot disagree on which columns exist or how each is aggregated.


def _edge_sql(kind: str, value: str, order: str) -> str:
    fn = "arg_min" if kind == FIRST else "arg_max"
    return f"{fn}({value}, {order}) FILTER (WHERE {value} IS NOT NULL)"


def _agg_raw(a: Agg) -> str:
    """The aggregate over raw rows: the interval's value (the cache's 60 s partial, except a
    MEAN, which the cache keeps as sum and count: `_agg_partial`)."""
    e = a.source
    if a.kind == MEAN:
        return f"avg({e}) AS {a.name}"
    if a.kind in (FIRST, LAST):
        return f"{_edge_sql(a.kind, e, 'ts')} AS {a.name}"
    fn = {MIN: "min", MAX: "max", ANY: "any_value", COUNT: "count"}[a.kind]
    return f"{fn}({e}) AS {a.name}"


def _agg_partial(a: Agg) -> str:
    """The cache's partial aggregate over raw rows (per 60 s bucket)."""
    if a.kind == MEAN:
        return f"sum(({a.source})::DOUBLE) AS s_{a.name}, count({a.source}) AS n_{a.name}"
    return _agg_raw(a)


def _agg_merged(a: Agg, *, final: bool) -> str:
    """Partial aggregates of several cache rows (column `fb` orders them) merged into one: the
    partial aggregate of the coarser bucket, or with `final` the bucket's value."""
    n = a.name
    if a.kind == MEAN:
        if final:
            return f"sum(s_{n}) / nullif(sum(n_{n}), 0) AS {n}"
        return f"sum(s_{n}) AS s_{n}, sum(n_{n})::BIGINT AS n_{n}"
    if a.kind in (FIRST, LAST):
        return f"{_edge_sql(a.kind, n, 'fb')} AS {n}"
    if a.kind == COUNT:
        return f"sum({n})::BIGINT AS {n}"
    fn = {MIN: "min", MAX: "max", ANY: "any_value", SUM: "sum"}[a.kind]
    return f"{fn}({n}) AS {n}"


def _agg_one_row(a: Agg) -> str:
    """A bucket's value from its one cache row (no aggregation)."""
    n = a.name
    if a.kind == MEAN:
        return f"s_{n} / nullif(n_{n}, 0) AS {n}"
    if a.kind == COUNT:
        return f"{n}::BIGINT AS {n}"
    return n


def _raw_sql(part: _Part, filters: str) -> str:
    """The part's per-bucket aggregates over raw rows (bucket `b` = epoch_ns(ts) // step)."""
    keys = ", ".join(part.keys)
    aggs = ",\n    ".join(_agg_raw(a) for a in part.aggs)
    return f"""
  SELECT {keys}, epoch_ns(ts) // $step_ns AS b,
    {aggs}
  FROM {part.table}
  WHERE {part.where} AND {filters}
  GROUP BY {keys}, b"""


def _raw_gpu_sql(filters: str, one_row: bool, max_gap: str) -> str:
    """The GPU part over raw rows with the coverage rule's columns. When the step is the fine
    bucket, the rule runs on the step's own aggregates; otherwise a second, light pass counts
    readings and their first/last times per fine bucket (`$fine_ns`), the rule runs there, and
    its seconds are summed into the step (`$fine_k` fine buckets) and joined on."""
    base = _raw_sql(_GPU, filters)
    keys = ", ".join(_GPU.keys)
    if one_row:
        return coverage_sql(f"(SELECT *, b AS fb FROM ({base}))", _GPU.keys, max_gap, "fb")
    light = f"""(
  SELECT {keys}, epoch_ns(ts) // $fine_ns AS fb, count(*) AS samples,
    min(epoch_ns(ts)) AS ts_first, max(epoch_ns(ts)) AS ts_last
  FROM gpu
  WHERE {_GPU.where} AND {filters}
  GROUP BY {keys}, fb)"""
    covered = coverage_sql(light, _GPU.keys, max_gap, "fb // $fine_k")
    closed = close_inner_tails(f"({covered})", _GPU.keys, "$fine_k")
    cols = ", ".join(_agg_merged(a, final=True) for a in _GPU.derived)
    on = " AND ".join(f"c.{k} IS NOT DISTINCT FROM r.{k}" for k in _GPU.keys)
    derived = ", ".join(f"c.{a.name}" for a in _GPU.derived)
    return f"""
  SELECT r.*, {derived}
  FROM ({base}) r
  LEFT JOIN (
    SELECT {keys}, fb // $fine_k AS b, {cols}
    FROM ({closed})
    GROUP BY {keys}, b
  ) c ON {on} AND c.b = r.b"""


def _series_sql() -> str:
    """Per bucket, what needs its neighbours: the energy counter's increase (from the counter's
    first/last samples and the previous bucket's last) and the coverage of the open tail (from
    the next bucket's first reading; store/coverage.py)."""
    return f"""
  SELECT *,
    CASE
      WHEN prev_b = b - 1 AND prev_last IS NOT NULL AND e_last >= prev_last
        THEN e_last - prev_last
      WHEN e_last >= e_first THEN e_last - e_first
    END AS energy_j,
    {tail_sql()}
  FROM (
    SELECT *,
      lag(b) OVER w AS prev_b, lag(e_last) OVER w AS prev_last,
      lead(ts_first) OVER w AS next_first
    FROM g0
    WINDOW w AS (PARTITION BY host, gpu_uuid, mig_instance ORDER BY b)
  )"""


def _top_sql() -> str:
    """Per (GPU, bucket) from `p0`: the process with the largest peak memory (ties go to the
    lowest pid: by its number, a pid that is not one counting as 0, then by the pid itself),
    how many processes there were, and the sum of their peaks."""
    fields = ", ".join(f"{c} := {c}" for c in PROCESS_LABELS)
    top = ", ".join(f"top.{c} AS {c}" for c in PROCESS_LABELS)
    return f"""
    SELECT gpu_uuid, b, {top}, processes, process_memory_bytes
    FROM (
      SELECT gpu_uuid, b, arg_min(struct_pack({fields}), sort_key) AS top,
        count(*) AS processes, sum(mem) AS process_memory_bytes
      FROM (SELECT *, (-mem, coalesce(TRY_CAST(pid AS BIGINT), 0), pid) AS sort_key FROM p0)
      GROUP BY gpu_uuid, b
    )"""


def build_sql(
    where: Mapping[str, str] | None,
    bounded: tuple[bool, bool],
    cache: _CachePlan | None = None,
    *,
    fine_is_step: bool = True,
    max_gap: bool = False,
) -> tuple[str, int]:
    """The query and how many `where` parameters it binds ($w0, $w1, ...).

    Raw GPU rows are aggregated per fine bucket (`$fine_ns`; `fine_is_step` when that is the
    step), the coverage rule runs there, and `$fine_k` fine buckets make a step. `max_gap`: the
    cap is the `$max_gap_ns` parameter instead of twice the sampling interval.

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
    parts: dict[str, str] = {}
    for part in _PARTS:
        gpu = part is _GPU
        if gpu:
            cap = "$max_gap_ns" if max_gap else "NULL"
            parts[part.name] = _raw_gpu_sql(" AND ".join(gpu_filters), fine_is_step, cap)
        else:
            parts[part.name] = _raw_sql(part, span)
        if cache is not None:
            cached = cache.sql(part, " AND ".join(cached_gpu_filters) if gpu else "true")
            parts[part.name] += f"\n  UNION ALL BY NAME\n{cached}"
    sql = f"""
WITH g0 AS ({parts[_GPU.name]}
),
g AS ({_series_sql()}
),
p0 AS ({parts[_PROCESS.name]}
),
pa AS ({_top_sql()}
),
h AS ({parts[_HOST.name]}
),
ag AS ({parts[_APP_GPU.name]}
),
aj AS ({parts[_APP_JOB.name]}
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
    max_gap_s: float | None = None,
) -> pa.Table:
    """The interval frame of the GPU entities in `store` over [start_ns, end_ns).

    `covered_s` and `no_data_s` follow the coverage rule (store/coverage.py): each reading
    covers the time until the next reading of its GPU, capped at `max_gap_s` (default: twice
    the sampling interval); a lone snapshot covers nothing.

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
    if max_gap_s is not None and not max_gap_s > 0:
        raise ValueError(f"max_gap_s must be positive, got {max_gap_s!r}")
    stats = cache_stats if cache_stats is not None else CacheStats()
    plan = (  # the cache is written with the derived cap: a configured one reads raw rows
        _plan_cache(store, step_ns, start_ns, end_ns, stats)
        if use_cache and max_gap_s is None and isinstance(store, Store)
        else None
    )
    fine_ns = math.gcd(step_ns, CACHE_STEP_NS)
    fine_is_step, max_gap = fine_ns == step_ns, max_gap_s is not None
    bounded = (start_ns is not None, end_ns is not None)
    sql, _n = build_sql(where, bounded, fine_is_step=fine_is_step, max_gap=max_gap)
    params: dict[str, object] = {"step_ns": step_ns, "step_s": float(step_s)}
    if fine_ns != step_ns:
        params["fine_ns"] = fine_ns
        params["fine_k"] = step_ns // fine_ns
    if max_gap_s is not None:
        params["max_gap_ns"] = round(max_gap_s * 1e9)
    if start_ns is not None:
        params["start_ns"] = int(start_ns)
        params["start_date"] = _day(start_ns)
    if end_ns is not None:
        params["end_ns"] = int(end_ns)
        params["end_date"] = _day(end_ns)
    for i, (_key, value) in enumerate(sorted((where or {}).items())):
        params[f"w{i}"] = str(value)
    if plan is not None:
        cached_sql, _n = build_sql(where, bounded, plan, fine_is_step=fine_is_step, max_gap=max_gap)
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

#: the bucket lengths (seconds) each cache file holds partial aggregates at, coarsest first: the
#: 60 s buckets, and coarser ones re-aggregated from them so that a long report at 900 s or
#: 3600 s steps reads 15 or 60 times fewer rows (the level is the `lvl` column; `fb` counts
#: buckets of that level since the epoch)
CACHE_LEVELS_S: tuple[int, ...] = (3600, 900, CACHE_STEP_S)
#: rows per Parquet row group of a cache file: small enough that a level's rows are read
#: without the other levels' (row groups are skipped by their `part` / `lvl` statistics)
CACHE_ROW_GROUP = 32_768


def _fine_sql() -> str:
    """One day's partial aggregates per 60 s bucket `fb`, tagged by `part` (no order); the GPU
    part's rows carry the coverage rule's columns."""
    span = (
        "ts >= make_timestamp_ns($start_ns) AND ts < make_timestamp_ns($end_ns) "
        "AND date = $day::DATE"
    )
    selects = []
    for part in _PARTS:
        keys = ", ".join(part.keys)
        aggs = ",\n    ".join(_agg_partial(a) for a in part.aggs)
        selects.append(f"""
  SELECT '{part.name}' AS part, {keys}, epoch_ns(ts) // {CACHE_STEP_NS} AS fb,
    {aggs}
  FROM {part.table}
  WHERE {part.where} AND {span}
  GROUP BY {keys}, fb""")
        if part is _GPU:
            selects[-1] = coverage_sql(f"({selects[-1]})", part.keys)
    return "\nUNION ALL BY NAME".join(selects) + "\n"


def _coarse_sql(level_s: int) -> str:
    """The partial aggregates of CTE `fine` (60 s) merged into buckets of `level_s` seconds:
    the same columns, so they re-aggregate the same way."""
    k = level_s // CACHE_STEP_S
    selects = []
    for part in _PARTS:
        keys = ", ".join(part.keys)
        aggs = ",\n    ".join(_agg_merged(a, final=False) for a in part.merged)
        selects.append(f"""
  SELECT '{part.name}' AS part, {level_s}::BIGINT AS lvl, fb // {k} AS fb, {keys},
    {aggs}
  FROM fine WHERE part = '{part.name}'
  GROUP BY {keys}, fb // {k}""")
    return "\nUNION ALL BY NAME".join(selects)


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

    def sql(self, part: _Part, filters: str = "true") -> str:
        """`part`'s per-bucket aggregates (bucket `b`) from the cache rows of its level."""
        keys = ", ".join(part.keys)
        if self._one_row:
            aggs = ",\n    ".join(_agg_one_row(a) for a in part.merged)
            return f"""
  SELECT {keys}, fb AS b,
    {aggs}
  FROM {self._scan(part.name)} AND {filters}"""
        k = self.step_ns // (self.level_s * 1_000_000_000)
        aggs = ",\n    ".join(_agg_merged(a, final=True) for a in part.merged)
        source = f"{self._scan(part.name)} AND {filters}"
        if part.derived:
            source = f"({close_inner_tails(f'(SELECT * FROM {source})', part.keys, str(k))})"
        return f"""
  SELECT {keys}, fb // {k} AS b,
    {aggs}
  FROM {source}
  GROUP BY {keys}, b"""


def _plan_cache(
    store: Store, step_ns: int, start_ns: int | None, end_ns: int | None, stats: CacheStats
) -> _CachePlan | None:
    """The fresh cache days inside the window, merged into step-aligned ranges; None if none."""
    if step_ns % CACHE_STEP_NS:
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


def materialize_day(
    store_or_data_dir: Store | StorePath, day: date, step_s: int = CACHE_STEP_S
) -> Path:
    """Compute and write the frames cache file of the UTC day `day`; returns its path.

    Meant for closed days (an open day's file goes stale with its next segment). ValueError for
    a step other than 60 s (the only one `gpu_intervals` reads).
    """
    if step_s != CACHE_STEP_S:
        raise ValueError(f"the frames cache is kept at step_s={CACHE_STEP_S}, got {step_s!r}")
    if isinstance(store_or_data_dir, Store):
        return _materialize(store_or_data_dir, day.isoformat())
    with Store(store_or_data_dir) as store:
        return _materialize(store, day.isoformat())


def _materialize(store: Store, day: str) -> Path:
    digest = inputs_digest(store.data_dir, day)  # before reading: a later change makes it stale
    lo = day_start_ns(day)
    table = store.query(_day_sql(), {"start_ns": lo, "end_ns": lo + NS_PER_DAY, "day": day})
    return write_frame(store.data_dir, day, table, digest, row_group_size=CACHE_ROW_GROUP)


def materialize_closed_days(data_dir: StorePath, *, clock: Clock | None = None) -> tuple[int, int]:
    """Write the frames cache of every closed day with raw data and no fresh cache file.

    Returns (days written, days that failed); a failing day (an unreadable raw file, a full
    disk) is skipped so the others still get their cache.
    """
    days = closed_days_to_cache(open_location(data_dir), clock=clock)
    if not days:
        return 0, 0  # nothing to write: no DuckDB connection opened
    written = failed = 0
    with Store(open_location(data_dir)) as store:
        for day in days:
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
