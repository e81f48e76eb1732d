"""The last few minutes of readings in memory, queried with the same SQL as the store.

A live front end (the agent, `gpulens top`) needs the interval frame of the last minute without
waiting for a flush, and `gpulens top` has no store at all. `RecentWindow` keeps the readings of
the last `keep_s` seconds as Arrow tables and exposes them to DuckDB as the same views the
`Store` has (`gpu`, `process`, `host`, `app`, `event`, with `ts` as TIMESTAMP_NS and `date`), so
`gpulens.store.frames.gpu_intervals(window, use_cache=False)` works on it unchanged.

Registration is incremental: each tick's readings wait in a short list that becomes one block
(one table per kind) every `BLOCK_TICKS` ticks (or at the next query), blocks leave the window whole
once their newest reading is older than `keep_s`, and a query concatenates a few blocks, not
one table per tick. The DuckDB connection runs on one thread; it is opened at the first query,
and `release` closes it until the next one (the agent does after each refresh nobody watches:
what DuckDB keeps between queries is ~15-20 MB, a new connection ~25 ms of CPU). DuckDB itself
is imported by the first query, not with this module: `table` (and `tables`, several kinds
at once) hands out the same tables the views show, and `gpulens.store.recent_frame` builds the
interval frame from them without it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from gpulens.errors import StoreError
from gpulens.model import Kind, Reading
from gpulens.store.query import Params, QueryError
from gpulens.store.schema import DATE, TS, TS_TYPE, empty_schema
from gpulens.store.segments import Groups, _concat, group_readings

if TYPE_CHECKING:
    import duckdb

#: ticks merged into one block per kind (fewer, larger Arrow tables to keep and concatenate)
BLOCK_TICKS = 30


def readings_tables(readings: Iterable[Reading]) -> dict[Kind, pa.Table]:
    """Readings as one table per kind (int64 `ts`, string labels, float metrics; null where a
    reading has no such label or metric)."""
    groups: Groups = {}
    group_readings(groups, readings)
    by_kind: dict[Kind, list[pa.Table]] = {}
    for (kind, _, _), group in groups.items():
        by_kind.setdefault(kind, []).append(group.table())
    return {kind: _concat(tables) for kind, tables in by_kind.items()}


class RecentWindow:
    """Readings of the last `keep_s` seconds (by reading time), queryable like a `Store`."""

    def __init__(self, keep_s: float = 300.0) -> None:
        if keep_s <= 0:
            raise ValueError(f"keep_s must be > 0, got {keep_s!r}")
        self.keep_ns = round(keep_s * 1e9)
        # merged blocks: (newest ts in the block, one table per kind); then the ticks not merged
        self._blocks: deque[tuple[int, dict[Kind, pa.Table]]] = deque()
        self._pending: list[tuple[int, list[Reading]]] = []
        self._lock = threading.Lock()
        self._con: duckdb.DuckDBPyConnection | None = None  # opened by the first query
        self._dirty = True
        self.latest_ns: int | None = None

    def append(self, ts: int, readings: Iterable[Reading]) -> None:
        """Add one tick's readings (taken at `ts`) and forget what fell out of the window."""
        batch = list(readings)
        with self._lock:
            self._pending.append((ts, batch))
            if len(self._pending) >= BLOCK_TICKS:
                self._merge()
            self.latest_ns = ts if self.latest_ns is None else max(self.latest_ns, ts)
            horizon = self.latest_ns - self.keep_ns
            while self._blocks and self._blocks[0][0] <= horizon:
                self._blocks.popleft()
            self._pending = [(t, tb) for t, tb in self._pending if t > horizon]
            self._dirty = True

    def _merge(self) -> None:
        """The pending ticks as one block (called with the lock held)."""
        if not self._pending:
            return
        newest = max(t for t, _ in self._pending)
        tables = readings_tables(r for _, batch in self._pending for r in batch)
        self._blocks.append((newest, {k: t.combine_chunks() for k, t in tables.items()}))
        self._pending = []

    @property
    def blocks(self) -> int:
        """How many merged blocks the window holds (each one table per kind)."""
        with self._lock:
            return len(self._blocks)

    def query(self, sql: str, params: Params = None) -> pa.Table:
        """Run `sql` over the window's views; QueryError when the SQL is wrong."""
        import duckdb

        with self._lock:
            if self._con is None:
                self._con = duckdb.connect(":memory:", config={"threads": 1})
                self._dirty = True
            con = self._con
            if self._dirty:
                self._register(con)
            try:  # executing (to_arrow_table) raises too: a value that cannot be cast
                rel = con.sql(sql, params=params) if params is not None else con.sql(sql)
                return pa.table({}) if rel is None else rel.to_arrow_table()
            except duckdb.Error as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                if isinstance(exc, duckdb.IOException):
                    raise StoreError(f"in-memory window query failed: {first}") from exc
                raise QueryError(f"SQL error: {first}") from exc

    def table(
        self, kind: Kind, columns: Collection[str] | None = None, since_ns: int | None = None
    ) -> pa.Table:
        """The readings of `kind` inside the window as one table: the columns of its view (`ts`
        as timestamp[ns], the labels and metrics seen, every catalog column of the kind, null
        where absent, and `date`), in no particular row order. `columns`: only those (and
        `ts`); `since_ns`: only readings at or after it (older blocks are not even copied)."""
        with self._lock:
            self._merge()
            return self._table(kind, columns, since_ns)

    def tables(
        self, columns: Mapping[Kind, Collection[str] | None], since_ns: int | None = None
    ) -> dict[Kind, pa.Table]:
        """`table` of each kind in `columns` (with the columns it names, all for None), taken
        together under the window's lock: a tick appended meanwhile is in every table or in
        none."""
        with self._lock:
            self._merge()
            return {kind: self._table(kind, cols, since_ns) for kind, cols in columns.items()}

    def _table(
        self, kind: Kind, columns: Collection[str] | None = None, since_ns: int | None = None
    ) -> pa.Table:
        """`table` with the lock held and the pending ticks merged."""
        horizon = None if self.latest_ns is None else self.latest_ns - self.keep_ns
        if since_ns is not None:
            horizon = since_ns - 1 if horizon is None else max(horizon, since_ns - 1)
        parts = [
            tables[kind]
            for newest, tables in self._blocks
            if kind in tables and (horizon is None or newest > horizon)
        ]
        if columns is not None:
            wanted = {TS, *columns}
            parts = [p.select([c for c in p.column_names if c in wanted]) for p in parts]
        skeleton = empty_schema(kind)
        if parts:
            table = _concat(parts)
            if horizon is not None:  # a block's older readings stay out of the window
                table = table.filter(pc.greater(table.column(TS), horizon))
            index = table.schema.get_field_index(TS)
            table = table.set_column(index, TS, table.column(TS).cast(TS_TYPE))
        else:
            table = skeleton.empty_table().select([TS])
        rows = table.num_rows
        for f in skeleton:
            if f.name not in table.column_names and (columns is None or f.name in columns):
                table = table.append_column(f, pa.nulls(rows, f.type))
        if columns is not None and DATE not in columns:
            return table
        return table.append_column(DATE, table.column(TS).cast(pa.date32()))

    def _register(self, con: duckdb.DuckDBPyConnection) -> None:
        self._merge()
        for kind in Kind:
            name = f"recent_{kind.value}"
            con.register(name, self._table(kind))
            con.execute(f"CREATE OR REPLACE VIEW {kind.value} AS SELECT * FROM {name}")
        self._dirty = False

    def release(self) -> None:
        """Close the DuckDB connection until the next query (the readings stay): DuckDB's
        catalog, buffers and allocator caches go back; the next query opens a new one."""
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    def close(self) -> None:
        self.release()
