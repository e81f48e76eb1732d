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
view uses neither. The tables of every kind are taken from the window at once (one lock), so
a tick appended meanwhile is in all of them or in none.

Where the SQL casts a DOUBLE to BIGINT (the coverage cap `2 × spacing`, the
`clocks_event_reasons` mask) the numpy path rounds as DuckDB does, halves to even
(`frame_columns.to_bigint`); a pid is read as a number as `TRY_CAST(pid AS BIGINT)` reads it
(`_pid_number`).

Infinite readings (segments turn NaN into null, but not ±inf) give what the SQL gives: an
infinite mean, sum or peak, and NaN (a value, not null) where the SQL computes `inf - inf` or
`inf × 0` (an energy increase, a mean of +inf and -inf, `nvlink_bps`, `energy_power_j`,
`process_memory_bytes`): every column keeps where it is null apart from its values for that
reason. An infinite `clocks_event_reasons` mask (or one outside BIGINT's range) cannot be cast,
and the SQL raises (ConversionException); `recent_intervals` raises ValueError then.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.model import Kind
from gpulens.store.coverage import NS_PER_DAY
from gpulens.store.frame_cache import CACHE_STEP_NS
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
    OUTPUT_NULLS,
    OUTPUT_NUMPY,
    PROCESS,
    Agg,
    Part,
    to_bigint,
)
from gpulens.store.schema import TS

if TYPE_CHECKING:
    from gpulens.store.recent import RecentWindow

