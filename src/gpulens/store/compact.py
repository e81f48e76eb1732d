"""Compaction: merge the small segments of a (kind, day) partition into one larger file.

Protocol (crash-safe at every instant, see docs/storage.md):

1. take the partition's compaction lock (`flock` on `<kind>/.compact-date=YYYY-MM-DD.lock`,
   released by the kernel if the process dies) so two compactions never merge the same inputs;
2. choose inputs among the *live* files: for a past day every live file (segments and earlier
   compacted files), for today segments older than `min_age_seconds`, and also today's
   first-level compacted files (those made of segments only) once there are `TIER_FILES` of
   them: they are merged into one second-level file, which is merged again only once the day
   is over. A row is so rewritten at most three times, and today's partition holds at most
   `TIER_FILES` first-level files beside its second-level ones (one per `TIER_FILES`
   maintenance passes) and its young segments;
3. write the merged, sorted rows to a temporary name, with the input names in the footer
   (`gpulens.replaces`), fsync, rename to `cmp-<start>-<uuid8>.parquet`, fsync the directory:
   this rename is the commit; from then on readers skip the inputs;
4. delete superseded files once their replacement is older than `delete_grace_seconds`
   (a reader that listed the directory just before the commit still finds its inputs), and
   temporary files left by crashed writers after `stale_tmp_seconds`;
5. last, `commit.clean_commits`: the files of multi-segment commits whose writer died before
   committing, and the records of commits compacted away.

A crash before step 3 leaves only an invisible temporary file; a crash after it leaves
superseded inputs that readers already ignore and the next run deletes.

In an object store there is no `flock` that other machines see, so the inputs of one
compaction are only the files of one host (`host=`: the names of its segments, commits and
compacted files carry it), written `cmp-<host>-<start>-<uuid8>.parquet`: agents on different
machines compact their own files and never the same ones; on one machine a local `flock` keyed
by partition and host serialises them. Without `host` every host's files are compacted, each
host's separately (run it where no agent compacts, e.g. a nightly job). The output is one
upload, which appears whole or not at all: that upload is the commit; the rest is the same.

A lock file outlives its partition only until `remove_stale_locks` (run by retention) takes it
and deletes it; a lock is held only by a descriptor that is still the file at the lock's path,
so a lock deleted between someone's `open` and `flock` never admits two compactions.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path

import pyarrow as pa

from gpulens.clock import Clock, SystemClock
from gpulens.errors import StoreError
from gpulens.model import Kind
from gpulens.store.commit import clean_commits
from gpulens.store.layout import (
    COMPACTED_PREFIX,
    CREATED_KEY,
    NS_PER_DAY,
    PENDING_PREFIX,
    REPLACES_KEY,
    SEGMENT_PREFIX,
    SUFFIX,
    TMP_PREFIX,
    LiveFiles,
    compacted_name,
    corrupt_file_error,
    day_of,
    fsync_dir,
    name_host,
    name_start_ns,
    partitions,
    read_footer_meta,
    read_table,
    safe_host,
    write_atomic,
)
from gpulens.store.location import ObjectPath, StorePath, open_location
from gpulens.store.locks import take_lock as _take
from gpulens.store.schema import TS, ZSTD_LEVEL, normalize, write_options

LOCK_PREFIX = ".compact-"
LOCK_SUFFIX = ".lock"
#: today's first-level compacted files are merged into one once there are this many
TIER_FILES = 12

#: called with the name of each step, for tests that interrupt compaction midway
StepHook = Callable[[str], None]


@dataclass(slots=True)
class CompactionResult:
    """What one `compact` run did."""

    partitions_compacted: int = 0
    files_merged: int = 0
    rows_written: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    files_deleted: int = 0
    skipped_locked: int = 0
    deferred: int = 0  # large merges left by `defer_large`
    written: list[StorePath] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Every count of this result, by name (all but `written`)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "written"}

    def add(self, other: CompactionResult) -> None:
        """Count `other`'s work in this result too."""
        for name, n in other.counts().items():
            setattr(self, name, getattr(self, name) + n)
        self.written.extend(other.written)


