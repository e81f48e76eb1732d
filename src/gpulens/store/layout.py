"""Where the store keeps its files, how they are named, and which of them are live.

    <data_dir>/<kind>/date=YYYY-MM-DD/seg-<host>-<start_ns>-<uuid8>.parquet   (a writer's flush)
    <data_dir>/<kind>/date=YYYY-MM-DD/cmp-<start_ns>-<uuid8>.parquet          (a compaction)
    <data_dir>/<kind>/date=YYYY-MM-DD/.tmp-...                               (being written)
    <data_dir>/<kind>/date=YYYY-MM-DD/txn-<id>-<host>-<start_ns>-<uuid8>.parquet (a commit's)
    <data_dir>/_commits/<id>.json, <id>.lock                  (commit record, writer's lock)

A file appears under its final name only by an atomic rename after it was fsynced, so a reader
never sees half a file. A compacted file records in its Parquet footer (key `gpulens.replaces`)
the names of the files it merged; those are *superseded* from the moment it appears, and
`live_files` leaves them out. A `txn-<id>-` file is live only once the record `<id>.json`
exists (`commit.Commit`); readers list the records before the files. docs/storage.md explains
the protocol.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from gpulens.errors import StoreError
from gpulens.model import Kind
from gpulens.store.location import ObjectPath, StorePath, parallel_map

SEGMENT_PREFIX = "seg-"
PENDING_PREFIX = "txn-"
COMMITS_DIR = "_commits"
RECORD_SUFFIX = ".json"
COMPACTED_PREFIX = "cmp-"
TMP_PREFIX = ".tmp-"
SUFFIX = ".parquet"
PARTITION_PREFIX = "date="
REPLACES_KEY = b"gpulens.replaces"
CREATED_KEY = b"gpulens.created_ns"
NS_PER_DAY = 86_400 * 1_000_000_000
#: files with more rows than this are read with Arrow's thread pool (`read_table`)
THREADED_READ_ROWS = 1 << 20

_PARTITION_RE = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
_HOST_UNSAFE = re.compile(r"[^A-Za-z0-9._]")

#: opens a path for binary writing; injectable so tests can simulate a full disk
Opener = Callable[[Path], BinaryIO]


def default_opener(path: Path) -> BinaryIO:
    """Create `path` exclusively for writing (never overwrite: names are unique)."""
    return path.open("xb")


def day_of(ts_ns: int) -> str:
    """The UTC day (YYYY-MM-DD) a timestamp in nanoseconds falls on."""
    return datetime.fromtimestamp(ts_ns // NS_PER_DAY * 86_400, tz=UTC).strftime("%Y-%m-%d")


def day_start_ns(day: str) -> int:
    """Nanoseconds at 00:00 UTC of `day` (YYYY-MM-DD)."""
    return int(datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()) * 10**9


def partition_dir(data_dir: StorePath, kind: Kind, day: str) -> StorePath:
    return data_dir / kind.value / f"{PARTITION_PREFIX}{day}"


def segment_name(host: str, start_ns: int, prefix: str = SEGMENT_PREFIX) -> str:
    """A writer's segment name; `host` is made file-name safe (anything odd becomes `_`)."""
    return f"{prefix}{safe_host(host)}-{start_ns}-{uuid.uuid4().hex[:8]}{SUFFIX}"


def compacted_name(start_ns: int, host: str | None = None) -> str:
    """A compacted file's name; on object storage it carries the host whose files it merged."""
    owner = f"{safe_host(host)}-" if host is not None else ""
    return f"{COMPACTED_PREFIX}{owner}{start_ns}-{uuid.uuid4().hex[:8]}{SUFFIX}"


def name_host(name: str) -> str | None:
    """The (file-name safe) host a segment, commit or per-host compacted name carries."""
    parts = name.removesuffix(SUFFIX).split("-")
    if name.startswith(PENDING_PREFIX) and len(parts) >= 5:
        return parts[2]
    if name.startswith((SEGMENT_PREFIX, COMPACTED_PREFIX)) and len(parts) >= 4:
        return parts[1]
    return None


def safe_host(host: str) -> str:
    """`host` as segment names carry it."""
    return _HOST_UNSAFE.sub("_", host) or "unknown"


