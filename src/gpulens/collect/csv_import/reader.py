"""Read CSV files (plain, gzip, or .tar/.tar.gz archives of CSVs) into reading tables.

Columnar and bounded: the file is read (and inflated) in this thread, cut into blocks of
whole lines of about `BLOCK_SIZE` bytes, and each block is parsed by pyarrow from memory and
converted to compact columns (int64 ns, dictionary labels, float metrics) before the next is
read, so memory holds one block and its tables. Everything runs in the calling thread
(`use_threads=False`): pyarrow's streaming reader reads ahead on its I/O threads, and one that
still held a Python buffer when the interpreter exited aborted the process ("terminate called
without an active exception": the thread, blocked taking the GIL during finalization, is
unwound by `pthread_exit` through a `noexcept` destructor). Archive members are read one at
a time from the stream. The inflated size and the line length are bounded by `Limits`
(InputTooLarge); other bad input raises one `CsvImportError`.
"""

from __future__ import annotations

import fnmatch
import io
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from gpulens.collect.csv_import.curves import CurveMap, parse_curves
from gpulens.collect.csv_import.errors import CsvImportError
from gpulens.collect.csv_import.mapping import ColumnMap
from gpulens.collect.csv_import.values import Where, parse_numbers, parse_timestamps
from gpulens.collect.inputs import DEFAULT_LIMITS, Limits, open_bounded, too_large
from gpulens.model import Kind

BLOCK_SIZE = 8 << 20
NULL_TOKENS: tuple[str, ...] = ("", "NA", "N/A", "NaN", "nan", "null", "NULL", "None", "none")
TS = "ts"

#: picks the map for a member name (an archive member or the file name); None: skip it
Resolver = Callable[[str], ColumnMap | CurveMap | None]


