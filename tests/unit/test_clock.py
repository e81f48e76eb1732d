from __future__ import annotations

import math
import threading
import time

import pytest

from gpulens.clock import FakeClock, PacedClock, SystemClock


def test_fake_clock_only_moves_when_told() -> None:
    c = FakeClock(start_ns=100)
    assert c.now_ns() == 100
    c.advance(50)
    assert c.now_ns() == 150
    assert c.sleep_until(1_000)
    assert c.now_ns() == 1_000
    assert c.sleep_until(10)  # a deadline in the past does not move time back
    assert c.now_ns() == 1_000
    with pytest.raises(ValueError):
        c.advance(-1)


def test_fake_clock_sleep_honours_stop() -> None:
    stop = threading.Event()
    stop.set()
    c = FakeClock(start_ns=0)
    assert c.sleep_until(10, stop) is False
    assert c.now_ns() == 0


def test_system_clock_is_utc_epoch_ns() -> None:
    now = SystemClock().now_ns()
    assert abs(now - time.time_ns()) < 1_000_000_000


def test_paced_clock_runs_at_speed_and_jumps_exactly() -> None:
    c = PacedClock(start_ns=0, speed=100.0)
    t0 = time.monotonic()
    assert c.sleep_until(2_000_000_000)  # 2 simulated seconds at 100× ≈ 20 ms of wall time
    elapsed = time.monotonic() - t0
    assert c.now_ns() == 2_000_000_000
    assert 0.015 <= elapsed < 1.0
    fast = PacedClock(start_ns=0, speed=math.inf)
    t0 = time.monotonic()
    assert fast.sleep_until(86_400 * 1_000_000_000)
    assert time.monotonic() - t0 < 0.05
    with pytest.raises(ValueError):
        PacedClock(start_ns=0, speed=0)


def test_paced_clock_stops_when_asked() -> None:
    stop = threading.Event()
    stop.set()
    c = PacedClock(start_ns=5, speed=1.0)
    assert c.sleep_until(10_000_000_000, stop) is False
    assert c.now_ns() == 5
