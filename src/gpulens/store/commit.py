"""The multi-segment commit: segments written over minutes become visible together, or never.

A `Commit` lets one writer (an import of a large file, a batch upload) stream any number of
segments, in any kinds and days, and publish them in one atomic step:

    with Commit(data_dir) as commit:
        writer = SegmentWriter(data_dir, host, commit=commit)
        writer.append_table(Kind.GPU, batch)   # ... flush as often as memory asks
        writer.close()
        commit.commit()                        # every segment is visible from here on
    # leaving the block without commit() (an exception) deletes what was written

Protocol (crash-safe at every instant; docs/storage.md):

1. `Commit()` picks an id and takes `<data_dir>/_commits/<id>.lock` (`flock`, released by the
   kernel if the process dies) before anything is written;
2. each segment is written atomically (temporary name, fsync, rename) as
   `txn-<id>-<host>-<start_ns>-<uuid8>.parquet` in its partition; readers, compaction and
   the frames cache ignore `txn-` files whose commit has no record;
3. `commit()` writes the record `<data_dir>/_commits/<id>.json` (the files, relative to the
   data directory) to a temporary name, fsyncs it and renames it: this rename is the commit.
   Readers list the records before the partitions, so a listing sees all of a commit's files
   or none. The lock is then released and deleted;
4. `abort()` (or an exception in the `with` block) deletes the commit's files, then its lock.

A crash before step 3 leaves `txn-` files nobody sees; `clean_commits` (run by `compact`)
deletes them once their lock is free. Committed files stay `txn-` files until compaction
merges them; a record is deleted once none of its files exists any more.

In an object store (no `flock`, no rename) the lock is an object, `<id>.lock`, uploaded before
the first segment and again (a heartbeat) with each segment at most every HEARTBEAT_SECONDS;
a commit is abandoned when that object is missing or older than `stale_seconds`. Each segment
and the record are single uploads, which appear whole or not at all: the record's upload is
the commit. Before it, `commit()` checks that every segment is still there.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from gpulens.errors import StoreError
from gpulens.model import Kind
from gpulens.store.layout import (
    COMMITS_DIR,
    PENDING_PREFIX,
    RECORD_SUFFIX,
    SUFFIX,
    TMP_PREFIX,
    ensure_dir,
    existing_dir,
    fsync_dir,
    partitions,
    pending_id,
    segment_name,
)
from gpulens.store.location import ObjectPath, StorePath, open_location
from gpulens.store.locks import take_lock

LOCK_SUFFIX = ".lock"
#: in an object store, how often a commit's lock object is refreshed while segments are added
HEARTBEAT_SECONDS = 60.0
#: in an object store, a commit whose lock object is this old is abandoned (its writer died)
STALE_SECONDS = 3600.0


def commits_dir(data_dir: StorePath) -> StorePath:
    return open_location(data_dir) / COMMITS_DIR


class Commit:
    """A set of segments under `data_dir` that become visible together (`commit`) or are
    deleted (`abort`); pass it to `SegmentWriter(commit=...)`. One process, one thread."""

    def __init__(self, data_dir: StorePath) -> None:
        self.data_dir = open_location(data_dir)
        self.files: list[StorePath] = []
        self.state = "open"
        directory = commits_dir(self.data_dir)
        self._fd: int | None = None
        self._beat = 0.0
        if isinstance(directory, ObjectPath):
            self.id = uuid.uuid4().hex[:16]
            self._lock: StorePath = directory / f"{self.id}{LOCK_SUFFIX}"
            self._heartbeat(force=True)
            return
        fd = None
        # a data directory that exists is not made again if it goes (ensure_dir's `within`)
        root = existing_dir(self.data_dir)
        for _attempt in range(3):  # a lock `clean_commits` deleted before we held it: retry
            self.id = uuid.uuid4().hex[:16]
            self._lock = directory / f"{self.id}{LOCK_SUFFIX}"
            try:
                ensure_dir(directory, within=root)
                fd = take_lock(self._lock, create=True)
            except OSError as exc:
                raise StoreError(
                    f"cannot start a commit in {str(directory)!r}: {exc}; check the "
                    "permissions of the data directory"
                ) from exc
            if fd is not None:
                break
        if fd is None:
            raise StoreError(f"cannot lock {str(self._lock)!r} for a new commit")
        self._fd = fd

    def _heartbeat(self, force: bool = False) -> None:
        """Object stores: (re)upload the lock object, which says this writer is alive."""
        now = time.monotonic()
        if not isinstance(self._lock, ObjectPath) or (
            not force and now - self._beat < HEARTBEAT_SECONDS
        ):
            return
        try:
            self._lock.write_text(json.dumps({"created_ns": time.time_ns()}))
        except (OSError, StoreError) as exc:
            raise StoreError(
                f"cannot write the commit lock {str(self._lock)!r}: {exc}; check the "
                "credentials and permissions of the bucket"
            ) from exc
        self._beat = now

    def segment_name(self, host: str, start_ns: int) -> str:
        """The name of a segment of this commit (invisible until `commit`)."""
        return segment_name(host, start_ns, prefix=f"{PENDING_PREFIX}{self.id}-")

    def add(self, path: StorePath) -> None:
        """Record a segment written (atomically, complete) for this commit."""
        self._check_open()
        self.files.append(path)
        self._heartbeat()

    def commit(self) -> list[StorePath]:
        """Make every segment of this commit visible at once; returns them."""
        self._check_open()
        directory = commits_dir(self.data_dir)
        names = [str(f.relative_to(self.data_dir)) for f in self.files]  # type: ignore[arg-type]
        if isinstance(directory, ObjectPath):
            self._commit_object(directory, names)
        else:
            self._commit_file(Path(directory), names)
        self.state = "committed"
        self._release()
        return list(self.files)

    def _commit_object(self, directory: ObjectPath, names: list[str]) -> None:
        record = directory / f"{self.id}{RECORD_SUFFIX}"
        try:
            missing = [str(f) for f in self.files if not f.exists()]
            if missing:
                raise OSError(f"{len(missing)} segments vanished, e.g. {missing[0]!r}")
            record.write_text(json.dumps({"files": names}))
        except (OSError, StoreError) as exc:
            self.abort()
            raise StoreError(
                f"cannot commit {len(names)} segments in {str(self.data_dir)!r}: {exc}; "
                "nothing of them was stored: check the bucket's credentials and permissions "
                "and run it again"
            ) from exc

    def _commit_file(self, directory: Path, names: list[str]) -> None:
        record = directory / f"{self.id}{RECORD_SUFFIX}"
        tmp = directory / f"{TMP_PREFIX}{record.name}"
        try:
            with tmp.open("x") as fh:
                json.dump({"files": names}, fh)
                fh.flush()
                os.fsync(fh.fileno())
            tmp.rename(record)
            fsync_dir(directory)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            self.abort()
            raise StoreError(
                f"cannot commit {len(names)} segments in {str(self.data_dir)!r}: {exc}; "
                "nothing of them was stored: free disk space or fix the permissions of the "
                "data directory and run it again"
            ) from exc

    def abort(self) -> None:
        """Delete the segments written so far; nothing of this commit is ever visible."""
        if self.state != "open":
            return
        self.state = "aborted"
        for path in self.files:
            path.unlink(missing_ok=True)
        for parent in {p.parent for p in self.files}:
            with suppress(OSError):
                fsync_dir(parent)
        self._release()

    def _release(self) -> None:
        if isinstance(self._lock, ObjectPath):
            with suppress(OSError, StoreError):
                self._lock.unlink(missing_ok=True)
            return
        if self._fd is None:
            return
        self._lock.unlink(missing_ok=True)  # while held: nobody takes a deleted lock
        os.close(self._fd)
        self._fd = None

    def _check_open(self) -> None:
        if self.state != "open":
            raise StoreError(f"commit {self.id} is already {self.state}")

    def __enter__(self) -> Commit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()


@dataclass(slots=True)
class CleanResult:
    """What one `clean_commits` pass removed."""

    files_deleted: int = 0
    records_deleted: int = 0
    locks_deleted: int = 0


def clean_commits(data_dir: StorePath, *, stale_seconds: float = STALE_SECONDS) -> CleanResult:
    """Delete the files of commits whose writer died before committing, the records of
    commits none of whose files is left (compacted and deleted), and their stale locks
    (object stores: lock objects older than `stale_seconds`)."""
    data_dir = open_location(data_dir)
    result = CleanResult()
    directory = commits_dir(data_dir)
    if isinstance(directory, ObjectPath) and not directory.entries():
        return result  # no commit has a lock or a record: skip listing every partition
    kept: set[str] = set()  # commits with files still in place (committed, or in progress)
    for kind in Kind:
        for _day, part in partitions(data_dir, kind):
            try:
                names = [p.name for p in part.iterdir()]
            except FileNotFoundError:
                continue
            for name in names:
                tid = pending_id(name)
                if tid is None or not name.endswith(SUFFIX):
                    continue
                if not _abandoned(data_dir, tid, stale_seconds):
                    kept.add(tid)
                    continue
                with suppress(FileNotFoundError):
                    (part / name).unlink()
                    result.files_deleted += 1
    try:
        names = [p.name for p in directory.iterdir()]
    except FileNotFoundError:
        return result
    for name in names:
        is_record = name.endswith(RECORD_SUFFIX) and not name.startswith(TMP_PREFIX)
        if is_record and _retire_record(data_dir, directory / name):
            result.records_deleted += 1
    for name in names:
        tid = name.removesuffix(LOCK_SUFFIX)
        if not name.endswith(LOCK_SUFFIX) or tid in kept:
            continue
        if _drop_lock(directory / name, stale_seconds):
            result.locks_deleted += 1
    return result


def _stale(lock: ObjectPath, stale_seconds: float) -> bool:
    """True when the lock object is missing or older than `stale_seconds`."""
    try:
        age_ns = time.time_ns() - lock.stat().st_mtime_ns
    except FileNotFoundError:
        return True
    return age_ns > stale_seconds * 1e9


def _abandoned(data_dir: StorePath, tid: str, stale_seconds: float) -> bool:
    """True when commit `tid` has no record and no living writer (checked in that order
    against a writer that commits meanwhile: lock first, then record)."""
    directory = commits_dir(data_dir)
    if isinstance(directory, ObjectPath):
        if not _stale(directory / f"{tid}{LOCK_SUFFIX}", stale_seconds):
            return False
        return not (directory / f"{tid}{RECORD_SUFFIX}").exists()
    lock = Path(directory) / f"{tid}{LOCK_SUFFIX}"
    fd = take_lock(lock, create=False)
    if fd is None and lock.exists():
        return False  # its writer is still at work
    try:
        return not (directory / f"{tid}{RECORD_SUFFIX}").exists()
    finally:
        if fd is not None:
            os.close(fd)


def _retire_record(data_dir: StorePath, record: StorePath) -> bool:
    """Delete a record none of whose files exists any more."""
    try:
        files = json.loads(record.read_text()).get("files", [])
    except FileNotFoundError:
        return False
    except (OSError, ValueError, AttributeError, StoreError):
        return False  # unreadable: keep it, its files stay visible
    if any((data_dir / f).exists() for f in files):
        return False
    record.unlink(missing_ok=True)
    return True


def _drop_lock(lock: StorePath, stale_seconds: float) -> bool:
    """Delete a lock no process holds (its commit finished or its writer died)."""
    if isinstance(lock, ObjectPath):
        if not _stale(lock, stale_seconds):
            return False
        lock.unlink(missing_ok=True)
        return True
    fd = take_lock(lock, create=False)
    if fd is None:
        return False
    try:
        lock.unlink(missing_ok=True)
    finally:
        os.close(fd)
    return True
