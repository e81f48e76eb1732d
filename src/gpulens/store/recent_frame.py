"""The interval frame of a `RecentWindow`, computed with numpy over its Arrow tables.

`recent_intervals(window, step_s, start_ns, end_ns)` returns what
`gpulens.store.frames.gpu_intervals(window, step_s, start_ns, end_ns, use_cache=False)` returns
(the same columns, Arrow types, row order and values, floats within rounding) without a query
engine: a live refresh of a few minutes of readings does not need DuckDB's ~40 MB of library
and heap, nor its planning per query. Every column comes from the declarations in
`gpulens.store.frame_columns` (the same ones the SQL is generated from):

- each part (GPU, process, host, per-GPU and job-wide app readings) is grouped by its keys and
  bucket `ts // step` with one sort, and every `Agg` aggregated per group (MEAN, MIN, MAX,
  FIRST / LAST non-null by time, ANY non-null, COUNT), its computed sources through
  `Agg.compute`;
- the coverage rule (store/coverage.py) per GPU bucket, the open tail resolved against the
  GPU's next bucket, and the energy counter's increase from the previous adjacent bucket
  (store/frames.py's `_series_sql`);
- attribution: per (GPU, bucket) the process with the largest peak memory (ties to the lowest
  pid), the number of processes and the sum of their peaks; host context by (host, bucket);
  app context by (job of the attributed process, GPU, bucket), job-wide readings filling in;
- the output columns in `OUTPUT` order, computed expressions through `OUTPUT_NUMPY`.

Steps whose fine bucket is the step itself (a step that divides 60 s, or 60 s) are computed
here; any other step (the coverage rule would run on finer buckets than the step) is handed to
`gpu_intervals`, which imports DuckDB. No `where` filters and no configured gap cap: the live
view uses neither.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.model import Kind
from gpulens.store.coverage import NS_PER_DAY
from gpulens.store.frame_cache import CACHE_STEP_S
from gpulens.store.frame_columns import (
    ANY,
    APP_GPU,
    APP_JOB,
    COUNT,
    FIRST,
    GPU,
    HOST,
    LAST,
    MAX,
    MEAN,
    MIN,
    OUTPUT,
    OUTPUT_NUMPY,
    PROCESS,
    Agg,
    Part,
)
from gpulens.store.schema import TS

if TYPE_CHECKING:
    from gpulens.store.recent import RecentWindow

_FINE_NS = CACHE_STEP_S * 1_000_000_000
_ARROW_TYPES = {"BIGINT": pa.int64(), "DOUBLE": pa.float64(), "VARCHAR": pa.string()}
_ONE_AGG = re.compile(r"(g|pa|h)\.(\w+)")
_APP_FILL = re.compile(r"coalesce\(ag\.(\w+), aj\.\1\)")
_INT = re.compile(r"\s*[+-]?[0-9]+\s*")
_I64_MAX = 2**63 - 1


def schema() -> pa.Schema:
    """The frame's Arrow schema (what DuckDB returns for `frames.OUTPUT`'s types)."""
    return pa.schema([pa.field(c, _ARROW_TYPES[t]) for c, _, t in OUTPUT])


def recent_intervals(
    window: RecentWindow,
    step_s: float = 60.0,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> pa.Table:
    """The interval frame of the GPU entities in `window` over [start_ns, end_ns): the table
    `gpu_intervals(window, step_s, start_ns, end_ns, use_cache=False)` returns. ValueError for
    a step that is not positive."""
    step_ns = round(step_s * 1e9)
    if step_ns <= 0:
        raise ValueError(f"step_s must be positive, got {step_s!r}")
    if math.gcd(step_ns, _FINE_NS) != step_ns:  # coverage on finer buckets: the SQL path
        from gpulens.store.frames import gpu_intervals

        return gpu_intervals(window, step_s, start_ns, end_ns, use_cache=False)
    span = (start_ns, end_ns)

    def table(kind: Kind, *parts: Part) -> pa.Table:
        needed = {c for p in parts for c in _inputs(p)}
        return window.table(kind, needed, since_ns=start_ns)

    g = _Grouped.of(table(Kind.GPU, GPU), GPU, step_ns, span)
    if g.n == 0:
        return schema().empty_table()
    _coverage(g)
    _series(g)
    top = _top(_Grouped.of(table(Kind.PROCESS, PROCESS), PROCESS, step_ns, span))
    host = _Grouped.of(table(Kind.HOST, HOST), HOST, step_ns, span)
    app = table(Kind.APP, APP_GPU, APP_JOB)
    app_gpu = _Grouped.of(app, APP_GPU, step_ns, span)
    app_job = _Grouped.of(app, APP_JOB, step_ns, span)
    joined = _join(g, top, host, app_gpu, app_job, step_ns, float(step_s))
    return pa.table([_output(c, expr, t, joined) for c, expr, t in OUTPUT], schema=schema())


def _inputs(part: Part) -> set[str]:
    """The raw columns `part` reads: its keys, row conditions and every aggregate's sources
    (a computed source's, by running its `compute` on empty columns)."""
    names = {*part.keys, *part.present, *part.absent, *part.any_present}
    for a in part.aggs:
        if a.compute is not None:
            a.compute(lambda name: names.add(name) or np.zeros(0))  # type: ignore[func-returns-value]
        elif a.source != "*":
            names.add(a.source)
    names.discard(TS)
    return names


# -- grouping ------------------------------------------------------------------------------------


def _ranks(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Each row's rank among the column's distinct values (byte order, as DuckDB orders
    VARCHAR), nulls after every value."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    encoded = pc.dictionary_encode(array)
    dictionary = encoded.dictionary
    order = np.asarray(pc.sort_indices(dictionary), dtype=np.int64)
    rank = np.empty(len(dictionary) + 1, dtype=np.int64)
    rank[order] = np.arange(len(dictionary))
    rank[len(dictionary)] = len(dictionary)
    indices = pc.fill_null(encoded.indices, len(dictionary))
    return rank[np.asarray(indices, dtype=np.int64)]


def _floats(column: pa.ChunkedArray) -> np.ndarray:
    """A metric column as float64, NaN where null."""
    if pa.types.is_null(column.type):
        return np.full(len(column), np.nan)
    column = column.cast(pa.float64())
    if column.null_count:
        column = pc.fill_null(column, np.nan)
    return np.asarray(column.to_numpy(), dtype=np.float64)


def _valid(table: pa.Table, name: str) -> np.ndarray:
    if name not in table.column_names:
        return np.zeros(table.num_rows, dtype=bool)
    return np.asarray(pc.is_valid(table.column(name)).to_numpy(zero_copy_only=False), dtype=bool)


@dataclass
class _Grouped:
    """One part's per-bucket aggregates: `n` groups in (keys..., bucket) order, nulls last; the
    key values (`keys`, strings or None per group), the bucket `b`, each key's rank codes and
    the aggregated columns (numpy, NaN = null; string columns as Arrow arrays)."""

    n: int
    keys: dict[str, list[str | None]]
    codes: list[np.ndarray]
    b: np.ndarray
    cols: dict[str, Any]

    @classmethod
    def of(
        cls, table: pa.Table, part: Part, step_ns: int, span: tuple[int | None, int | None]
    ) -> _Grouped:
        ts = np.asarray(table.column(TS).cast(pa.int64()).to_numpy(), dtype=np.int64)
        keep = np.ones(len(ts), dtype=bool)
        if span[0] is not None:
            keep &= ts >= span[0]
        if span[1] is not None:
            keep &= ts < span[1]
        for c in part.present:
            keep &= _valid(table, c)
        for c in part.absent:
            keep &= ~_valid(table, c)
        if part.any_present:
            keep &= np.logical_or.reduce([_valid(table, c) for c in part.any_present])
        if not keep.all():
            table, ts = table.filter(pa.array(keep)), ts[keep]
        rows = len(ts)
        if rows == 0:
            empty = {a.name: _empty(a) for a in part.aggs}
            return cls(0, {k: [] for k in part.keys}, [], np.zeros(0, np.int64), empty)
        b = ts // step_ns
        codes = [_ranks(table.column(k)) for k in part.keys]
        order = np.lexsort((ts, b, *reversed(codes)))
        new = np.zeros(rows, dtype=bool)
        new[0] = True
        for arr in (*codes, b):
            s = arr[order]
            new[1:] |= s[1:] != s[:-1]
        starts = np.flatnonzero(new)
        group = np.cumsum(new) - 1  # the group of each sorted row
        firsts = order[starts]
        keys = {k: table.column(k).take(firsts).to_pylist() for k in part.keys}
        agg = _Aggregator(table, ts, order, starts, group)
        cols = {a.name: agg.run(a) for a in part.aggs}
        return cls(len(starts), keys, [c[firsts] for c in codes], b[firsts], cols)


def _empty(a: Agg) -> Any:
    """An aggregate column of no groups (labels as strings)."""
    return pa.array([], type=pa.string()) if a.kind == ANY else np.zeros(0)


class _Aggregator:
    """Aggregates columns of `table` over groups of its rows: `order` sorts the rows by group
    then time, `starts` are the groups' first positions in that order, `group` each sorted
    row's group."""

    def __init__(
        self,
        table: pa.Table,
        ts: np.ndarray,
        order: np.ndarray,
        starts: np.ndarray,
        group: np.ndarray,
    ) -> None:
        self.table, self.ts, self.order, self.starts, self.group = table, ts, order, starts, group
        self.n = len(starts)
        self._cache: dict[str, np.ndarray] = {}

    def column(self, name: str) -> np.ndarray:
        """`Columns` for `Agg.compute`: `ts` as int64 ns, a metric as float64 (NaN = null)."""
        if name == TS:
            return self.ts
        got = self._cache.get(name)
        if got is None:
            if name in self.table.column_names:
                got = _floats(self.table.column(name))
            else:
                got = np.full(len(self.ts), np.nan)
            self._cache[name] = got
        return got

    def _edge(self, valid_sorted: np.ndarray, last: bool) -> tuple[np.ndarray, np.ndarray]:
        """Per group with a valid row: (the group, the sorted position of its first / last
        valid row)."""
        pos = np.flatnonzero(valid_sorted)
        grp = self.group[pos]
        if last:
            edge = np.ones(len(pos), dtype=bool)
            edge[:-1] = grp[1:] != grp[:-1]
        else:
            edge = np.ones(len(pos), dtype=bool)
            edge[1:] = grp[1:] != grp[:-1]
        return grp[edge], pos[edge]

    def run(self, a: Agg) -> Any:
        if a.kind == COUNT and a.source == "*":
            return np.diff(np.append(self.starts, len(self.order)))
        if a.compute is None and a.source in self.table.column_names:
            column = self.table.column(a.source)
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                return self._strings(a, column)
        elif a.compute is None and a.kind == ANY:  # a label no reading carries
            return pa.nulls(self.n, pa.string())
        values = a.compute(self.column) if a.compute is not None else self.column(a.source)
        v = values[self.order]
        if a.kind in (MIN, MAX):
            fn: Any = (np.fmin, np.fmax) if v.dtype.kind == "f" else (np.minimum, np.maximum)
            return fn[a.kind == MAX].reduceat(v, self.starts)
        valid = ~np.isnan(v)
        if a.kind == MEAN:
            sums = np.add.reduceat(np.where(valid, v, 0.0), self.starts)
            counts = np.add.reduceat(valid.astype(np.int64), self.starts)
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(counts > 0, sums / counts, np.nan)
        if a.kind == COUNT:
            return np.add.reduceat(valid.astype(np.int64), self.starts)
        if a.kind in (FIRST, LAST, ANY):
            out = np.full(self.n, np.nan)
            grp, pos = self._edge(valid, last=a.kind == LAST)
            out[grp] = v[pos]
            return out
        raise ValueError(f"no numpy aggregate for {a.kind!r} ({a.name})")

    def _strings(self, a: Agg, column: pa.ChunkedArray) -> pa.Array:
        """ANY / FIRST / LAST of a string column: an Arrow array, null where the group has no
        value."""
        if a.kind not in (ANY, FIRST, LAST):
            raise ValueError(f"no string aggregate for {a.kind!r} ({a.name})")
        valid = np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False), dtype=bool)
        grp, pos = self._edge(valid[self.order], last=a.kind == LAST)
        rows = np.zeros(self.n, dtype=np.int64)
        rows[grp] = self.order[pos]
        missing = np.ones(self.n, dtype=bool)
        missing[grp] = False
        return column.take(pa.array(rows, mask=missing)).combine_chunks()


