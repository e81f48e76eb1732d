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
from gpulens.store.layout import NS_PER_DAY, day_of, fsync_dir, partitions

DELETING_PREFIX = ".deleting-"


def apply_retention(data_dir: Path, keep_days: int, *, clock: Clock | None = None) -> list[Path]:
    """Delete partitions whose date is `keep_days` or more days before today; never today's.

    `keep_days=7` keeps today and the six days before it. Each partition is first renamed
    out of the readers' view (atomic), then removed; then the compaction locks of partitions
    that are gone are removed (those no other process holds). Returns the partitions deleted.
    """
    if keep_days < 1:
        raise StoreError(f"keep_days must be at least 1 (today is always kept), got {keep_days!r}")
    now = (clock or SystemClock()).now_ns()
    oldest_kept = day_of(now - (keep_days - 1) * NS_PER_DAY)
    removed: list[Path] = []
    for kind in Kind:
        root = Path(data_dir) / kind.value
        for leftover in root.glob(f"{DELETING_PREFIX}*"):  # a crash during an earlier run
            shutil.rmtree(leftover, ignore_errors=True)
        for day, part in partitions(Path(data_dir), kind):
            if day >= oldest_kept:
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
        remove_stale_locks(Path(data_dir), kind)
    _drop_frames(Path(data_dir), oldest_kept)
    return removed


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
