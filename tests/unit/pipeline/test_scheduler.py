"""Scheduler: error isolation, timeouts, drift-free grid, flushing, interval validation."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable

import pytest

from gpulens.clock import FakeClock, SystemClock
from gpulens.errors import ConfigError
from gpulens.model import Kind, Reading
from gpulens.pipeline.rates import RateStage
from gpulens.pipeline.scheduler import Scheduler, TickResult, validate_interval

S = 10**9
T0 = 1_764_000_000 * S


class ListSink:
    """Keeps what it is given; flush is due every `every` appended readings (0 = never)."""

    def __init__(self, every: int = 0) -> None:
        self.readings: list[Reading] = []
        self.pending = 0
        self.every = every
        self.flushes = 0

    def append(self, readings: list[Reading]) -> None:
        self.readings.extend(readings)
        self.pending += len(readings)

    def flush_due(self, now_ns: int) -> bool:
        return self.every > 0 and self.pending >= self.every

    def flush(self) -> None:
        self.flushes += 1
        self.pending = 0


class Counting:
    """Emits one GPU reading per tick with an energy counter growing 100 J per call."""

    def __init__(self, name: str = "good") -> None:
        self.name = name
        self.calls = 0
        self.closed = False

    def collect(self, now_ns: int) -> Iterable[Reading]:
        self.calls += 1
        return [Reading(Kind.GPU, now_ns, {"gpu_uuid": "g"}, {"energy_joules": 100.0 * self.calls})]

    def close(self) -> None:
        self.closed = True


class Raising:
    name = "bad"

    def __init__(self) -> None:
        self.calls = 0

    def collect(self, now_ns: int) -> Iterable[Reading]:
        self.calls += 1
        raise RuntimeError("device on fire")

    def close(self) -> None:
        pass


class Sleepy:
    """Sleeps `seconds` on every collect, then returns one reading."""

    name = "slow"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = 0
        self.release = threading.Event()

    def collect(self, now_ns: int) -> Iterable[Reading]:
        self.started += 1
        self.release.wait(self.seconds)
        return [Reading(Kind.HOST, now_ns, {"host": "h"}, {"host_load1": 1.0})]

    def close(self) -> None:
        self.release.set()


def test_one_raising_collector_does_not_stop_the_others() -> None:
    good, bad, sink = Counting(), Raising(), ListSink()
    sched = Scheduler([bad, good], sink, FakeClock(T0))
    results: list[TickResult] = []
    assert sched.run(duration_s=10, on_tick=results.append) == 10
    assert good.calls == 10 and bad.calls == 10
    assert len(sink.readings) == 10
    assert results[-1].outcomes["bad"].status == "error"
    assert "device on fire" in (results[-1].outcomes["bad"].error or "")
    assert results[-1].outcomes["good"].status == "ok"
    assert sched.stats.collectors["bad"].errors_total == 10
    assert sched.stats.collectors["good"].errors_total == 0
    assert sched.stats.collectors["good"].readings_total == 10


def test_pooled_errors_are_isolated_too() -> None:
    good, bad, sink = Counting(), Raising(), ListSink()
    with Scheduler([bad, good], sink, FakeClock(T0), timeout_s=0.5) as sched:
        sched.run(duration_s=3)
    assert len(sink.readings) == 3
    assert sched.stats.collectors["bad"].errors_total == 3


def test_timeout_does_not_block_the_tick_and_is_counted() -> None:
    slow, good, sink = Sleepy(5.0), Counting(), ListSink()
    with Scheduler([slow, good], sink, FakeClock(T0), timeout_s=0.1) as sched:
        start = time.perf_counter()
        first = sched.tick(T0)
        second = sched.tick(T0 + S)
        elapsed = time.perf_counter() - start
        assert elapsed < 1.0  # neither tick waited the 5 s
        assert first.outcomes["slow"].status == "timeout"
        assert first.outcomes["good"].status == "ok"
        assert second.outcomes["slow"].status == "skipped"  # still running: not piled up
        assert slow.started == 1
        assert len(sink.readings) == 2  # the good collector's; the late result is discarded
        assert sched.stats.collectors["slow"].timeouts_total == 1
        assert sched.stats.collectors["slow"].skipped_total == 1
        slow.release.set()  # let the straggler finish; the collector is run again next tick
        deadline = time.perf_counter() + 2
        while "slow" in sched._running and time.perf_counter() < deadline:
            time.sleep(0.01)
        third = sched.tick(T0 + 2 * S)
        assert third.outcomes["slow"].status == "ok"
        assert slow.started == 2
        assert not any(r.ts == T0 and r.kind is Kind.HOST for r in sink.readings)


def test_no_drift_over_many_ticks_with_fake_clock() -> None:
    clock, sink = FakeClock(T0 + 250_000_000), ListSink()  # start off the grid
    sched = Scheduler([Counting()], sink, clock, interval_s=0.5)
    assert sched.run(duration_s=3600) == 7200
    stamps = [r.ts for r in sink.readings]
    assert stamps[0] == T0 + S // 2  # aligned to the 0.5 s grid
    assert all(b - a == S // 2 for a, b in itertools.pairwise(stamps))
    assert all(ts % (S // 2) == 0 for ts in stamps)
    assert sched.stats.ticks_missed_total == 0


def test_real_clock_ticks_stay_on_the_grid() -> None:
    sink = ListSink()
    sched = Scheduler([Counting()], sink, SystemClock(), interval_s=0.1)
    sched.run(duration_s=0.45)
    stamps = [r.ts for r in sink.readings]
    assert 3 <= len(stamps) <= 5
    assert all(ts % (S // 10) == 0 for ts in stamps)
    assert sched.stats.last_lag_s < 0.1


def test_overrun_skips_missed_grid_points() -> None:
    clock, sink = FakeClock(T0), ListSink()

    class Jumpy(Counting):
        def collect(self, now_ns: int) -> Iterable[Reading]:
            if self.calls == 2:
                clock.advance(3 * S + S // 2)  # this tick took 3.5 intervals
            return super().collect(now_ns)

    sched = Scheduler([Jumpy()], sink, clock)
    results: list[TickResult] = []
    sched.run(duration_s=10, on_tick=results.append)
    stamps = [r.ts - T0 for r in sink.readings]
    assert stamps == [0, S, 2 * S, 5 * S, 6 * S, 7 * S, 8 * S, 9 * S]
    assert results[3].missed_ticks == 2
    assert results[3].lag_s == pytest.approx(0.5)
    assert sched.stats.ticks_missed_total == 2


def test_flush_when_due_and_at_end() -> None:
    sink = ListSink(every=3)
    results: list[TickResult] = []
    Scheduler([Counting()], sink, FakeClock(T0)).run(duration_s=7, on_tick=results.append)
    assert [r.flushed for r in results] == [False, False, True, False, False, True, False]
    assert sink.flushes == 3  # two when due, one at the end
    assert sink.pending == 0


def test_flush_at_end_even_when_on_tick_raises() -> None:
    sink = ListSink()

    def boom(_: TickResult) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Scheduler([Counting()], sink, FakeClock(T0)).run(duration_s=5, on_tick=boom)
    assert sink.flushes == 1


def test_stop_event_ends_the_loop() -> None:
    stop, sink = threading.Event(), ListSink()

    def stop_after_three(result: TickResult) -> None:
        if len(sink.readings) == 3:
            stop.set()

    ticks = Scheduler([Counting()], sink, FakeClock(T0)).run(stop=stop, on_tick=stop_after_three)
    assert ticks == 3
    assert sink.flushes == 1


def test_rate_stage_runs_between_collectors_and_sink() -> None:
    sink = ListSink()
    Scheduler([Counting()], sink, FakeClock(T0), rates=RateStage()).run(duration_s=3)
    assert "energy_watts" not in sink.readings[0].values
    assert [r.values["energy_watts"] for r in sink.readings[1:]] == [100.0, 100.0]


@pytest.mark.parametrize("bad", [0.0, 0.05, 60.5, -1.0])
def test_interval_validation(bad: float) -> None:
    with pytest.raises(ConfigError, match=r"0\.1 to 60 seconds") as err:
        Scheduler([], ListSink(), FakeClock(), interval_s=bad)
    assert repr(bad) in str(err.value)


def test_interval_bounds_are_inclusive() -> None:
    assert validate_interval(0.1) == 0.1
    assert validate_interval(60) == 60.0


@pytest.mark.parametrize("bad", [0.0, -1.0, 2.0])
def test_timeout_validation(bad: float) -> None:
    with pytest.raises(ConfigError, match="timeout"):
        Scheduler([], ListSink(), FakeClock(), interval_s=1.0, timeout_s=bad)


def test_repeated_collector_names_get_distinct_stats_keys() -> None:
    sched = Scheduler([Counting("x"), Raising(), Counting("x")], ListSink(), FakeClock(T0))
    assert sched.keys == ("x", "bad", "x#2")
    result = sched.tick(T0)
    assert set(result.outcomes) == {"x", "bad", "x#2"}
    assert sched.stats.collectors["x#2"].readings_total == 1


class FailingSink(ListSink):
    """A store whose disk is full for the first `failures` flushes."""

    def __init__(self, failures: int) -> None:
        super().__init__(every=1)
        self.failures = failures

    def flush(self) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("No space left on device")
        super().flush()


def test_sink_failure_is_reported_and_the_loop_goes_on() -> None:
    sink = FailingSink(failures=2)
    results: list[TickResult] = []
    sched = Scheduler([Counting()], sink, FakeClock(T0))
    assert sched.run(duration_s=4, on_tick=results.append) == 4
    assert [r.sink_error is not None for r in results] == [True, True, False, False]
    assert "No space left" in (results[0].sink_error or "")
    assert sched.stats.sink_errors_total == 2
    assert len(sink.readings) == 4


def test_self_readings_include_sink_stats() -> None:
    from dataclasses import dataclass

    @dataclass
    class Stats:
        rows_written: int = 12
        last_flush_seconds: float = 0.5

    class StatSink(ListSink):
        def stats(self) -> Stats:
            return Stats()

    sched = Scheduler([Counting("nvml")], StatSink(), FakeClock(T0))
    sched.tick(T0)
    agent, nvml = sched.self_readings("node1")
    assert agent.ts == T0
    assert agent.values["gpulens_store_rows_written_total"] == 12.0
    assert agent.values["gpulens_ticks_total"] == 1.0
    assert nvml.labels["collector"] == "nvml"


class Stuck:
    """Never returns until released (a source hung in a call)."""

    name = "stuck"

    def __init__(self) -> None:
        self.started = 0
        self.release = threading.Event()

    def collect(self, now_ns: int) -> Iterable[Reading]:
        self.started += 1
        self.release.wait()
        return []

    def close(self) -> None:
        self.release.set()


def test_a_stuck_collector_delays_no_other_tick_and_holds_one_thread() -> None:
    stuck, good, sink = Stuck(), Counting(), ListSink()
    sched = Scheduler([stuck, good], sink, SystemClock(), interval_s=0.1, timeout_s=0.05)
    results: list[TickResult] = []
    try:
        sched.run(duration_s=2.0, on_tick=results.append)
        threads = [t for t in threading.enumerate() if t.name.startswith("gpulens-collect-")]
    finally:
        sched.close()
        stuck.release.set()
    assert len(results) >= 10  # of 20 grid points (a busy machine may miss a few)
    assert all(r.outcomes["good"].status == "ok" for r in results)
    assert [r.outcomes["stuck"].status for r in results[:2]] == ["timeout", "skipped"]
    assert stuck.started == 1  # skipped while it runs: calls do not pile up
    assert sorted(t.name for t in threads) == ["gpulens-collect-good", "gpulens-collect-stuck"]
    assert all(t.daemon for t in threads)


def test_a_stuck_collector_does_not_hold_up_the_process_exit() -> None:
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import threading
        from gpulens.clock import SystemClock
        from gpulens.pipeline.scheduler import Scheduler
        from gpulens.pipeline.sinks import DiscardSink

        class Stuck:
            name = "stuck"
            def collect(self, now_ns):
                threading.Event().wait()
            def close(self):
                pass

        sched = Scheduler([Stuck()], DiscardSink(), SystemClock(), interval_s=0.1, timeout_s=0.05)
        sched.tick(SystemClock().now_ns())
        sched.close()
        print("done", flush=True)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr


def test_endpoint_health_is_recorded_each_tick() -> None:
    from gpulens.collect.base import EndpointHealth

    class TwoEndpoints(Counting):
        def endpoint_health(self) -> list[EndpointHealth]:
            return [
                EndpointHealth("http://a/metrics", True, 0, T0, None),
                EndpointHealth("http://b/metrics", False, self.calls, None, "refused"),
            ]

    sched = Scheduler([TwoEndpoints("dcgm")], ListSink(), FakeClock(T0))
    sched.run(duration_s=3)
    a, b = sched.stats.collectors["dcgm"].endpoints
    assert (a.up, b.up, b.errors_total, b.last_error) == (True, False, 3, "refused")


def test_a_failing_sink_is_said_at_once_through_warn() -> None:
    class FullDisk(ListSink):
        def flush(self) -> None:
            raise OSError(28, "No space left on device")

    said: list[str] = []
    sched = Scheduler([Counting()], FullDisk(every=1), FakeClock(T0), warn=said.append)
    results: list[TickResult] = []
    sched.tick(T0)
    results.append(sched.tick(T0 + S))
    assert len(said) == 1 and "No space left on device" in said[0]
    assert results[0].sink_error is not None


class JumpClock(FakeClock):
    """A FakeClock that jumps by `jumps[n]` ns while the scheduler sleeps before tick n, and
    records every sleep's length (what a wall clock would wait)."""

    def __init__(self, jumps: dict[int, int]) -> None:
        super().__init__(T0)
        self.jumps = jumps
        self.sleeps: list[int] = []
        self.n = 0

    def sleep_until(self, deadline_ns: int, stop: threading.Event | None = None) -> bool:
        self.sleeps.append(max(0, deadline_ns - self.now_ns()))
        jump = self.jumps.pop(self.n, 0)
        self.n += 1
        if jump:  # the jump happens mid-sleep: the sleep ends with the clock moved
            self.set(max(self.now_ns(), deadline_ns) + jump)
            return True
        return super().sleep_until(deadline_ns, stop)


