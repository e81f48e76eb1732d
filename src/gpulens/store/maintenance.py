"""Keeping a live store tidy: retention of old days, then compaction of small segments."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from gpulens.clock import Clock, SystemClock
from gpulens.errors import GpulensError
from gpulens.store.compact import CompactionResult, compact
from gpulens.store.frames import materialize_closed_days
from gpulens.store.location import ObjectPath, StorePath, open_location
from gpulens.store.retention import apply_retention

#: writes the frames cache of the closed days that need it: (days written, days that failed)
Materialize = Callable[[StorePath, Clock], tuple[int, int]]
#: runs the merges `compact(defer_large=True)` left: a closed day's, today's first-level files'
CompactLarge = Callable[[StorePath, Clock], CompactionResult]

#: on object storage an agent's maintenance compacts today's and yesterday's partitions only
RECENT_DAYS = 2


@dataclass(slots=True)
class MaintenanceResult:
    """What one maintenance pass did."""

    compaction: CompactionResult
    partitions_deleted: int
    frames_materialized: int = 0  # closed days whose frames cache was (re)written
    frames_failed: int = 0  # closed days whose frames cache could not be written


def maintain(
    data_dir: StorePath,
    *,
    keep_days: int,
    compact_min_age_seconds: float,
    clock: Clock | None = None,
    materialize_frames: bool = True,
    host: str | None = None,
    materialize: Materialize | None = None,
    compact_large: CompactLarge | None = None,
) -> MaintenanceResult:
    """Delete days past retention, then merge segments older than `compact_min_age_seconds`
    (in that order, so days about to go are not merged first), then write the frames cache of
    every closed day that has none or a stale one (after compaction, which changes the files
    a cache is checked against). In an object store, compaction merges only `host`'s files
    when it is given (each agent compacts its own; `compact`). `materialize`: how the frames
    cache is written (default: `materialize_closed_days`, in this process). `compact_large`:
    how the large merges are run, only when one is due (default: in this process, with the
    small ones)."""
    clock = clock or SystemClock()
    deleted = apply_retention(data_dir, keep_days, clock=clock)
    remote = isinstance(open_location(data_dir), ObjectPath)
    result = compact(
        data_dir,
        host=host,
        clock=clock,
        min_age_seconds=compact_min_age_seconds,
        last_days=RECENT_DAYS if remote and host is not None else None,
        defer_large=compact_large is not None,
    )
    if result.deferred and compact_large is not None:
        result.add(compact_large(data_dir, clock))
    written = failed = 0
    if materialize_frames:
        if materialize is not None:
            written, failed = materialize(data_dir, clock)
        else:
            written, failed = materialize_closed_days(data_dir, clock=clock)
    return MaintenanceResult(result, len(deleted), written, failed)


class MaintenanceThread(threading.Thread):
    """Runs `maintain` every `every_seconds` of wall time until stopped.

    A failing pass (disk full, a file removed underneath) is counted and retried next time; it
    never stops the recording that owns the thread.
    """

    def __init__(
        self,
        data_dir: StorePath,
        *,
        every_seconds: float,
        keep_days: int,
        compact_min_age_seconds: float,
        host: str | None = None,
        materialize: Materialize | None = None,
        compact_large: CompactLarge | None = None,
        after_pass: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="gpulens-store-maintenance", daemon=True)
        self.materialize = materialize
        self.compact_large = compact_large
        self.after_pass = after_pass  # e.g. hand the pass's freed memory back
        self.data_dir = data_dir
        self.every_seconds = every_seconds
        self.keep_days = keep_days
        self.compact_min_age_seconds = compact_min_age_seconds
        self.host = host
        self.passes = 0
        self.errors = 0
        self.last_error: str | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.every_seconds):
            self.run_once()

    def run_once(self) -> None:
        """One pass now, errors counted rather than raised."""
        try:
            maintain(
                self.data_dir,
                keep_days=self.keep_days,
                compact_min_age_seconds=self.compact_min_age_seconds,
                host=self.host,
                materialize=self.materialize,
                compact_large=self.compact_large,
            )
            self.passes += 1
        except (GpulensError, OSError) as exc:
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
        finally:
            if self.after_pass is not None:
                self.after_pass()

    def stop(self) -> None:
        self._stop_event.set()
