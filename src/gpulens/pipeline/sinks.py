"""Sinks besides the store: `DiscardSink` for live views that keep nothing (`gpulens top`)."""

from __future__ import annotations

from gpulens.model import Reading


class DiscardSink:
    """A scheduler sink that keeps nothing and never flushes."""

    def append(self, readings: list[Reading]) -> None:
        pass

    def flush_due(self, now_ns: int) -> bool:
        return False

    def flush(self) -> None:
        pass