# -- what needs a GPU's neighbouring buckets ------------------------------------------------------


def _same_entity_next(g: _Grouped) -> np.ndarray:
    """True where group i+1 is the same GPU entity as group i (length n - 1)."""
    same = np.ones(max(g.n - 1, 0), dtype=bool)
    for c in g.codes:
        same &= c[1:] == c[:-1]
    return same


def _quantile_cont_median(x: np.ndarray) -> float:
    """DuckDB's `median` of doubles: the interpolated middle of the sorted values."""
    s = np.sort(x)
    pos = (len(s) - 1) * 0.5
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return float(s[lo] + (s[hi] - s[lo]) * (pos - lo))


def _coverage(g: _Grouped) -> None:
    """store/coverage.py's rule with the step as the fine bucket (every tail left open):
    `cov_s`, `nod_s`, `tail_from`, `cap_ns` (NaN = null) and `spacing_ns`."""
    samples = g.cols["samples"].astype(np.int64)
    first, last = g.cols["ts_first"], g.cols["ts_last"]
    day = first // NS_PER_DAY
    same = _same_entity_next(g)
    same_day = same & (day[1:] == day[:-1])
    has_nxt = np.append(same_day, False)
    nxt_gap = np.zeros(g.n, dtype=np.int64)
    nxt_gap[:-1] = first[1:] - last[:-1]
    inside = (samples > 1) & (last > first)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_gap = (last - first).astype(np.float64) / (samples - 1)
    est = np.where(inside, mean_gap, np.where(has_nxt, nxt_gap.astype(np.float64), np.nan))
    spacing = np.full(g.n, np.nan)
    segment = np.ones(g.n, dtype=bool)
    segment[1:] = ~same_day
    bounds = [*np.flatnonzero(segment), g.n]
    for lo, hi in itertools.pairwise(bounds):  # per GPU entity and UTC day
        part = est[lo:hi]
        part = part[~np.isnan(part)]
        if len(part):
            spacing[lo:hi] = _quantile_cont_median(part)
    doubled = 2 * spacing
    cap_null = np.isnan(doubled)
    cap0 = np.where(
        cap_null,
        0,
        np.where(doubled >= 0, np.floor(doubled + 0.5), np.ceil(doubled - 0.5)),
    ).astype(np.int64)
    span = last - first
    limit = (samples - 1) * cap0
    g.cols["cov_s"] = np.minimum(span, limit) / 1e9
    g.cols["nod_s"] = np.maximum(span - limit, 0) / 1e9
    g.cols["tail_from"] = last
    g.cols["cap_ns"] = np.where(cap_null, np.nan, cap0.astype(np.float64))
    g.cols["cap0"] = cap0
    g.cols["spacing_ns"] = spacing


