"""Saying that the store fails while it fails: at once, then at most once a minute, then when
it recovers.

`SinkWatch.update(now_ns, error, stats)` is called after every tick with the sink's error of
that tick (None when it appended and flushed fine) and its stats (WriterStats fields:
`buffered_rows`, `max_buffered_rows`, `dropped_rows`, `flush_errors`). It hands one-line
messages to `warn`; the clock is the ticks', so simulated time behaves like real time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

NS = 1_000_000_000
#: the shortest time between two messages about the same ongoing failure
REPEAT_S = 60.0


class SinkWatch:
    """Turns the sink's per-tick errors into a few messages (see the module doc)."""

    def __init__(self, warn: Callable[[str], None], repeat_s: float = REPEAT_S) -> None:
        self.warn = warn
        self.repeat_ns = round(repeat_s * NS)
        self._since_ns: int | None = None  # when the current failure began
        self._said_ns = 0
        self._failures = 0

    @property
    def failing(self) -> bool:
        return self._since_ns is not None

    def update(self, now_ns: int, error: str | None, stats: Mapping[str, float]) -> None:
        """Fold in one tick: `error` is the sink's failure on it, or None."""
        buffered = int(stats.get("buffered_rows", 0))
        dropped = int(stats.get("dropped_rows", 0))
        if error is None:
            if self._since_ns is not None and buffered == 0:
                seconds = (now_ns - self._since_ns) / NS
                self.warn(
                    f"the store takes writes again after {seconds:.0f} s of failed flushes: "
                    f"the buffered readings are written ({dropped:,} dropped in all)"
                )
                self._since_ns = None
            return
        self._failures += 1
        cap = int(stats.get("max_buffered_rows", 0))
        held = f"{buffered:,} readings buffered in memory"
        if cap:
            held += f" (at most {cap:,}: store.max_buffered_rows)"
        if self._since_ns is None:
            self._since_ns = self._said_ns = now_ns
            self._failures = 1
            self.warn(f"warning: {error}; {held}")
        elif now_ns - self._said_ns >= self.repeat_ns:
            self._said_ns = now_ns
            seconds = (now_ns - self._since_ns) / NS
            self.warn(
                f"warning: the store has failed for {seconds:.0f} s ({self._failures} failed "
                f"flushes): {error}; {held}, {dropped:,} dropped so far"
            )
