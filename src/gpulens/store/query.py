"""The read side: DuckDB over the live segment files, one view per reading kind.

Views `gpu`, `process`, `host`, `app`, `event` read the live files of their kind with
`union_by_name=true` (new metrics are new nullable columns) plus the hive column `date`
(DATE, the UTC day partition: filter on it to skip whole days). Every view always has `ts`,
`date`, every label key and every catalog metric of its kind, null where nothing was stored,
so queries bind on an empty or young store too. Views are rebuilt from a fresh file listing
before each query, which never blocks writers; a file that compaction removes while a query
runs makes the query run again on the new listing.

In an object store DuckDB reads the same files through a pyarrow dataset (pyarrow's S3 or GCS
filesystem; DuckDB's own httpfs is not used): the view scans it with the columns and filters
of the query pushed down, so only the column chunks a query needs are fetched (byte ranges).

DuckDB is imported by the first `Store`, not with this module: an agent nobody views records
and exports without ever loading it (~40 MB of library pages and heap for the life of a
process once loaded).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from gpulens.errors import StoreError
from gpulens.model import Kind
from gpulens.store.layout import LiveFiles, corrupt_file_error, read_footer_meta, read_metadata
from gpulens.store.location import ObjectPath, StorePath, open_location, parallel_map
from gpulens.store.schema import DATE, empty_schema

if TYPE_CHECKING:
    import pyarrow.dataset as pads

Params = Sequence[object] | Mapping[str, object] | None


class Queryable(Protocol):
    """Anything that answers DuckDB SQL over the views gpu, process, host, app and event (the
    `Store`, or the in-memory `RecentWindow`)."""

    def query(self, sql: str, params: Params = None) -> pa.Table: ...


def _sql_errors() -> tuple[type[Exception], ...]:
    """DuckDB's exceptions that mean the SQL itself is wrong (QueryError)."""
    import duckdb

    return (
        duckdb.ParserException,
        duckdb.BinderException,
        duckdb.CatalogException,
        duckdb.ConversionException,
        duckdb.NotImplementedException,
        duckdb.OutOfRangeException,
        duckdb.TypeMismatchException,
        duckdb.SyntaxException,
    )


_VANISHED = re.compile(
    r"no files found|no such file|cannot open file|does not exist|no_?such_?key", re.I
)
_DUCK_TYPES = {"timestamp[ns]": "TIMESTAMP_NS", "string": "VARCHAR", "double": "DOUBLE"}


class QueryError(StoreError):
    """The SQL given to `Store.query` is wrong (syntax, unknown column or table, types)."""

    exit_code = 2