def name_start_ns(name: str) -> int:
    """The start timestamp a segment or compacted file name records (0 if unreadable)."""
    parts = name.removesuffix(SUFFIX).split("-")
    try:
        return int(parts[-2])
    except (IndexError, ValueError):
        return 0


def partitions(data_dir: StorePath, kind: Kind) -> list[tuple[str, StorePath]]:
    """(day, directory) of every day partition of `kind`, oldest first."""
    root = data_dir / kind.value
    if isinstance(root, ObjectPath):
        days = [
            (m.group(1), root / name)
            for name, is_dir, _ in root.entries()
            if is_dir and (m := _PARTITION_RE.match(name))
        ]
        return sorted(days, key=lambda d: d[0])
    found: list[tuple[str, StorePath]] = []
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StoreError(f"cannot list store directory {str(root)!r}: {exc}") from exc
    for entry in entries:
        match = _PARTITION_RE.match(entry.name)
        if match and entry.is_dir():
            found.append((match.group(1), Path(entry.path)))
    return sorted(found, key=lambda d: d[0])


def committed_ids(data_dir: StorePath) -> frozenset[str]:
    """Ids of the commits whose record exists: their `txn-<id>-` files are live."""
    try:
        names = [p.name for p in (data_dir / COMMITS_DIR).iterdir()]
    except FileNotFoundError:
        return frozenset()
    except OSError as exc:
        raise StoreError(f"cannot list {str(data_dir / COMMITS_DIR)!r}: {exc}") from exc
    return frozenset(n.removesuffix(RECORD_SUFFIX) for n in names if n.endswith(RECORD_SUFFIX))


def pending_id(name: str) -> str | None:
    """The commit id a `txn-<id>-...` file name carries (None for any other name)."""
    if not name.startswith(PENDING_PREFIX):
        return None
    return name[len(PENDING_PREFIX) :].split("-", 1)[0]


def data_files(partition: StorePath, committed: frozenset[str] = frozenset()) -> list[StorePath]:
    """Segment and compacted files of one partition, and the files of the `committed` commits
    (temporary files and uncommitted `txn-` files never match)."""
    try:
        names = [p.name for p in partition.iterdir()]
    except FileNotFoundError:  # removed by retention while we looked
        return []
    return sorted(
        (
            partition / n
            for n in names
            if n.endswith(SUFFIX)
            and (
                n.startswith((SEGMENT_PREFIX, COMPACTED_PREFIX))
                or (committed and pending_id(n) in committed)
            )
        ),
        key=str,
    )


def read_metadata(path: StorePath) -> pq.FileMetaData:
    """The Parquet footer of a local or object-store file (FileNotFoundError when missing)."""
    if isinstance(path, ObjectPath):
        try:
            return pq.read_metadata(path.key, filesystem=path.fs)
        except OSError as exc:
            if "does not exist" in str(exc) or "NoSuchKey" in str(exc):
                raise FileNotFoundError(str(path)) from exc
            raise
    return pq.read_metadata(path)


def read_table(path: StorePath) -> pa.Table:
    """A whole Parquet file, local or in an object store.

    A local file is read through `ParquetFile` on this thread when it is small (a segment):
    `pq.read_table` goes through the dataset machinery and a thread pool, which costs ~2.4×
    the CPU on a 10 s segment, and compaction reads hundreds of them an hour.
    """
    if isinstance(path, ObjectPath):
        return pq.read_table(path.key, filesystem=path.fs)
    with pq.ParquetFile(path) as parquet:
        return parquet.read(use_threads=parquet.metadata.num_rows > THREADED_READ_ROWS)


def read_footer_meta(path: StorePath) -> Mapping[bytes, bytes]:
    """The key-value metadata of a Parquet file; StoreError names a corrupt file."""
    try:
        meta = read_metadata(path).metadata
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise corrupt_file_error(path, exc) from exc
    return meta or {}


def corrupt_file_error(path: StorePath, exc: BaseException) -> StoreError:
    return StoreError(
        f"store file {str(path)!r} is not a readable Parquet file ({exc}); it was probably "
        f"truncated or damaged outside gpulens: move it aside (e.g. to a 'quarantine' folder "
        f"outside the data directory) and try again"
    )


