"""Time, injected: production code asks a Clock, tests and simulations drive a FakeClock."""

from __future__ import annotations

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


class ScaledClock:
    """Simulated time running `speed` times faster than wall time, from `start_ns`."""

    def __init__(self, speed: float, start_ns: int | None = None) -> None:
        if speed <= 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self.speed = speed
        self._wall0 = time.monotonic_ns()
        self._sim0 = time.time_ns() if start_ns is None else start_ns

    def now_ns(self) -> int:
        return self._sim0 + int((time.monotonic_ns() - self._wall0) * self.speed)

    def sleep_until(self, deadline_ns: int, stop: threading.Event | None = None) -> bool:
        delay = (deadline_ns - self.now_ns()) / self.speed / 1e9
        if delay <= 0:
            return not (stop is not None and stop.is_set())
        if stop is None:
            time.sleep(delay)
            return True
        return not stop.wait(delay)