class Store:
    """Query the store in `data_dir` with DuckDB SQL; results come back as Arrow tables."""

    def __init__(self, data_dir: StorePath, *, retries: int = 5) -> None:
        self.data_dir = open_location(data_dir)
        self.retries = retries
        self._live = LiveFiles(self.data_dir)
        import duckdb

        self._duck_error: type[Exception] = duckdb.Error
        self._sql_errors = _sql_errors()
        self._con = duckdb.connect(":memory:")
        self._views: dict[Kind, tuple[StorePath, ...]] = {}
        self._schemas: dict[ObjectPath, pa.Schema] = {}
        self._closed = False

    def query(self, sql: str, params: Params = None) -> pa.Table:
        """Run `sql` (views gpu, process, host, app, event) and return the result.

        QueryError when the SQL is wrong; StoreError naming the file when a stored file is
        unreadable.
        """
        if self._closed:
            raise StoreError(f"this Store for {str(self.data_dir)!r} is closed")
        attempt = 0
        while True:
            try:
                self._refresh()
                return self._run(sql, params)
            except self._sql_errors as exc:
                message = f"SQL error: {_first_line(exc)} (in query: {_short(sql)})"
                raise QueryError(message) from exc
            except self._duck_error as exc:
                if _VANISHED.search(str(exc)):
                    if attempt < self.retries:
                        attempt += 1  # compaction or retention removed a file we listed
                        continue
                    raise StoreError(
                        f"the store in {str(self.data_dir)!r} changed under the query "
                        f"{attempt + 1} times (files removed by compaction or retention: "
                        f"{_first_line(exc)}); run the query again"
                    ) from exc
                raise self._storage_error(exc, sql) from exc

    def _run(self, sql: str, params: Params) -> pa.Table:
        rel = self._con.sql(sql, params=params) if params is not None else self._con.sql(sql)
        if rel is None:
            return pa.table({})
        return rel.to_arrow_table()

    def tables(self) -> dict[str, int]:
        """Row count of each kind's table."""
        counts: dict[str, int] = {}
        for kind in Kind:
            result = self.query(f"SELECT count(*) AS n FROM {kind.value}")
            counts[kind.value] = int(result.column("n")[0].as_py())
        return counts

    def time_bounds(self, kind: Kind = Kind.GPU) -> tuple[int | None, int | None]:
        """(first, last) `ts` in ns over the live files of `kind`; (None, None) when empty.

        Read from the row-group statistics in the Parquet footers (the writer always stores
        them), so no row is scanned; a file without usable statistics makes it fall back to
        `SELECT min/max` over the view.
        """
        lo: int | None = None
        hi: int | None = None
        for path in self._live.live(Kind(kind)):
            try:
                bounds = _footer_ts_bounds(path)
            except FileNotFoundError:
                bounds = None  # compacted away while we looked: let the query retry it
            except (OSError, pa.ArrowException):
                bounds = None  # unreadable footer: the query names the file
            if bounds is None:
                return self._sql_time_bounds(kind)
            if bounds[0] is None or bounds[1] is None:
                continue  # an empty file
            lo = bounds[0] if lo is None else min(lo, bounds[0])
            hi = bounds[1] if hi is None else max(hi, bounds[1])
        return lo, hi

    def _sql_time_bounds(self, kind: Kind) -> tuple[int | None, int | None]:
        table = self.query(
            f"SELECT min(epoch_ns(ts)) AS a, max(epoch_ns(ts)) AS b FROM {Kind(kind).value}"
        )
        a, b = table["a"][0].as_py(), table["b"][0].as_py()
        return (None if a is None else int(a)), (None if b is None else int(b))

    def files(self, kind: Kind) -> list[StorePath]:
        """The live files of `kind` (what a direct reader with pandas or polars should read)."""
        return self._live.live(Kind(kind))

    def close(self) -> None:
        if not self._closed:
            self._con.close()
            self._closed = True

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- views -------------------------------------------------------------------------------

    def _refresh(self) -> None:
        for kind in Kind:
            files = tuple(self._live.live(kind))
            if kind not in self._views or self._views[kind] != files:
                self._views.pop(kind, None)
                objects = [f for f in files if isinstance(f, ObjectPath)]
                if objects and isinstance(self.data_dir, ObjectPath):
                    name = f"_gpulens_{kind.value}_files"
                    self._con.register(name, self._dataset(kind, objects))
                    view = f"SELECT * FROM {name} UNION ALL BY NAME {_skeleton(kind)}"
                else:
                    view = _view_sql(kind, files)
                self._con.execute(f"CREATE OR REPLACE VIEW {kind.value} AS {view}")
                self._views[kind] = files
        if self._schemas:  # forget the schemas of files no view reads any more
            current = {f for files in self._views.values() for f in files}
            self._schemas = {f: s for f, s in self._schemas.items() if f in current}

    def _dataset(self, kind: Kind, files: list[ObjectPath]) -> pads.Dataset:
        """The files of `kind` in an object store as one pyarrow dataset: columns unified by
        name (a float32 file's column widened where another file has float64), `date` from
        the hive partition. Each file's schema is read once (files never change).

        pyarrow.dataset is imported here, for object stores only: importing it loads pandas
        where that is installed (~40 MB that a local store's readers and the agent need not
        hold)."""
        import pyarrow.dataset as pads

        unread = [f for f in files if f not in self._schemas]
        for f, schema in zip(unread, parallel_map(_read_schema, unread), strict=True):
            self._schemas[f] = schema
        schemas = [self._schemas[f] for f in files]
        unified = pa.unify_schemas(schemas, promote_options="permissive")
        fields = [fd for fd in unified if fd.name != DATE]
        fields = [fd.with_type(fd.type.value_type) if pa.types.is_dictionary(fd.type) else fd
                  for fd in fields]  # fmt: skip
        partition = pa.schema([pa.field(DATE, pa.date32())])
        assert isinstance(self.data_dir, ObjectPath)
        return pads.dataset(
            [f.key for f in files],
            schema=pa.schema([*fields, *partition]).remove_metadata(),
            format="parquet",
            filesystem=self.data_dir.fs,
            partitioning=pads.partitioning(partition, flavor="hive"),
            partition_base_dir=(self.data_dir / kind.value).key,
        )

    def _storage_error(self, exc: Exception, sql: str) -> StoreError:
        """Name the unreadable file when there is one, else report DuckDB's message."""
        for kind in Kind:
            for path in self._live.live(kind):
                try:
                    read_footer_meta(path)
                except FileNotFoundError:
                    continue
                except StoreError as bad:
                    return bad
        named = _path_in(str(exc))
        if named is not None:
            return corrupt_file_error(named, exc)
        return StoreError(f"query failed: {_first_line(exc)} (in query: {_short(sql)})")