_ARROW_TYPES = {"BIGINT": pa.int64(), "DOUBLE": pa.float64(), "VARCHAR": pa.string()}
_ONE_AGG = re.compile(r"(g|pa|h)\.(\w+)")
_APP_FILL = re.compile(r"coalesce\(ag\.(\w+), aj\.\1\)")
_I64_MAX = 2**63 - 1
_I64_MIN = -(2**63)
_I16 = (-(2**15), 2**15 - 1)
_DIGITS = r"[0-9](?:_?[0-9])*"  # digits, a single underscore between two of them allowed
# what TRY_CAST(... AS BIGINT) reads: hexadecimal or binary (no sign, whitespace before but not
# after), or decimal with a fraction and an exponent, ASCII whitespace around
_HEX_OR_BIN = re.compile(
    r"[ \t\n\v\f\r]*(?:0[xX]([0-9a-fA-F](?:_?[0-9a-fA-F])*)|0[bB]([01](?:_?[01])*))"
)
_DECIMAL = re.compile(
    rf"[ \t\n\v\f\r]*([+-]?)({_DIGITS})?(?:\.({_DIGITS})?)?(?:[eE]([+-]?{_DIGITS}))?"
    r"[ \t\n\v\f\r]*"
)


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
    if math.gcd(step_ns, CACHE_STEP_NS) != step_ns:  # coverage on finer buckets: the SQL path
        from gpulens.store.frames import gpu_intervals

        return gpu_intervals(window, step_s, start_ns, end_ns, use_cache=False)
    span = (start_ns, end_ns)
    wanted = {
        Kind.GPU: _inputs(GPU),
        Kind.PROCESS: _inputs(PROCESS),
        Kind.HOST: _inputs(HOST),
        Kind.APP: _inputs(APP_GPU) | _inputs(APP_JOB),
    }
    tables = window.tables(wanted, since_ns=start_ns)  # every kind as of the same tick
    g = _Grouped.of(tables[Kind.GPU], GPU, step_ns, span)
    if g.n == 0:
        return schema().empty_table()
    _coverage(g)
    _series(g)
    top = _top(_Grouped.of(tables[Kind.PROCESS], PROCESS, step_ns, span))
    host = _Grouped.of(tables[Kind.HOST], HOST, step_ns, span)
    app = tables[Kind.APP]
    app_gpu = _Grouped.of(app, APP_GPU, step_ns, span)
    app_job = _Grouped.of(app, APP_JOB, step_ns, span)
    joined = _join(g, top, host, app_gpu, app_job, step_ns, float(step_s))
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, as in the SQL
        columns = [_output(c, expr, t, joined) for c, expr, t in OUTPUT]
    return pa.table(columns, schema=schema())


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
    the aggregated columns (numpy, NaN where null; string columns as Arrow arrays). `nulls`:
    where a column that can hold NaN as a value (a mean, `inf - inf`) is null; every other
    float column is null where it is NaN."""

    n: int
    keys: dict[str, list[str | None]]
    codes: list[np.ndarray]
    b: np.ndarray
    cols: dict[str, Any]
    nulls: dict[str, np.ndarray]

    def null(self, name: str) -> np.ndarray:
        """Where column `name` is null."""
        got = self.nulls.get(name)
        if got is not None:
            return got
        return _null_of(self.cols[name])

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
            return cls(0, {k: [] for k in part.keys}, [], np.zeros(0, np.int64), empty, {})
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
        with np.errstate(invalid="ignore", over="ignore"):  # means of ±inf, as in the SQL
            cols = {a.name: agg.run(a) for a in part.aggs}
        return cls(len(starts), keys, [c[firsts] for c in codes], b[firsts], cols, agg.nulls)


def _null_of(col: Any) -> np.ndarray:
    """Where a column without NaN values is null: NaN (floats), never (integers), Arrow's
    nulls (strings)."""
    if isinstance(col, pa.Array | pa.ChunkedArray):
        return np.asarray(pc.is_null(col).to_numpy(zero_copy_only=False), dtype=bool)
    col = np.asarray(col)
    return np.isnan(col) if col.dtype.kind == "f" else np.zeros(len(col), dtype=bool)


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
        self.nulls: dict[str, np.ndarray] = {}  # the aggregates that can be NaN as a value

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
        if a.kind == MEAN:  # avg: NaN as a value where +inf and -inf meet
            sums = np.add.reduceat(np.where(valid, v, 0.0), self.starts)
            counts = np.add.reduceat(valid.astype(np.int64), self.starts)
            self.nulls[a.name] = counts == 0
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
    cap0 = to_bigint(np.where(cap_null, 0.0, doubled), "the coverage cap (2 × spacing)")
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
    e_first, e_last = g.cols["e_first"], g.cols["e_last"]  # peaks: NaN only where null
    has_prev = np.insert(same, 0, False)
    prev_b = np.insert(g.b[:-1], 0, 0)
    prev_last = np.insert(e_last[:-1], 0, np.nan)
    with np.errstate(invalid="ignore"):  # an infinite counter: inf - inf is NaN, as in the SQL
        carried = has_prev & (prev_b == g.b - 1) & ~np.isnan(prev_last) & (e_last >= prev_last)
        own = e_last >= e_first
        g.cols["energy_j"] = np.where(
            carried, e_last - prev_last, np.where(own, e_last - e_first, np.nan)
        )
    g.nulls["energy_j"] = ~(carried | own)


# -- attribution and joins ------------------------------------------------------------------------


def _pid_number(pid: str | None) -> int:
    """`coalesce(TRY_CAST(pid AS BIGINT), 0)`: the pid as DuckDB reads a BIGINT from a string,
    0 where it is null or DuckDB reads no BIGINT from it."""
    value = None if pid is None else _try_cast_bigint(pid)
    return 0 if value is None else value


def _try_cast_bigint(text: str) -> int | None:
    """DuckDB's `TRY_CAST(text AS BIGINT)` (its string-to-integer reading, checked against
    DuckDB in the tests): `0x` / `0b` digits (whitespace before them only); or decimal digits
    with ASCII whitespace around, an optional sign, a fraction and an exponent (`1e3`, `12.0`,
    `1_000`: one underscore between two digits), rounded to the nearest integer, halves away
    from zero. None where it reads no number or the number is outside BIGINT. Like DuckDB: the
    integer part must fit a BIGINT before the exponent applies, the exponent an INT16, and a
    fraction digit that would take the fraction's digits past BIGINT is skipped."""
    if m := _HEX_OR_BIN.fullmatch(text):
        digits, base = (m.group(1), 16) if m.group(1) is not None else (m.group(2), 2)
        value = int(digits.replace("_", ""), base)
        return value if value <= _I64_MAX else None
    m = _DECIMAL.fullmatch(text)
    if m is None or (m.group(2) is None and m.group(3) is None):
        return None
    sign = -1 if m.group(1) == "-" else 1
    whole = sign * int((m.group(2) or "0").replace("_", ""))
    if not _I64_MIN <= whole <= _I64_MAX:
        return None
    exponent = int(m.group(4).replace("_", "")) if m.group(4) is not None else 0
    if not _I16[0] <= exponent <= _I16[1]:
        return None
    fraction, places = 0, 0
    for ch in (m.group(3) or "").replace("_", ""):
        digit = int(ch)
        if fraction * 10 + digit <= _I64_MAX:
            fraction, places = fraction * 10 + digit, places + 1
    # |value| = (|whole| + fraction / 10**places) * 10**exponent = num / den exactly
    num = (abs(whole) * 10**places + fraction) * 10 ** max(exponent, 0)
    den = 10 ** (places + max(-exponent, 0))
    quotient, remainder = divmod(num, den)
    value = sign * (quotient + (2 * remainder >= den))
    return value if _I64_MIN <= value <= _I64_MAX else None


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
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, as in the SQL
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