def _series(g: _Grouped) -> None:
    """frames.py's `_series_sql`: the open tail resolved against the GPU's next bucket
    (`tail_cov_ns`, `tail_nod_ns`) and the energy counter's increase (`energy_j`)."""
    same = _same_entity_next(g)
    first, last, cap0 = g.cols["ts_first"], g.cols["ts_last"], g.cols["cap0"]
    has_next = np.append(same, False)
    gap = np.zeros(g.n, dtype=np.int64)
    gap[:-1] = first[1:] - last[:-1]  # next_first - tail_from (tail_from = ts_last)
    spacing0 = np.nan_to_num(g.cols["spacing_ns"], nan=0.0)
    g.cols["tail_cov_ns"] = np.where(
        has_next, np.minimum(gap, cap0).astype(np.float64), np.minimum(spacing0, cap0)
    )
    g.cols["tail_nod_ns"] = np.where(has_next, np.maximum(gap - cap0, 0), 0).astype(np.float64)
    e_first, e_last = g.cols["e_first"], g.cols["e_last"]
    has_prev = np.insert(same, 0, False)
    prev_b = np.insert(g.b[:-1], 0, 0)
    prev_last = np.insert(e_last[:-1], 0, np.nan)
    with np.errstate(invalid="ignore"):
        carried = has_prev & (prev_b == g.b - 1) & ~np.isnan(prev_last) & (e_last >= prev_last)
        own = e_last >= e_first
    g.cols["energy_j"] = np.where(
        carried, e_last - prev_last, np.where(own, e_last - e_first, np.nan)
    )


