"""The read side: DuckDB over the live segment files, one view per reading kind.

Views `gpu`, `process`, `host`, `app`, `event` read the live files of their kind with
`union_by_name=true` (new metrics are new nullable columns) plus the hive column `date`
(DATE, the UTC day partition: filter on it to skip whole days). Every view always has `ts`,
`date`, every label key and every catalog metric of its kind, null where nothing was stored,
so queries bind on an empty or young store too. Views are rebuilt from a fresh file listing
before each query, which never blocks writers; a file that compaction removes while a query
runs makes the query run again on the new listing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from gpulens.errors import StoreError
from gpulens.model import Kind
from gpulens.store.layout import LiveFiles, corrupt_file_error, read_footer_meta
from gpulens.store.schema import DATE, empty_schema

Params = Sequence[object] | Mapping[str, object] | None

_SQL_ERRORS: tuple[type[Exception], ...] = (
    duckdb.ParserException,
    duckdb.BinderException,
    duckdb.CatalogException,
    duckdb.ConversionException,
    duckdb.NotImplementedException,
    duckdb.OutOfRangeException,
    duckdb.TypeMismatchException,
    duckdb.SyntaxException,
)
_VANISHED = re.compile(r"no files found|no such file|cannot open file|does not exist", re.I)
_DUCK_TYPES = {"timestamp[ns]": "TIMESTAMP_NS", "string": "VARCHAR", "double": "DOUBLE"}


class QueryError(StoreError):
    """The SQL given to `Store.query` is wrong (syntax, unknown column or table, types)."""

    exit_code = 2


class Store:
    """Query the store in `data_dir` with DuckDB SQL; results come back as Arrow tables."""

    def __init__(self, data_dir: Path, *, retries: int = 5) -> None:
        self.data_dir = Path(data_dir)
        self.retries = retries
        self._live = LiveFiles(self.data_dir)
        self._con = duckdb.connect(":memory:")
        self._views: dict[Kind, tuple[Path, ...]] = {}
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
            except _SQL_ERRORS as exc:
                message = f"SQL error: {_first_line(exc)} (in query: {_short(sql)})"
                raise QueryError(message) from exc
            except duckdb.Error as exc:
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

    def files(self, kind: Kind) -> list[Path]:
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
                view = _view_sql(kind, files)
                self._con.execute(f"CREATE OR REPLACE VIEW {kind.value} AS {view}")
                self._views[kind] = files

    def _storage_error(self, exc: duckdb.Error, sql: str) -> StoreError:
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


def _view_sql(kind: Kind, files: tuple[Path, ...]) -> str:
    schema = empty_schema(kind)
    skeleton = ", ".join(f"NULL::{_DUCK_TYPES[str(f.type)]} AS {_ident(f.name)}" for f in schema)
    skeleton = f"SELECT {skeleton}, NULL::DATE AS {DATE} WHERE false"
    if not files:
        return skeleton
    listing = ", ".join(_literal(str(p)) for p in files)
    scan = (
        f"SELECT * FROM read_parquet([{listing}], union_by_name = true, "
        f"hive_partitioning = true, hive_types = {{'{DATE}': DATE}})"
    )
    return f"{scan} UNION ALL BY NAME {skeleton}"


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