def compact(
    data_dir: StorePath,
    *,
    host: str | None = None,
    clock: Clock | None = None,
    kinds: tuple[Kind, ...] = tuple(Kind),
    min_age_seconds: float = 600.0,
    min_files: int = 2,
    delete_grace_seconds: float = 60.0,
    stale_tmp_seconds: float = 3600.0,
    zstd_level: int = ZSTD_LEVEL,
    on_step: StepHook | None = None,
    last_days: int | None = None,
    defer_large: bool = False,
) -> CompactionResult:
    """Merge small segments of each (kind, day) partition of the store in `data_dir`; in an
    object store only the files of `host` (None: every host's, each host's apart).
    `last_days=N` looks only at today and the N-1 days before (each partition looked at costs
    requests on an object store; older days of a running agent are compacted already).
    `defer_large` merges only today's segments: the merges of a closed day and of today's
    first-level files, which hold up to a day in memory, are counted in `deferred` and left
    for a run without it (the agent runs that in a child process: app/store_child.py)."""
    data_dir = open_location(data_dir)
    now = (clock or SystemClock()).now_ns()
    today = day_of(now)
    step = on_step or (lambda _name: None)
    result = CompactionResult()
    live = LiveFiles(data_dir)
    remote = isinstance(data_dir, ObjectPath)
    first_day = day_of(now - (last_days - 1) * NS_PER_DAY) if last_days else ""
    for kind in kinds:
        for day, part in partitions(data_dir, kind):
            if day < first_day:
                continue
            with _locked(part, host) as got:
                if not got:
                    result.skipped_locked += 1
                    continue
                if isinstance(part, Path) and not part.is_dir():  # deleted since listed
                    lock_path(part).unlink(missing_ok=True)  # ours: held, so nobody compacts
                    continue
                files, superseded = live.partition(part)
                _delete_superseded(live, part, superseded, now, delete_grace_seconds, result)
                if isinstance(part, Path):
                    _delete_stale_tmp(part, now, stale_tmp_seconds)
                groups = _by_host(files, host) if remote else {None: files}
                for owner, group in groups.items():
                    inputs = _choose(group, day == today, now, min_age_seconds, live)
                    if len(inputs) < min_files:
                        continue
                    if defer_large and _is_large(inputs, day == today):
                        result.deferred += 1
                        continue
                    step("inputs-chosen")
                    _merge(part, inputs, now, zstd_level, step, result, owner)
                    step("committed")
                    if delete_grace_seconds <= 0:
                        for f in inputs:
                            _delete_tree(live, f, result, step)
                        fsync_dir(part)
    cleaned = clean_commits(data_dir)
    result.files_deleted += cleaned.files_deleted
    return result


def _by_host(files: list[StorePath], host: str | None) -> dict[str | None, list[StorePath]]:
    """Files grouped by the host their name carries (only `host`'s when given)."""
    groups: dict[str | None, list[StorePath]] = {}
    wanted = safe_host(host) if host is not None else None
    for f in files:
        owner = name_host(f.name)
        if wanted is None or owner == wanted:
            groups.setdefault(owner, []).append(f)
    return groups


def _choose(
    files: list[StorePath], is_today: bool, now: int, min_age: float, live: LiveFiles
) -> list[StorePath]:
    """The inputs of one merge: a past day's every live file; today's segments older than
    `min_age`, with today's first-level compacted files once there are `TIER_FILES`."""
    if not is_today:
        return files
    cutoff = now - int(min_age * 1e9)
    segments = [
        f
        for f in files
        if f.name.startswith((SEGMENT_PREFIX, PENDING_PREFIX)) and name_start_ns(f.name) < cutoff
    ]
    first_level = [f for f in files if _is_first_level(f, live)]
    return [*first_level, *segments] if len(first_level) >= TIER_FILES else segments


def _is_large(inputs: list[StorePath], is_today: bool) -> bool:
    """Whether a merge may hold much more than a few minutes of rows: a closed day's, or one
    that takes compacted files."""
    return not is_today or any(f.name.startswith(COMPACTED_PREFIX) for f in inputs)


def _is_first_level(path: StorePath, live: LiveFiles) -> bool:
    """Whether `path` is a compacted file made of segments only (none of its inputs compacted)."""
    if not path.name.startswith(COMPACTED_PREFIX):
        return False
    try:
        replaced = live.replaces(path)
    except FileNotFoundError:
        return False
    return not any(name.startswith(COMPACTED_PREFIX) for name in replaced)


def _merge(
    part: StorePath,
    inputs: list[StorePath],
    now: int,
    zstd_level: int,
    step: StepHook,
    result: CompactionResult,
    owner: str | None = None,
) -> None:
    tables: list[pa.Table] = []
    for f in inputs:
        try:
            tables.append(read_table(f))
        except (OSError, pa.ArrowException) as exc:
            raise corrupt_file_error(f, exc) from exc
        result.bytes_before += f.stat().st_size
    merged = normalize(_unify(tables))
    start = int(merged.column(TS).cast(pa.int64())[0].as_py()) if merged.num_rows else now
    meta = {
        REPLACES_KEY: json.dumps(sorted(f.name for f in inputs)).encode(),
        CREATED_KEY: b"%d" % now,
    }
    merged = merged.replace_schema_metadata({**(merged.schema.metadata or {}), **meta})
    first = min(start, min(name_start_ns(f.name) for f in inputs))
    final = part / compacted_name(first, owner)
    step("before-write")
    try:
        size = write_atomic(final, merged, write_options(merged, zstd_level=zstd_level))
    except (OSError, pa.ArrowException, StoreError) as exc:
        raise StoreError(
            f"cannot write a compacted file in {str(part)!r}: {exc}; the store is unchanged "
            f"(its segments stay as they were), free disk space and run compaction again"
        ) from exc
    result.partitions_compacted += 1
    result.files_merged += len(inputs)
    result.rows_written += int(merged.num_rows)
    result.bytes_after += size
    result.written.append(final)