def parse_csv_table(
    src: Path | str | bytes,
    mapping: ColumnMap | Resolver,
    source: str | None = None,
    *,
    host: str | None = None,
    ts_ns: int | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> dict[Kind, pa.Table]:
    """Readings tables (one per kind) of a CSV file, gzip file, bytes or CSV archive.

    `mapping` is one ColumnMap, or a resolver choosing one per file name (a preset); a file the
    resolver returns None for is skipped, and an archive with nothing to import is an error.
    `host` fills the ``host`` label of rows without one when the map's `fill_host` is set.
    A file the resolver gives a CurveMap is a quantile-curve file (`curves.parse_curves`): its
    samples are stamped from `ts_ns`, which it then needs.
    """
    parts: dict[Kind, list[pa.Table]] = {}
    for kind, table in iter_tables(src, mapping, source, host=host, ts_ns=ts_ns, limits=limits):
        parts.setdefault(kind, []).append(table)
    return {kind: _concat(tables) for kind, tables in parts.items()}


def iter_tables(
    src: Path | str | bytes,
    mapping: ColumnMap | Resolver,
    source: str | None = None,
    *,
    host: str | None = None,
    ts_ns: int | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Iterator[tuple[Kind, pa.Table]]:
    """(kind, table) per block of every CSV in `src`, in file order (bounded memory)."""
    resolve: Resolver = (lambda _name: mapping) if isinstance(mapping, ColumnMap) else mapping
    name = source or (str(src) if not isinstance(src, bytes) else "<bytes>")
    found = False
    for member, stream in _open_members(src, name, limits):
        column_map = resolve(Path(member.split(":")[-1]).name)
        if column_map is None:
            continue
        found = True
        if isinstance(column_map, CurveMap):
            if ts_ns is None:
                raise CsvImportError(member, "quantile curves carry no time: pass a start time")
            try:
                text = stream.read()
            except (OSError, EOFError, tarfile.TarError) as exc:
                raise CsvImportError(member, f"the file is damaged or truncated: {exc}") from None
            yield from parse_curves(text, column_map, member, ts_ns).items()
            continue
        yield from _iter_csv(stream, column_map, member, host, limits)
    if not found:
        raise CsvImportError(name, "it holds no CSV file the column map or preset applies to")


def _open_members(
    src: Path | str | bytes, name: str, limits: Limits
) -> Iterator[tuple[str, BinaryIO]]:
    """(name, binary stream) of each CSV: the file itself, or each archive member."""
    if isinstance(src, bytes):
        raw: BinaryIO = io.BytesIO(src)
    else:
        try:
            raw = Path(src).open("rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise CsvImportError(name, f"cannot open it: {exc.strerror}") from None
    with raw:
        stream = open_bounded(raw, name, limits, lambda detail: CsvImportError(name, detail))
        try:
            head = stream.peek(512)[:512]
        except OSError as exc:
            raise CsvImportError(name, f"cannot read it: {exc}") from None
        if len(head) == 512 and head[257:262] == b"ustar":
            yield from _tar_members(stream, name)
        else:
            yield name, stream


def _tar_members(stream: BinaryIO, name: str) -> Iterator[tuple[str, BinaryIO]]:
    try:
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            for info in archive:
                if not info.isfile() or Path(info.name).name.startswith("."):
                    continue
                if not fnmatch.fnmatch(info.name.lower(), "*.csv*"):
                    continue
                member = archive.extractfile(info)
                if member is not None:
                    yield f"{name}:{info.name}", member  # type: ignore[misc]
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise CsvImportError(name, f"the archive is damaged or truncated ({exc})") from None


def _blocks(stream: IO[bytes], source: str, limits: Limits) -> Iterator[tuple[int, bytes]]:
    """(first line number, text) of blocks of whole lines of about `BLOCK_SIZE` bytes; a line
    longer than `limits.max_line_bytes` raises InputTooLarge naming it."""
    limit = limits.max_line_bytes
    carry = b""
    line = 1
    while True:
        try:
            chunk = stream.read(BLOCK_SIZE)
        except (OSError, EOFError, tarfile.TarError) as exc:
            raise CsvImportError(source, f"the file is damaged or truncated: {exc}") from None
        data = carry + chunk if carry else chunk
        if not data:
            return
        cut = data.rfind(b"\n") + 1 if chunk else len(data)
        if cut == 0:
            if len(data) > limit:
                raise too_large(f"{source}, line {line}", "the line", limit, "max_line_bytes")
            carry = data
            continue
        block, carry = data[:cut], data[cut:]
        _check_lines(block, line, source, limit)
        if block:
            yield line, block
        line += block.count(b"\n")
        if not chunk:
            return


def _check_lines(block: bytes, first: int, source: str, limit: int) -> None:
    """Refuse the first line of `block` longer than `limit` bytes."""
    if len(block) <= limit:
        return
    ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
    starts = np.concatenate(([0], ends + 1))
    stops = np.concatenate((ends, [len(block)]))
    long = np.flatnonzero(stops - starts > limit)
    if long.size:
        where = f"{source}, line {first + int(long[0])}"
        raise too_large(where, "the line", limit, "max_line_bytes")


def _iter_csv(
    stream: IO[bytes], mapping: ColumnMap, source: str, host: str | None, limits: Limits
) -> Iterator[tuple[Kind, pa.Table]]:
    parse = pacsv.ParseOptions(delimiter=mapping.delimiter)
    wanted = list(mapping.columns)
    convert = pacsv.ConvertOptions(
        include_columns=wanted,
        column_types={c: pa.string() for c in wanted},
        null_values=list(NULL_TOKENS),
        strings_can_be_null=True,
    )
    names: list[str] | None = None
    row = 1
    unit = mapping.time_unit
    for _line, block in _blocks(stream, source, limits):
        if names is None:
            end = block.find(b"\n") + 1 or len(block)
            names = _header(block[:end], parse, source, wanted)
            block = block[end:]
        read = pacsv.ReadOptions(
            column_names=names, block_size=BLOCK_SIZE + (1 << 20), use_threads=False
        )
        try:
            batch = pacsv.read_csv(pa.py_buffer(block), read, parse, convert)
        except (pa.ArrowInvalid, pa.ArrowKeyError) as exc:
            raise _arrow_error(source, exc, wanted, row) from None
        if not batch.num_rows:
            continue
        tables, unit = convert_batch(
            batch.combine_chunks().to_batches()[0], mapping, source, row, unit, host
        )
        row += batch.num_rows
        yield from tables.items()
    if names is None:
        raise CsvImportError(source, "the file is empty: expected a header line and rows")


def _header(line: bytes, parse: pacsv.ParseOptions, source: str, wanted: list[str]) -> list[str]:
    """The column names of a CSV header line."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CsvImportError(
            source, f"the header line is not UTF-8 text (byte {exc.start}: {line[:60]!r})"
        ) from None
    try:
        read = pacsv.ReadOptions(use_threads=False)
        table = pacsv.read_csv(pa.py_buffer(line), read_options=read, parse_options=parse)
    except (pa.ArrowInvalid, pa.ArrowKeyError) as exc:
        raise _arrow_error(source, exc, wanted) from None
    missing = [c for c in wanted if c not in table.column_names]
    if missing:
        raise CsvImportError(
            source,
            f"a mapped column is missing (the map reads {', '.join(wanted)}; the header has "
            f"{', '.join(table.column_names)[:300]})",
        )
    return list(table.column_names)


def convert_batch(
    batch: pa.RecordBatch,
    mapping: ColumnMap,
    source: str,
    first_row: int,
    unit: str,
    host: str | None,
) -> tuple[dict[Kind, pa.Table], str]:
    """One block of text columns → reading tables per kind, and the resolved time unit.

    Rows whose metrics of a kind are all missing are left out of that kind's table.
    """
    n = batch.num_rows
    ts, unit = parse_timestamps(
        batch.column(mapping.time_column), unit, Where(source, mapping.time_column, first_row)
    )
    labels: dict[str, pa.Array] = {}
    for column, key in mapping.labels:
        text = pc.utf8_trim_whitespace(batch.column(column))
        labels[key] = pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)
    for key, value in mapping.constants:
        labels[key] = pa.array([value] * 1, pa.string()).take(np.zeros(n, dtype=np.int32))
    if mapping.fill_host and host is not None:
        fill = pa.scalar(host, pa.string())
        labels["host"] = (
            labels["host"].fill_null(fill)
            if "host" in labels
            else pa.nulls(n, pa.string()).fill_null(fill)
        )
    out: dict[Kind, pa.Table] = {}
    for kind in mapping.kinds:
        cols: dict[str, pa.Array] = {TS: pa.array(ts, type=pa.int64())}
        cols.update({k: v.dictionary_encode() for k, v in labels.items()})
        keep = np.zeros(n, dtype=bool)
        for metric in (m for m in mapping.metrics if m.kind is kind):
            where = Where(source, metric.column, first_row)
            values = metric.convert(parse_numbers(batch.column(metric.column), where))
            missing = np.isnan(values)
            keep |= ~missing
            cols[metric.field] = pa.array(values, type=pa.float64(), mask=missing)
        table = pa.table(cols)
        if not keep.all():
            table = table.filter(pa.array(keep))
        if table.num_rows:
            out[kind] = table
    return out, unit


def _arrow_error(source: str, exc: Exception, wanted: list[str], row: int = 0) -> CsvImportError:
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "include_columns" in message or "not found" in message.lower():
        return CsvImportError(
            source, f"a mapped column is missing (the map reads {', '.join(wanted)}): {message}"
        )
    if row > 1:
        message += f" (in the block that starts at row {row})"
    if not isinstance(exc, pa.ArrowException):
        return CsvImportError(source, f"the file is damaged or truncated: {message}")
    return CsvImportError(source, f"the CSV text is malformed: {message}")


def _concat(tables: list[pa.Table]) -> pa.Table:
    """One table from blocks and files whose columns may differ (missing → null)."""
    if len(tables) == 1:
        return tables[0]
    plain = []
    for t in tables:
        cols = {
            name: (col.cast(pa.string()) if pa.types.is_dictionary(col.type) else col)
            for name, col in zip(t.column_names, t.columns, strict=True)
        }
        plain.append(pa.table(cols))
    merged = pa.concat_tables(plain, promote_options="permissive")
    for i, fld in enumerate(merged.schema):
        if pa.types.is_string(fld.type):
            merged = merged.set_column(i, fld.name, merged.column(i).dictionary_encode())
    return merged
