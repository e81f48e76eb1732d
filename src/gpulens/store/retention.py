"""Retention: delete whole day partitions older than N days (by partition date, UTC)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from gpulens.clock import Clock, SystemClock
from gpulens.errors import StoreError
from gpulens.model import Kind
from gpulens.store.compact import remove_stale_locks
from gpulens.store.frame_cache import FRAMES_DIR, cached_days
from gpulens.store.layout import (
    COMPACTED_PREFIX,
    NS_PER_DAY,
    LiveFiles,
    day_of,
    fsync_dir,
    partitions,
)
from gpulens.store.location import ObjectPath, StorePath, open_location

DELETING_PREFIX = ".deleting-"


def apply_retention(
    data_dir: StorePath, keep_days: int, *, clock: Clock | None = None
) -> list[StorePath]:
    """Delete partitions whose date is `keep_days` or more days before today; never today's.

    `keep_days=7` keeps today and the six days before it. Each partition is first renamed
    out of the readers' view (atomic), then removed; then the compaction locks of partitions
    that are gone are removed (those no other process holds). Returns the partitions deleted.
    In an object store (no rename) a day's files are deleted in an order that never shows a
    row twice: superseded files, then segments, then compacted files.
    """
    if keep_days < 1:
        raise StoreError(f"keep_days must be at least 1 (today is always kept), got {keep_days!r}")
    now = (clock or SystemClock()).now_ns()
    oldest_kept = day_of(now - (keep_days - 1) * NS_PER_DAY)
    data_dir = open_location(data_dir)
    removed: list[StorePath] = []
    if isinstance(data_dir, ObjectPath):
        for kind in Kind:
            for day, part in partitions(data_dir, kind):
                if day < oldest_kept:
                    _delete_objects(data_dir, part)
                    removed.append(part)
        return removed
    for kind in Kind:
        root = data_dir / kind.value
        for leftover in root.glob(f"{DELETING_PREFIX}*"):  # a crash during an earlier run
            shutil.rmtree(leftover, ignore_errors=True)
        for day, part in partitions(data_dir, kind):
            if day >= oldest_kept or not isinstance(part, Path):
                continue
            hidden = root / f"{DELETING_PREFIX}{part.name}-{uuid.uuid4().hex[:8]}"
            try:
                part.rename(hidden)
                fsync_dir(root)
                shutil.rmtree(hidden)
            except OSError as exc:
                raise StoreError(
                    f"cannot delete old partition {str(part)!r}: {exc}; check the permissions "
                    f"of the data directory"
                ) from exc
            removed.append(part)
        remove_stale_locks(data_dir, kind)
    _drop_frames(data_dir, oldest_kept)
    return removed


def _delete_objects(data_dir: StorePath, part: StorePath) -> None:
    """Delete an object-store partition: what readers already skip first, compacted files last
    (deleting a compacted file before its inputs would show their rows twice)."""
    try:
        live, superseded = LiveFiles(data_dir).partition(part)
        for f in [*superseded, *sorted(live, key=lambda f: f.name.startswith(COMPACTED_PREFIX))]:
            f.unlink(missing_ok=True)
        if isinstance(part, ObjectPath):
            part.delete_tree()  # what is left: uncommitted commit files, other objects
    except (OSError, StoreError) as exc:
        raise StoreError(
            f"cannot delete old partition {str(part)!r}: {exc}; check the credentials and "
            "permissions of the bucket (the next run deletes the rest)"
        ) from exc


def _drop_frames(data_dir: Path, oldest_kept: str) -> None:
    """Delete the frames cache of the days retention removed (same rename-then-remove)."""
    for step in (data_dir / FRAMES_DIR).glob("step=*"):
        for leftover in step.glob(f"{DELETING_PREFIX}*"):
            shutil.rmtree(leftover, ignore_errors=True)
        for day, part in cached_days(data_dir, int(step.name.removeprefix("step="))):
            if day >= oldest_kept:
                continue
            hidden = step / f"{DELETING_PREFIX}{part.name}-{uuid.uuid4().hex[:8]}"
            try:
                part.rename(hidden)
                shutil.rmtree(hidden)
            except OSError as exc:
                raise StoreError(
                    f"cannot delete old frames cache {str(part)!r}: {exc}; check the "
                    f"permissions of the data directory"
                ) from exc
