"""The frames cache: per-minute aggregates of closed days, so long-span frames skip raw rows.

    <data_dir>/frames/step=60/date=YYYY-MM-DD/frame-<uuid8>.parquet
    <data_dir>/frames/step=60/date=YYYY-MM-DD/.tmp-frame-...        (being written)

A cache file holds, for one UTC day, the partial aggregates `gpu_intervals` needs to rebuild
the interval frame at any step that is a multiple of 60 s *exactly*: sums and counts instead
of means, min/max, first/last, the energy counter's min and max, per-process memory peaks and
the host and application context, each per 60 s bucket (`fb` = epoch_ns // 60 s), and the same
partial aggregates summed into 900 s and 3600 s buckets (column `lvl` = the bucket length, `fb`
counted in buckets of that length), with the coverage rule's seconds covered and without data
per bucket (format version 4), so that long reports read 15 or 60 times
fewer rows. Rows are sorted by part and level and written in small row groups, so a query
reads only its level's. The SQL that writes and reads them is in `frames.py`; this module knows
where the files are, writes them atomically, and decides whether one may be trusted.

Freshness: the footer records (key `gpulens.frame_inputs`) a digest of the day's *live* input
files (gpu, process, host and app tables: kind, name, size and mtime of each). A cache file is
used only while the digest of the live files now is the same; anything else (a new segment, a
compaction, a rewritten file, a different format version, an unreadable footer) makes it
stale, and a stale file is never read (the next maintenance pass rewrites it).
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from gpulens.clock import Clock, SystemClock
from gpulens.errors import StoreError
from gpulens.model import Kind
from gpulens.store.layout import (
    PARTITION_PREFIX,
    SUFFIX,
    LiveFiles,
    day_of,
    ensure_dir,
    partition_dir,
    partitions,
    read_footer_meta,
    write_atomic,
)
from gpulens.store.location import ObjectPath, StorePath

FRAMES_DIR = "frames"
CACHE_STEP_S = 60
#: the cache's bucket in ns: the fine bucket the coverage rule runs on when a step divides it
CACHE_STEP_NS = CACHE_STEP_S * 1_000_000_000
FRAME_PREFIX = "frame-"
INPUTS_KEY = b"gpulens.frame_inputs"
VERSION_KEY = b"gpulens.frame_version"
DAY_KEY = b"gpulens.frame_day"
#: bumped whenever the cached columns change meaning; other versions are stale
#: 2: coarser levels (`lvl` column) next to the 60 s partial sums; 3: every partial aggregate
#: that is not a sum and count is named as its column (the application maxima were `x_<name>`)
#: 4: first/last reading times and the coverage rule's columns per bucket (store/coverage.py)
#: 5: the MIG profile of each GPU entity
FORMAT_VERSION = b"5"
#: the raw tables an interval frame is built from
INPUT_KINDS: tuple[Kind, ...] = (Kind.GPU, Kind.PROCESS, Kind.HOST, Kind.APP)

_DAY_RE = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")


@dataclass(slots=True)
class CacheStats:
    """What `gpu_intervals` did with the frames cache (pass one in to find out)."""

    days_cached: int = 0  # days read from a fresh cache file
    days_stale: int = 0  # cache files ignored because their inputs changed
    days_corrupt: int = 0  # cache files ignored because their footer is unreadable
    fallbacks: int = 0  # queries over the cache that failed and were answered from raw rows
    last_error: str | None = None


def step_dir(data_dir: Path, step_s: int = CACHE_STEP_S) -> Path:
    return Path(data_dir) / FRAMES_DIR / f"step={step_s}"


def day_dir(data_dir: Path, day: str, step_s: int = CACHE_STEP_S) -> Path:
    return step_dir(data_dir, step_s) / f"{PARTITION_PREFIX}{day}"


def cached_days(data_dir: StorePath, step_s: int = CACHE_STEP_S) -> list[tuple[str, Path]]:
    """(day, directory) of every cache partition, oldest first."""
    if isinstance(data_dir, ObjectPath):
        return []  # kept on local disk only: object-store reports aggregate raw rows
    try:
        entries = list(os.scandir(step_dir(data_dir, step_s)))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StoreError(
            f"cannot list the frames cache {str(step_dir(data_dir))!r}: {exc}"
        ) from exc
    found = []
    for entry in entries:
        match = _DAY_RE.match(entry.name)
        if match and entry.is_dir():
            found.append((match.group(1), Path(entry.path)))
    return sorted(found)


def frame_files(part: Path) -> list[Path]:
    """The cache files of one day, newest name order last (temporary files never match)."""
    try:
        names = [p.name for p in part.iterdir()]
    except FileNotFoundError:
        return []
    return sorted(part / n for n in names if n.startswith(FRAME_PREFIX) and n.endswith(SUFFIX))


def inputs_digest(data_dir: StorePath, day: str, live: LiveFiles | None = None) -> str:
    """A digest of the live input files of `day`: kind, name, size and mtime of each."""
    live = live or LiveFiles(data_dir)
    h = hashlib.sha256()
    for kind in INPUT_KINDS:
        for path in live.partition(partition_dir(data_dir, kind, day))[0]:
            try:
                st = path.stat()
            except FileNotFoundError:
                continue  # superseded and deleted while we looked: not an input any more
            h.update(f"{kind.value}/{path.name}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def fresh_file(
    data_dir: StorePath, day: str, live: LiveFiles, stats: CacheStats | None = None
) -> Path | None:
    """The cache file of `day` whose inputs are still the live files, or None."""
    if isinstance(data_dir, ObjectPath):
        return None
    files = frame_files(day_dir(data_dir, day))
    if not files:
        return None
    try:
        digest = inputs_digest(data_dir, day, live)
    except StoreError:
        return None  # an unreadable raw file: the raw path will report it
    stale = corrupt = 0
    found: Path | None = None
    for path in files:
        try:
            meta = read_footer_meta(path)
        except FileNotFoundError:
            continue  # replaced while we looked
        except StoreError:
            corrupt += 1
            continue
        if meta.get(VERSION_KEY) == FORMAT_VERSION and meta.get(INPUTS_KEY) == digest.encode():
            found = path
        else:
            stale += 1
    if stats is not None:
        stats.days_corrupt += int(found is None and corrupt > 0)
        stats.days_stale += int(found is None and corrupt == 0 and stale > 0)
    return found


def closed_days_to_cache(data_dir: StorePath, *, clock: Clock | None = None) -> list[str]:
    """The closed UTC days (before today by `clock`) with raw data and no fresh cache file,
    oldest first; none in an object store (the cache is kept on local disk only)."""
    if isinstance(data_dir, ObjectPath):
        return []
    today = day_of((clock or SystemClock()).now_ns())
    days = sorted({d for kind in INPUT_KINDS for d, _ in partitions(data_dir, kind)})
    live = LiveFiles(data_dir)
    return [d for d in days if d < today and fresh_file(data_dir, d, live) is None]


def write_frame(
    data_dir: StorePath,
    day: str,
    table: pa.Table,
    digest: str,
    *,
    row_group_size: int | None = None,
) -> Path:
    """Write `table` as the cache of `day` (temporary name + rename), then drop older files."""
    if isinstance(data_dir, ObjectPath):
        raise StoreError(
            f"the frames cache is kept on local disk only, not in {str(data_dir)!r}: reports "
            "on an object store read raw rows"
        )
    part = day_dir(data_dir, day)
    ensure_dir(part)
    meta: Mapping[bytes, bytes] = {
        **(table.schema.metadata or {}),
        INPUTS_KEY: digest.encode(),
        VERSION_KEY: FORMAT_VERSION,
        DAY_KEY: day.encode(),
    }
    table = table.replace_schema_metadata(meta)
    final = part / f"{FRAME_PREFIX}{uuid.uuid4().hex[:8]}{SUFFIX}"
    try:
        options: dict[str, object] = {"compression": "zstd", "write_statistics": True}
        if row_group_size is not None:
            options["row_group_size"] = row_group_size
        write_atomic(final, table, options)
    except (OSError, pa.ArrowException) as exc:
        raise StoreError(
            f"cannot write the frames cache file {str(final)!r}: {exc}; check free space and "
            f"permissions of the data directory (the cache is optional: queries read raw rows)"
        ) from exc
    for old in frame_files(part):
        if old != final:
            with suppress(OSError):
                old.unlink()
    return final
