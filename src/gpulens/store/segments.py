"""The write side: buffer readings columnar, flush them as atomic Parquet segments.

Each `SegmentWriter` owns its segments (names carry its host and a random suffix), so any
number of writer processes can share a data directory without coordination. A flush writes one
segment per (kind, day) touched, each to a temporary name, fsynced, then renamed; a crash loses
at most the unflushed buffer. A failed flush (disk full, permissions) raises `StoreError`,
removes its temporary file, leaves stored files alone and keeps the unwritten rows for the next
flush, up to a bound (`max_buffer_rows`) beyond which the oldest rows are dropped and counted.
The final flush of `close` says instead that the rows it could not write were not stored.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.clock import Clock, SystemClock
from gpulens.errors import StoreError
from gpulens.model import FrozenLabels, Kind, Reading
from gpulens.store.commit import Commit
from gpulens.store.layout import (
    NS_PER_DAY,
    TMP_PREFIX,
    Opener,
    day_of,
    default_opener,
    ensure_dir,
    existing_dir,
    partition_dir,
    segment_name,
    write_atomic,
)
from gpulens.store.location import ObjectPath, StorePath, open_location
from gpulens.store.schema import SEGMENT_CODEC, TS, normalize, split_columns, ts_ns, write_options
from gpulens.store.segment_table import GroupColumns, day_tables, direct, group_columns

#: the smallest buffer cap after failed flushes, in rows (when no bound is given)
MIN_BUFFER_CAP = 100_000
#: while flushes fail, buffered tables are merged once there are more than this many
MAX_CHUNKS = 64
#: the size of the file a flush writes to see whether the disk takes writes again
PROBE_BYTES = 4096
#: when the buffer passes its bound, the oldest rows are dropped down to this share of it
DROP_TO = 0.9


@dataclass(frozen=True, slots=True)
class WriterStats:
    """Self-metrics of one writer (all counters since it was created)."""

    rows_written: int = 0
    bytes_written: int = 0
    segments_written: int = 0
    flush_errors: int = 0
    dropped_rows: int = 0
    rejected_rows: int = 0
    buffered_rows: int = 0
    last_flush_seconds: float = 0.0
    max_buffered_rows: int = 0


class _Group:
    """Readings of one kind and one shape (same label keys, same value keys), buffered flat.

    Label tuples are interned (`codes` index `label_rows`), values are one flat list of
    `len(ts) * len(value_keys)` numbers; both become columns only at `table()`.
    """

    __slots__ = ("codes", "label_index", "label_keys", "label_rows", "ts", "value_keys", "values")

    def __init__(self, label_keys: tuple[str, ...], value_keys: tuple[str, ...]) -> None:
        self.label_keys = label_keys
        self.value_keys = value_keys
        self.ts: list[int] = []
        self.codes: list[int] = []
        self.label_index: dict[tuple[str, ...], int] = {}
        self.label_rows: list[tuple[str, ...]] = []
        self.values: list[float] = []

    def code(self, labels: tuple[str, ...]) -> int:
        """The index of a (new) label tuple in `label_rows`."""
        code = self.label_index[labels] = len(self.label_rows)
        self.label_rows.append(labels)
        return code

    def table(self) -> pa.Table:
        rows = len(self.ts)
        cols: dict[str, pa.Array] = {TS: pa.array(self.ts, type=pa.int64())}
        if self.label_keys:
            codes = pa.array(self.codes, type=pa.int32())
            for j, key in enumerate(self.label_keys):
                uniques = pa.array([row[j] for row in self.label_rows], type=pa.string())
                cols[key] = uniques.take(codes)
        if self.value_keys:
            flat = np.array(self.values, dtype=np.float64)
            matrix = np.ascontiguousarray(flat.reshape(rows, len(self.value_keys)).T)
            for key, row in zip(self.value_keys, matrix, strict=True):
                cols[key] = pa.array(row, type=pa.float64(), mask=np.isnan(row))
        return pa.table(cols)


Groups = dict[tuple[Kind, tuple[str, ...], tuple[str, ...]], _Group]


def group_readings(groups: Groups, readings: Iterable[Reading]) -> None:
    """Add readings to `groups`, keyed by (kind, label keys, value keys)."""
    for r in readings:
        labels = r.labels
        values = r.values
        if type(labels) is FrozenLabels:
            label_keys, label_values = labels.keys_tuple, labels.values_tuple
        else:
            label_keys, label_values = tuple(labels), tuple(labels.values())
        key = (r.kind, label_keys, tuple(values))
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group(label_keys, key[2])
        code = group.label_index.get(label_values)
        group.codes.append(group.code(label_values) if code is None else code)
        group.ts.append(r.ts)
        group.values.extend(values.values())


class SegmentWriter:
    """Buffers readings and writes them as Parquet segments under `data_dir`.

    `append` and `append_table` only buffer; call `flush` when `flush_due(now)` says so (every
    `flush_seconds`), and `close` at the end. While flushes fail, at most `max_buffer_rows`
    rows are kept (default: 10 flushes' worth, at least MIN_BUFFER_CAP). `open_file` is
    injectable for tests. With a
    `commit`, segments are that commit's and stay invisible until it commits (`commit.py`).
    """

    def __init__(
        self,
        data_dir: StorePath,
        host: str,
        flush_seconds: float = 10.0,
        clock: Clock | None = None,
        *,
        max_buffer_rows: int | None = None,
        open_file: Opener = default_opener,
        commit: Commit | None = None,
    ) -> None:
        if flush_seconds <= 0:
            raise ValueError(f"flush_seconds must be > 0, got {flush_seconds!r}")
        self.data_dir = open_location(data_dir)
        self.host = host
        self.flush_seconds = flush_seconds
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._max_buffer_rows = max_buffer_rows
        self._open = open_file
        self._commit = commit
        self._lock = threading.Lock()
        self._groups: Groups = {}
        self._chunks: list[tuple[Kind, pa.Table]] = []
        self._last_flush_ns = self._clock.now_ns()
        self._largest_flush = 0
        self._failing = False
        self._stats = WriterStats()
        self._closed = False
        # once the data directory exists, a flush never makes it again (ensure_dir's `within`)
        self._root = existing_dir(self.data_dir)

    # -- buffering ---------------------------------------------------------------------------

    def append(self, readings: Iterable[Reading]) -> None:
        """Buffer readings (cheap: rows are grouped by shape, converted at flush)."""
        with self._lock:
            self._check_open()
            group_readings(self._groups, readings)
            if self._failing and self._buffered_rows() > self._cap():
                self._enforce_cap()

    def append_table(self, kind: Kind, table: pa.Table) -> None:
        """Buffer a columnar batch: a `ts` column (int64 ns or timestamp), string label
        columns and numeric metric columns (null = absent)."""
        kind = Kind(kind)
        split_columns(table)  # fail now, naming the column, not at flush time
        with self._lock:
            self._check_open()
            self._seal()
            if table.num_rows:
                self._chunks.append((kind, table))
            if self._failing and self._buffered_rows() > self._cap():
                self._enforce_cap()

    def buffered_rows(self) -> int:
        with self._lock:
            return self._buffered_rows()

    def _buffered_rows(self) -> int:
        grouped = sum(len(g.ts) for g in self._groups.values())
        return grouped + sum(int(t.num_rows) for _, t in self._chunks)

    def _seal(self) -> list[str]:
        """Turn reading groups into table chunks; returns errors for groups that cannot be."""
        errors: list[str] = []
        for (kind, _, _), group in self._groups.items():
            try:
                self._chunks.append((kind, group.table()))
            except (TypeError, ValueError, pa.ArrowException) as exc:
                errors.append(self._reject(kind, group, exc))
        self._groups = {}
        return errors

    def _reject(self, kind: Kind, group: _Group, exc: Exception) -> str:
        """Count the readings of a group that cannot be stored; says which and why."""
        self._stats = replace(self._stats, rejected_rows=self._stats.rejected_rows + len(group.ts))
        return (
            f"{len(group.ts)} {kind.value} readings with values {group.value_keys!r} "
            f"were rejected: {exc}"
        )

    # -- flushing ----------------------------------------------------------------------------

    def flush_due(self, now_ns: int) -> bool:
        """True when something is buffered and `flush_seconds` passed since the last flush."""
        with self._lock:
            has_rows = bool(self._groups or self._chunks)
            return has_rows and now_ns - self._last_flush_ns >= self.flush_seconds * 1e9

    def flush(self) -> list[StorePath]:
        """Write the buffer: one segment per (kind, day); returns the files written.

        Raises StoreError when a segment cannot be written (nothing stored is touched, the
        unwritten rows stay buffered for the next flush) or when readings were rejected.
        """
        with self._lock:
            return self._flush()

    def _flush(self, final: bool = False) -> list[StorePath]:
        started = time.perf_counter()
        self._last_flush_ns = self._clock.now_ns()
        fast = None if self._chunks or self._failing else self._direct_jobs()
        rejected = fast[1] if fast is not None else self._seal()
        if self._failing and not final:
            stuck = self._probe()
            if stuck is not None:  # still failing: spare rebuilding the whole buffer to know it
                self._stats = replace(self._stats, flush_errors=self._stats.flush_errors + 1)
                if len(self._chunks) > MAX_CHUNKS:
                    self._merge_chunks()
                self._enforce_cap()
                raise _unwritten(stuck, self._buffered_rows(), final)
        jobs = fast[0] if fast is not None else self._jobs()
        written: list[StorePath] = []
        failure: StoreError | None = None
        for i, (kind, day, table) in enumerate(jobs):
            try:
                path, size = self._write(kind, day, table)
            except StoreError as exc:
                failure = _unwritten(exc, sum(t.num_rows for _, _, t in jobs[i:]), final)
                # one contiguous table per (kind, day): many small chunks cost far more memory
                self._chunks = [(k, t.combine_chunks()) for k, _, t in jobs[i:]]
                break
            written.append(path)
            self._stats = replace(
                self._stats,
                rows_written=self._stats.rows_written + table.num_rows,
                bytes_written=self._stats.bytes_written + size,
                segments_written=self._stats.segments_written + 1,
            )
        else:
            self._chunks = []
            rows = sum(t.num_rows for _, _, t in jobs)
            self._largest_flush = max(self._largest_flush, rows)
        self._failing = failure is not None
        if failure is not None:
            self._stats = replace(self._stats, flush_errors=self._stats.flush_errors + 1)
            self._enforce_cap()
        self._stats = replace(self._stats, last_flush_seconds=time.perf_counter() - started)
        if failure is not None:
            # the error's traceback keeps this frame, and the frame the error: a cycle only the
            # garbage collector frees. Without the copies of the buffer it holds nothing large.
            jobs.clear()
            del table
            raise failure
        if rejected:
            raise StoreError("; ".join(rejected) + " (values must be numbers)")
        return written

    def _direct_jobs(self) -> tuple[list[tuple[Kind, str, pa.Table]], list[str]] | None:
        """What `_seal` then `_jobs` make of a buffer of reading groups alone, built straight
        from the groups (`segment_table`), with the rejections; None (nothing done) when a kind
        needs the general path."""
        by_kind: dict[Kind, list[GroupColumns]] = {}
        failed: list[tuple[Kind, _Group, Exception]] = []
        for (kind, _, _), group in self._groups.items():
            try:
                columns = group_columns(group)
            except (TypeError, ValueError, pa.ArrowException) as exc:
                failed.append((kind, group, exc))
                continue
            by_kind.setdefault(kind, []).append(columns)
        if not all(direct(groups) for groups in by_kind.values()):
            return None
        jobs = [
            (kind, day_of(day * NS_PER_DAY), table)
            for kind, groups in by_kind.items()
            for day, table in day_tables(groups)
        ]
        self._groups = {}
        return jobs, [self._reject(*f) for f in failed]

    def _jobs(self) -> list[tuple[Kind, str, pa.Table]]:
        """(kind, day, normalized table) for everything buffered."""
        by_kind: dict[Kind, list[pa.Table]] = {}
        for kind, table in self._chunks:
            by_kind.setdefault(kind, []).append(table)
        jobs: list[tuple[Kind, str, pa.Table]] = []
        for kind, tables in by_kind.items():
            merged = _concat(tables)
            days = ts_ns(merged.column(TS)) // NS_PER_DAY
            for day in np.unique(days):
                part = merged if days.min() == days.max() else merged.filter(days == day)
                jobs.append((kind, day_of(int(day) * NS_PER_DAY), normalize(part)))
        return jobs

    def _write(self, kind: Kind, day: str, table: pa.Table) -> tuple[StorePath, int]:
        start = int(pc.min(table.column(TS)).cast(pa.int64()).as_py())
        directory = partition_dir(self.data_dir, kind, day)
        name = self._commit.segment_name(self.host, start) if self._commit else None
        path = directory / (name or segment_name(self.host, start))
        try:
            ensure_dir(directory, within=self._root)
            self._root = self._root or existing_dir(self.data_dir)
            size = write_atomic(path, table, write_options(table, codec=SEGMENT_CODEC), self._open)
            if self._commit is not None:
                self._commit.add(path)
        except (OSError, pa.ArrowException, StoreError) as exc:
            raise StoreError(
                f"cannot write a {kind.value} segment in {str(directory)!r}: {exc}"
            ) from exc
        return path, size

    def _probe(self) -> StoreError | None:
        """Whether a small file can be written in the data directory now (None), or why not."""
        path = self.data_dir / f"{TMP_PREFIX}probe-{uuid.uuid4().hex}"
        if isinstance(path, ObjectPath):
            try:
                path.write_bytes(bytes(PROBE_BYTES))
                path.unlink(missing_ok=True)
            except (OSError, StoreError) as exc:
                return StoreError(f"cannot write in {str(self.data_dir)!r}: {exc}")
            return None
        try:
            with self._open(path) as f:
                f.write(bytes(PROBE_BYTES))
        except OSError as exc:
            return StoreError(f"cannot write in {str(self.data_dir)!r}: {exc}")
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        return None

    def _merge_chunks(self) -> None:
        """One contiguous table per kind in place of many small ones (they cost more memory)."""
        by_kind: dict[Kind, list[pa.Table]] = {}
        for kind, table in self._chunks:
            by_kind.setdefault(kind, []).append(table)
        self._chunks = [(k, _concat(ts).combine_chunks()) for k, ts in by_kind.items()]

    def _cap(self) -> int:
        """The most rows kept while flushes fail."""
        return self._max_buffer_rows or max(MIN_BUFFER_CAP, 10 * self._largest_flush)

    def _enforce_cap(self) -> None:
        """After failed flushes, drop the oldest rows beyond the cap, down to DROP_TO of it
        (so that this runs once per tenth of the cap, not on every append; counted in stats)."""
        cap = self._cap()
        self._seal()
        total = sum(t.num_rows for _, t in self._chunks)
        if total <= cap:
            return
        excess = total - int(cap * DROP_TO)
        if excess <= 0:
            return
        all_ts = np.concatenate([ts_ns(t.column(TS)) for _, t in self._chunks])
        cutoff = np.partition(all_ts, excess - 1)[excess - 1]
        kept: list[tuple[Kind, pa.Table]] = []
        for kind, table in self._chunks:
            keep = ts_ns(table.column(TS)) > cutoff
            if keep.any():
                kept.append((kind, table.filter(keep).combine_chunks()))
        self._chunks = kept
        dropped = total - sum(t.num_rows for _, t in kept)
        self._stats = replace(self._stats, dropped_rows=self._stats.dropped_rows + dropped)

    # -- lifecycle ---------------------------------------------------------------------------

    def stats(self) -> WriterStats:
        with self._lock:
            return replace(
                self._stats, buffered_rows=self._buffered_rows(), max_buffered_rows=self._cap()
            )

    def close(self) -> list[StorePath]:
        """Flush what is buffered and refuse further appends."""
        with self._lock:
            if self._closed:
                return []
            written = self._flush(final=True) if (self._groups or self._chunks) else []
            self._closed = True
            return written

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"this SegmentWriter for {str(self.data_dir)!r} is closed")

    def __enter__(self) -> SegmentWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _unwritten(exc: StoreError, rows: int, final: bool) -> StoreError:
    """The error of a failed flush, saying what became of the `rows` it could not write."""
    if final:
        fate = f"the {rows:,} readings still buffered were not stored"
        todo = "free disk space or fix the permissions of the data directory, then run again"
    else:
        fate = f"the {rows:,} unwritten readings stay buffered for the next flush"
        todo = "free disk space or fix the permissions of the data directory"
    return StoreError(f"{exc}; nothing already stored was changed and {fate}: {todo}")


def _concat(tables: list[pa.Table]) -> pa.Table:
    """Concatenate tables whose columns differ (missing columns become null)."""
    if len(tables) == 1:
        return tables[0]
    unified: list[pa.Table] = []
    for t in tables:
        labels, metrics = split_columns(t)
        cols: dict[str, pa.Array | pa.ChunkedArray] = {
            TS: pa.array(ts_ns(t.column(TS)), type=pa.int64())
        }
        for name in labels:
            col = t.column(name)
            cols[name] = col.cast(pa.string()) if pa.types.is_dictionary(col.type) else col
            cols[name] = cols[name].cast(pa.string())
        for name in metrics:
            cols[name] = t.column(name).cast(pa.float64())
        unified.append(pa.table(cols))
    return pa.concat_tables(unified, promote_options="permissive")