# -- attribution and joins ------------------------------------------------------------------------


def _pid_number(pid: str | None) -> int:
    """TRY_CAST(pid AS BIGINT), 0 where it is null or not a number."""
    if pid is None or not _INT.fullmatch(pid):
        return 0
    value = int(pid)
    return value if -_I64_MAX - 1 <= value <= _I64_MAX else 0


@dataclass
class _Top:
    """Per (gpu_uuid, bucket): the top process's row in the process part, how many processes
    there were and the sum of their peaks."""

    index: dict[tuple[str | None, int], int]
    rows: np.ndarray
    processes: np.ndarray
    memory: np.ndarray
    part: _Grouped


def _top(p: _Grouped) -> _Top:
    if p.n == 0:
        return _Top({}, np.zeros(0, np.int64), np.zeros(0), np.zeros(0), p)
    gpu_code = p.codes[0]
    mem = p.cols["mem"]
    pid = np.array([_pid_number(x) for x in p.keys["pid"]], dtype=np.int64)
    order = np.lexsort((pid, -mem, p.b, gpu_code))  # largest peak first, then the lowest pid
    new = np.ones(p.n, dtype=bool)
    new[1:] = (gpu_code[order][1:] != gpu_code[order][:-1]) | (p.b[order][1:] != p.b[order][:-1])
    starts = np.flatnonzero(new)
    rows = order[starts]
    processes = np.diff(np.append(starts, p.n))
    memory = np.add.reduceat(mem[order], starts)
    gpus = p.keys["gpu_uuid"]
    index = {(gpus[r], int(p.b[r])): i for i, r in enumerate(rows)}
    return _Top(index, rows, processes, memory, p)