class _Taker:
    """Columns of a joined part at `rows` (-1 = no match: null); `null(name)` where `name` is
    null (`nulls`: the part's columns that can be NaN as a value)."""

    def __init__(
        self, cols: dict[str, Any], rows: np.ndarray, nulls: dict[str, np.ndarray] | None = None
    ) -> None:
        self.cols, self.nulls = cols, nulls or {}
        self.missing = rows < 0
        self.safe = np.where(self.missing, 0, rows)

    def __call__(self, name: str) -> Any:
        col = self.cols[name]
        if isinstance(col, pa.Array):
            return col.take(pa.array(self.safe, mask=self.missing))
        if len(col) == 0:
            return np.full(len(self.safe), np.nan)
        return np.where(self.missing, np.nan, np.asarray(col, dtype=np.float64)[self.safe])

    def null(self, name: str) -> np.ndarray:
        col = self.cols[name]
        if len(col) == 0:
            return np.ones(len(self.safe), dtype=bool)
        nulls = self.nulls.get(name)
        source = nulls if nulls is not None else _null_of(col)
        taken: np.ndarray = self.missing | source[self.safe]
        return taken


class _Joined:
    """`frame_columns.Joined` over the joined parts: `g.x` (the GPU part), `pa.x` / `h.x` /
    `ag.x` / `aj.x` (taken at each GPU row's match; `pa.processes` and
    `pa.process_memory_bytes` from the `top` taker) and the parameters `$step_ns`, `$step_s`."""

    def __init__(
        self, g: _Grouped, takers: dict[str, _Taker], params: dict[str, float | int]
    ) -> None:
        self.g, self.takers, self.params = g, takers, params
        self.g_cols: dict[str, Any] = {**g.cols, "b": g.b}
        for k, values in g.keys.items():
            self.g_cols[k] = pa.array(values, type=pa.string())

    def _taker(self, alias: str, column: str) -> _Taker:
        top = self.takers["top"]
        return top if alias == "pa" and column in top.cols else self.takers[alias]

    def __call__(self, name: str) -> Any:
        if name in self.params:
            return self.params[name]
        alias, _, column = name.partition(".")
        return self.g_cols[column] if alias == "g" else self._taker(alias, column)(column)

    def null(self, name: str) -> np.ndarray:
        if name in self.params:
            return np.zeros(self.g.n, dtype=bool)
        alias, _, column = name.partition(".")
        if alias == "g":
            return self.g.null(column) if column in self.g.cols else _null_of(self.g_cols[column])
        return self._taker(alias, column).null(column)


