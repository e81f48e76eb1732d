"""Time, injected: production code asks a Clock, tests and simulations drive a FakeClock."""

from __future__ import annotations

import math
import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Wall time in UTC nanoseconds plus a way to wait until a moment."""

    def now_ns(self) -> int:
        """The current time, integer nanoseconds since the Unix epoch (UTC)."""
        ...

    def sleep_until(self, deadline_ns: int, stop: threading.Event | None = None) -> bool:
        """Wait until `deadline_ns`; returns False when `stop` was set first."""
        ...


class SystemClock:
    """The real clock."""

    def now_ns(self) -> int:
        return time.time_ns()

    def sleep_until(self, deadline_ns: int, stop: threading.Event | None = None) -> bool:
        delay = (deadline_ns - time.time_ns()) / 1e9
        if delay <= 0:
            return not (stop is not None and stop.is_set())
        if stop is None:
            time.sleep(delay)
            return True
        return not stop.wait(delay)


class FakeClock:
    """A clock that only moves when told to; `sleep_until` jumps straight to the deadline."""

    def __init__(self, start_ns: int = 1_764_000_000 * 1_000_000_000) -> None:
        self._now = start_ns

    def now_ns(self) -> int:
        return self._now

    def advance(self, ns: int) -> None:
        if ns < 0:
            raise ValueError(f"a clock cannot go back ({ns} ns)")
        self._now += ns

    def set(self, ns: int) -> None:
        self._now = ns

    def sleep_until(self, deadline_ns: int, stop: threading.Event | None = None) -> bool:
        if stop is not None and stop.is_set():
            return False
        self._now = max(self._now, deadline_ns)
        return True


class PacedClock:
    """Simulated time that only moves at tick deadlines, paced to `speed` × wall time.

    `now_ns()` is exact (collectors see the tick time, not a moment later); `sleep_until`
    jumps to the deadline and first waits, on the wall clock, until `speed` × the elapsed wall
    time has caught up with it. `speed=math.inf` never waits (as fast as the machine goes).
    """

    def __init__(self, start_ns: int, speed: float = math.inf) -> None:
        if not speed > 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self.speed = speed
        self._start = start_ns
        self._now = start_ns
        self._wall0 = time.monotonic_ns()

    def now_ns(self) -> int:
        return self._now

    def sleep_until(self, deadline_ns: int, stop: threading.Event | None = None) -> bool:
        if stop is not None and stop.is_set():
            return False
        if math.isfinite(self.speed):
            wall_due = self._wall0 + (deadline_ns - self._start) / self.speed
            delay = (wall_due - time.monotonic_ns()) / 1e9
            if delay > 0:
                if stop is None:
                    time.sleep(delay)
                elif stop.wait(delay):
                    return False
        self._now = max(self._now, deadline_ns)
        return True