def _lookup(index: dict[Any, int], keys: list[Any]) -> np.ndarray:
    """Each key's row in `index`, -1 where absent (a key holding None never matches)."""
    return np.array(
        [
            -1 if any(k is None for k in key) else index.get(key, -1)  # SQL equality: no NULLs
            for key in keys
        ],
        dtype=np.int64,
    )


def _taker(cols: dict[str, Any], rows: np.ndarray) -> Callable[[str], Any]:
    """Columns of a joined part at `rows` (-1 = no match: null)."""
    missing = rows < 0
    safe = np.where(missing, 0, rows)

    def take(name: str) -> Any:
        col = cols[name]
        if isinstance(col, pa.Array):
            return col.take(pa.array(safe, mask=missing))
        if len(col) == 0:
            return np.full(len(rows), np.nan)
        return np.where(missing, np.nan, np.asarray(col, dtype=np.float64)[safe])

    return take


def _join(
    g: _Grouped,
    top: _Top,
    host: _Grouped,
    app_gpu: _Grouped,
    app_job: _Grouped,
    step_ns: int,
    step_s: float,
) -> Callable[[str], Any]:
    """The joined aggregates by qualified name (`g.x`, `pa.x`, `h.x`, `ag.x`, `aj.x`) and the
    parameters (`$step_ns`, `$step_s`)."""
    bs = [int(b) for b in g.b]
    uuids, hosts = g.keys["gpu_uuid"], g.keys["host"]
    pa_at = _lookup(top.index, [(u, b) for u, b in zip(uuids, bs, strict=True)])
    p = top.part
    p_rows = np.where(pa_at < 0, -1, top.rows[np.maximum(pa_at, 0)] if len(top.rows) else -1)
    p_cols: dict[str, Any] = {a.name: p.cols[a.name] for a in PROCESS.aggs}
    p_cols["pid"] = pa.array(p.keys["pid"], type=pa.string())
    p_take = _taker(p_cols, p_rows)
    top_take = _taker({"processes": top.processes, "process_memory_bytes": top.memory}, pa_at)
    jobs = p_take("job_id").to_pylist()
    h_index = {
        (h, int(b)): i for i, (h, b) in enumerate(zip(host.keys["host"], host.b, strict=True))
    }
    ag_index = {
        (j, u, int(b)): i
        for i, (j, u, b) in enumerate(
            zip(app_gpu.keys["job_id"], app_gpu.keys["gpu_uuid"], app_gpu.b, strict=True)
        )
    }
    aj_index = {
        (j, int(b)): i
        for i, (j, b) in enumerate(zip(app_job.keys["job_id"], app_job.b, strict=True))
    }
    takers = {
        "pa": p_take,
        "h": _taker(host.cols, _lookup(h_index, list(zip(hosts, bs, strict=True)))),
        "ag": _taker(app_gpu.cols, _lookup(ag_index, list(zip(jobs, uuids, bs, strict=True)))),
        "aj": _taker(app_job.cols, _lookup(aj_index, list(zip(jobs, bs, strict=True)))),
    }
    g_cols: dict[str, Any] = dict(g.cols)
    g_cols["b"] = g.b
    for k, values in g.keys.items():
        g_cols[k] = pa.array(values, type=pa.string())

    def value(name: str) -> Any:
        if name == "$step_ns":
            return step_ns
        if name == "$step_s":
            return step_s
        alias, _, column = name.partition(".")
        if alias == "g":
            return g_cols[column]
        if alias == "pa" and column in ("processes", "process_memory_bytes"):
            return top_take(column)
        return takers[alias](column)

    return value


def _output(column: str, expr: str, sql_type: str, value: Callable[[str], Any]) -> pa.Array:
    """One frame column as Arrow, from OUTPUT's expression (or its OUTPUT_NUMPY counterpart)."""
    compute = OUTPUT_NUMPY.get(column)
    if compute is not None:
        got = compute(value)
    elif _ONE_AGG.fullmatch(expr):
        got = value(expr)
    elif m := _APP_FILL.fullmatch(expr):
        per_gpu, job_wide = value(f"ag.{m.group(1)}"), value(f"aj.{m.group(1)}")
        got = np.where(np.isnan(per_gpu), job_wide, per_gpu)
    else:
        raise NotImplementedError(f"frame column {column!r} ({expr}) has no numpy counterpart")
    arrow_type = _ARROW_TYPES[sql_type]
    if isinstance(got, pa.Array | pa.ChunkedArray):
        return got.cast(arrow_type)
    values = np.asarray(got)
    if values.dtype.kind == "f":
        nulls = np.isnan(values)
        if arrow_type == pa.int64():
            return pa.array(np.where(nulls, 0, values).astype(np.int64), mask=nulls)
        return pa.array(values, type=arrow_type, mask=nulls)
    return pa.array(values, type=arrow_type)
