from __future__ import annotations

import threading
import time

import pytest

from gpulens.clock import FakeClock, ScaledClock, SystemClock


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


def test_scaled_clock_runs_faster_than_wall_time() -> None:
    c = ScaledClock(speed=1000.0, start_ns=0)
    time.sleep(0.02)
    assert c.now_ns() >= 10 * 1_000_000_000  # ≥ 20 ms × 1000 minus scheduling slack
    with pytest.raises(ValueError):
        ScaledClock(speed=0)