def _join(
    g: _Grouped,
    top: _Top,
    host: _Grouped,
    app_gpu: _Grouped,
    app_job: _Grouped,
    step_ns: int,
    step_s: float,
) -> _Joined:
    """The joined aggregates by qualified name (`g.x`, `pa.x`, `h.x`, `ag.x`, `aj.x`) and the
    parameters (`$step_ns`, `$step_s`)."""
    bs = [int(b) for b in g.b]
    uuids, hosts = g.keys["gpu_uuid"], g.keys["host"]
    pa_at = _lookup(top.index, [(u, b) for u, b in zip(uuids, bs, strict=True)])
    p = top.part
    p_rows = np.where(pa_at < 0, -1, top.rows[np.maximum(pa_at, 0)] if len(top.rows) else -1)
    p_cols: dict[str, Any] = {a.name: p.cols[a.name] for a in PROCESS.aggs}
    p_cols["pid"] = pa.array(p.keys["pid"], type=pa.string())
    p_take = _Taker(p_cols, p_rows)
    # the GPU's process count and the sum of their peaks: never null where there is a top
    # process (the sum may be NaN, inf - inf)
    counts = {"processes": top.processes, "process_memory_bytes": top.memory}
    top_take = _Taker(counts, pa_at, {k: np.zeros(len(v), dtype=bool) for k, v in counts.items()})
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
        "top": top_take,
        "h": _Taker(host.cols, _lookup(h_index, list(zip(hosts, bs, strict=True))), host.nulls),
        "ag": _Taker(
            app_gpu.cols,
            _lookup(ag_index, list(zip(jobs, uuids, bs, strict=True))),
            app_gpu.nulls,
        ),
        "aj": _Taker(
            app_job.cols, _lookup(aj_index, list(zip(jobs, bs, strict=True))), app_job.nulls
        ),
    }
    return _Joined(g, takers, {"$step_ns": step_ns, "$step_s": step_s})


class _Reads:
    """A `Joined` that notes which names were read (an arithmetic expression is null where
    one of them is)."""

    def __init__(self, joined: _Joined) -> None:
        self.joined = joined
        self.names: list[str] = []

    def __call__(self, name: str) -> Any:
        self.names.append(name)
        return self.joined(name)

    def null(self, name: str) -> np.ndarray:
        return self.joined.null(name)


def _output(column: str, expr: str, sql_type: str, joined: _Joined) -> pa.Array:
    """One frame column as Arrow, from OUTPUT's expression (or its OUTPUT_NUMPY counterpart):
    null where the SQL gives NULL, NaN where it gives NaN."""
    compute = OUTPUT_NUMPY.get(column)
    if compute is not None:
        reads = _Reads(joined)
        got = compute(reads)
        nulls_of = OUTPUT_NULLS.get(column)
        if nulls_of is not None:
            nulls = nulls_of(joined)
        else:
            nulls = np.zeros(joined.g.n, dtype=bool)
            for name in reads.names:
                nulls = nulls | joined.null(name)
    elif _ONE_AGG.fullmatch(expr):
        got, nulls = joined(expr), joined.null(expr)
    elif m := _APP_FILL.fullmatch(expr):
        per_gpu, job_wide = f"ag.{m.group(1)}", f"aj.{m.group(1)}"
        fill = joined.null(per_gpu)
        got = np.where(fill, joined(job_wide), joined(per_gpu))
        nulls = fill & joined.null(job_wide)
    else:
        raise NotImplementedError(f"frame column {column!r} ({expr}) has no numpy counterpart")
    arrow_type = _ARROW_TYPES[sql_type]
    if isinstance(got, pa.Array | pa.ChunkedArray):
        return got.cast(arrow_type)
    values = np.asarray(got)
    if arrow_type == pa.int64():
        return pa.array(np.where(nulls, 0, values).astype(np.int64), mask=nulls)
    return pa.array(values, type=arrow_type, mask=nulls)