def test_a_clock_jumping_forward_gives_one_tick_not_a_flood() -> None:
    clock, sink = JumpClock({3: 3600 * S}), ListSink()
    sched = Scheduler([Counting()], sink, clock, rates=RateStage())
    results: list[TickResult] = []
    sched.run(duration_s=3610, on_tick=results.append)
    stamps = [r.ts - T0 for r in sink.readings]
    assert stamps[:3] == [0, S, 2 * S]
    assert stamps[3] == 3603 * S and results[3].missed_ticks == 3600  # one tick at the new time
    assert len(stamps) == 3 + 7  # then on the grid to the end: 3603 .. 3609
    assert all(b > a for a, b in itertools.pairwise(stamps))


def test_a_clock_jumping_back_keeps_ticking_without_negative_intervals() -> None:
    clock, sink = JumpClock({3: -3600 * S}), ListSink()
    sched = Scheduler([Counting()], sink, clock, rates=RateStage())
    stop = threading.Event()
    results: list[TickResult] = []

    def on_tick(result: TickResult) -> None:
        results.append(result)
        if len(results) == 10:
            stop.set()

    sched.run(stop=stop, on_tick=on_tick)
    assert len(results) == 10
    assert max(clock.sleeps) <= S  # never waited for the clock to come back
    assert sched.clock_jumps_back == 1
    stamps = [r.ts - T0 for r in sink.readings]
    assert stamps[:3] == [0, S, 2 * S]
    after = stamps[3:]
    assert after[0] < 0 and all(b - a == S for a, b in itertools.pairwise(after))
    rates = [r.values.get("energy_watts") for r in sink.readings]
    assert rates[3] is None  # no rate across the step back
    assert all(v is None or v >= 0 for v in rates)