def _unify(tables: list[pa.Table]) -> pa.Table:
    """Concatenate tables whose columns and float widths differ (`normalize` then gives every
    column its stored type). Arrow promotes float widths itself; only a label stored both as
    dictionary and as plain strings (files from other writers) needs each table cast first."""
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return pa.concat_tables([_widened(t) for t in tables], promote_options="permissive")


def _widened(table: pa.Table) -> pa.Table:
    """`table` with floats as float64 and dictionary columns as plain strings."""
    fields = []
    for f in table.schema:
        if pa.types.is_floating(f.type):
            f = f.with_type(pa.float64())
        elif pa.types.is_dictionary(f.type):
            f = f.with_type(pa.string())
        fields.append(f)
    return table.cast(pa.schema(fields, metadata=table.schema.metadata))


def _delete_superseded(
    live: LiveFiles,
    part: StorePath,
    superseded: list[StorePath],
    now: int,
    grace: float,
    result: CompactionResult,
) -> None:
    """Delete what live compacted files replace, once they are `grace` seconds old."""
    if not superseded:
        return
    gone = {f.name for f in superseded}
    found: list[StorePath] = [*part.glob(f"{COMPACTED_PREFIX}*{SUFFIX}")]
    for cmp in sorted(found, key=str):
        if cmp.name in gone:
            continue  # only a live replacement decides
        try:
            created = int(read_footer_meta(cmp).get(CREATED_KEY, b"0"))
            replaced = live.replaces(cmp)
        except FileNotFoundError:
            continue
        if now - created < grace * 1e9:
            continue
        for name in sorted(replaced & gone):  # the others were deleted by earlier runs
            _delete_tree(live, part / name, result, lambda _s: None)
    fsync_dir(part)


def _delete_tree(
    live: LiveFiles, path: StorePath, result: CompactionResult, step: StepHook
) -> None:
    """Delete a superseded file; for a compacted one, first what it replaced, made durable
    before the file itself goes (so that nothing it hides can reappear as live if we stop
    halfway). The caller syncs the directory once after the last deletion."""
    if path.name.startswith(COMPACTED_PREFIX):
        try:
            replaced = live.replaces(path)
        except FileNotFoundError:
            return
        for name in sorted(replaced):
            _delete_tree(live, path.parent / name, result, step)
        fsync_dir(path.parent)
    if _unlink(path, result):
        step("input-deleted")


def _delete_stale_tmp(part: Path, now: int, max_age: float) -> None:
    for tmp in part.glob(f"{TMP_PREFIX}*"):
        try:
            if now - tmp.stat().st_mtime_ns > max_age * 1e9:
                tmp.unlink()
        except FileNotFoundError:
            continue


def _unlink(path: StorePath, result: CompactionResult) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    result.files_deleted += 1
    return True


def lock_path(part: Path) -> Path:
    """The compaction lock of the partition directory `part`: `<kind>/.compact-<part>.lock`."""
    return part.parent / f"{LOCK_PREFIX}{part.name}{LOCK_SUFFIX}"


def remove_stale_locks(data_dir: Path, kind: Kind) -> int:
    """Delete the compaction locks of `kind` whose partition no longer exists (deleted by
    retention, or by hand); returns how many. A lock is deleted only while this process holds
    it, so one that another process holds stays until a later run, as does one it cannot open
    or delete (a stale lock file is only an empty file)."""
    root = Path(data_dir) / kind.value
    removed = 0
    for lock in sorted(root.glob(f"{LOCK_PREFIX}*{LOCK_SUFFIX}")):
        part = root / lock.name.removeprefix(LOCK_PREFIX).removesuffix(LOCK_SUFFIX)
        if part.exists():
            continue
        try:
            fd = _take(lock, create=False)
        except OSError:
            continue
        if fd is None:
            continue
        try:
            if not part.exists():  # checked again while held: no compaction runs on it now
                lock.unlink(missing_ok=True)
                removed += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    if removed:
        fsync_dir(root)
    return removed


def object_lock_path(part: ObjectPath, host: str | None) -> Path:
    """The local lock that serialises this machine's compactions of `host`'s files of an
    object-store partition (other machines compact other hosts' files)."""
    digest = hashlib.sha256(f"{part}\0{host}".encode()).hexdigest()[:32]
    directory = Path(tempfile.gettempdir()) / "gpulens-compact-locks"
    directory.mkdir(exist_ok=True)
    return directory / f"{digest}{LOCK_SUFFIX}"


@contextmanager
def _locked(part: StorePath, host: str | None = None) -> Iterator[bool]:
    """Hold the compaction lock of a partition; yields False when another process holds it."""
    lock = object_lock_path(part, host) if isinstance(part, ObjectPath) else lock_path(part)
    fd = _take(lock, create=True)
    if fd is None:
        yield False
        return
    try:
        yield True
    finally:
        os.close(fd)