class LiveFiles:
    """Lists the live data files of a kind; caches what each compacted file replaces."""

    def __init__(self, data_dir: StorePath) -> None:
        self.data_dir = data_dir
        self._replaces: dict[StorePath, frozenset[str]] = {}

    def replaces(self, path: StorePath) -> frozenset[str]:
        """Names of the files the compacted file `path` supersedes (cached: files never change)."""
        cached = self._replaces.get(path)
        if cached is None:
            raw = read_footer_meta(path).get(REPLACES_KEY, b"[]")
            cached = frozenset(json.loads(raw))
            self._replaces[path] = cached
        return cached

    def partition(
        self, partition: StorePath, committed: frozenset[str] | None = None
    ) -> tuple[list[StorePath], list[StorePath]]:
        """(live, superseded) files of one partition; `committed` as `committed_ids` said
        before the partition is listed (read now when None)."""
        if committed is None:
            committed = committed_ids(self.data_dir)
        files = data_files(partition, committed)
        if isinstance(partition, ObjectPath):  # one footer request each: send them together
            unread = [f for f in files if f.name.startswith(COMPACTED_PREFIX)]
            parallel_map(self._prefetch, [f for f in unread if f not in self._replaces])
        gone: set[str] = set()
        for f in files:
            if f.name.startswith(COMPACTED_PREFIX):
                try:
                    gone |= self.replaces(f)
                except FileNotFoundError:
                    continue  # itself superseded and deleted while we looked
        live = [f for f in files if f.name not in gone]
        return live, [f for f in files if f.name in gone]

    def _prefetch(self, path: StorePath) -> None:
        with suppress(FileNotFoundError, StoreError):
            self.replaces(path)

    def live(self, kind: Kind) -> list[StorePath]:
        """Every live file of `kind`, oldest partition first."""
        committed = committed_ids(self.data_dir)  # before the listing: see commit.py
        out: list[StorePath] = []
        for _day, part in partitions(self.data_dir, kind):
            out.extend(self.partition(part, committed)[0])
        return out


def fsync_dir(path: StorePath) -> None:
    """Make a rename or a new entry in directory `path` durable (nothing to do for objects)."""
    if isinstance(path, ObjectPath):
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def existing_dir(path: StorePath) -> Path | None:
    """`path` when it is a local directory that exists now, else None (the `within` of
    `ensure_dir` for a writer whose data directory was there when it started)."""
    return path if isinstance(path, Path) and path.is_dir() else None


def ensure_dir(path: StorePath, within: Path | None = None) -> None:
    """Create `path` (and parents) durably: each new directory entry is fsynced (object stores
    have no directories: nothing to do). With `within`, only directories below it are made:
    FileNotFoundError when `within` itself is gone (a data directory removed or unmounted
    under a writer is not made again, empty, where the volume was)."""
    if isinstance(path, ObjectPath) or path.is_dir():
        return
    missing: list[Path] = []
    p = path
    while not p.exists():
        if within is not None and p == within:
            raise FileNotFoundError(f"{str(within)!r} no longer exists (removed or unmounted)")
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(exist_ok=True)
        fsync_dir(d.parent)


@contextmanager
def _removing_on_error(tmp: Path) -> Iterator[None]:
    try:
        yield
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(
    final: StorePath,
    table: pa.Table,
    write_options: Mapping[str, object],
    opener: Opener = default_opener,
) -> int:
    """Write `table` to `final` via fsynced temporary file + rename; returns bytes written.
    In an object store: encoded in memory, then one upload (`ObjectPath.write_bytes`), which
    appears complete or not at all.

    Raises OSError / ArrowException as they come; the temporary file is removed first.
    """
    if isinstance(final, ObjectPath):
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, **write_options)
        return final.write_bytes(sink.getvalue())
    tmp = final.with_name(f"{TMP_PREFIX}{final.name}")
    with _removing_on_error(tmp):
        with opener(tmp) as fh:
            pq.write_table(table, fh, **write_options)
            fh.flush()
            os.fsync(fh.fileno())
        size = tmp.stat().st_size
        tmp.rename(final)
    # the file is in place and complete; only the entry's durability could be uncertain
    with suppress(OSError):
        fsync_dir(final.parent)
    return size