def _read_schema(path: ObjectPath) -> pa.Schema:
    return pq.read_schema(path.key, filesystem=path.fs)


def _skeleton(kind: Kind) -> str:
    """A typed empty row with `ts`, every label key and every catalog metric of `kind`."""
    schema = empty_schema(kind)
    columns = ", ".join(f"NULL::{_DUCK_TYPES[str(f.type)]} AS {_ident(f.name)}" for f in schema)
    return f"SELECT {columns}, NULL::DATE AS {DATE} WHERE false"


def _view_sql(kind: Kind, files: tuple[StorePath, ...]) -> str:
    skeleton = _skeleton(kind)
    if not files:
        return skeleton
    listing = ", ".join(_literal(str(p)) for p in files)
    scan = (
        f"SELECT * FROM read_parquet([{listing}], union_by_name = true, "
        f"hive_partitioning = true, hive_types = {{'{DATE}': DATE}})"
    )
    return f"{scan} UNION ALL BY NAME {skeleton}"


_TS_UNIT_NS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}


def _footer_ts_bounds(path: StorePath) -> tuple[int | None, int | None] | None:
    """(min, max) of the file's `ts` in ns from its row-group statistics; (None, None) for a
    file without rows; None when some row group has no usable statistics."""
    meta = read_metadata(path)
    schema = meta.schema
    column = next((i for i in range(len(schema)) if schema.column(i).path == "ts"), None)
    if column is None:
        return None
    ts_type = schema.to_arrow_schema().field("ts").type
    if not pa.types.is_timestamp(ts_type):
        return None
    scale = _TS_UNIT_NS[ts_type.unit]
    lo: int | None = None
    hi: int | None = None
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        if group.num_rows == 0:
            continue
        stats = group.column(column).statistics
        if stats is None or not stats.has_min_max:
            return None
        a, b = stats.min_raw, stats.max_raw
        if not isinstance(a, int) or not isinstance(b, int):
            return None
        lo = a * scale if lo is None else min(lo, a * scale)
        hi = b * scale if hi is None else max(hi, b * scale)
    return lo, hi


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return " ".join(lines[:2]) if lines else type(exc).__name__


def _short(sql: str, limit: int = 200) -> str:
    flat = " ".join(sql.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _path_in(message: str) -> Path | None:
    match = re.search(r"""["']?(/[^"'\s]+\.parquet)["']?""", message)
    return Path(match.group(1)) if match else None
