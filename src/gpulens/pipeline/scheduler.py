"""The tick loop: run every collector, isolate failures, derive rates, hand readings to a sink.

Ticks sit on a grid of `interval_s` aligned to the clock (a 1 s interval ticks on whole
seconds), and readings carry the tick's grid time, so hosts line up and nothing drifts. A tick
that overruns skips the grid points it missed instead of bunching up; so does a clock that
jumps forward (one tick at the new time, the points in between counted as missed). A clock that
jumps back by more than an interval moves the grid to the new time at once (counted in
`clock_jumps_back`), instead of waiting until the clock is back where it was; the rate stage
gives no rate across the step back (a non-increasing timestamp), never a negative one.

With `timeout_s`, each collector runs in its own daemon thread, so a slow source cannot delay
another's tick: one that overruns its timeout is reported as timed out and its late result is
discarded; while it is still running, later ticks skip it rather than pile up calls (one
thread per collector, ever). The threads are daemons, so a collector stuck in a call never
holds up the end of the process. Without `timeout_s` collectors run inline, in order (the fast
path used by simulations with a FakeClock). Either way one collector raising never stops the
others.
"""

from __future__ import annotations

import concurrent.futures as cf
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, is_dataclass
from functools import partial
from typing import Protocol

from gpulens.clock import Clock
from gpulens.collect.base import Collector, HasCallErrors, HasEndpoints
from gpulens.errors import ConfigError
from gpulens.model import Reading
from gpulens.pipeline.rates import RateStage
from gpulens.pipeline.selfstats import SelfStats
from gpulens.pipeline.sinkwatch import SinkWatch
from gpulens.pipeline.tick import CollectorOutcome as CollectorOutcome
from gpulens.pipeline.tick import TickResult as TickResult
from gpulens.units import s_to_ns

MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 60.0

_Done = tuple[list[Reading], float, "Exception | None"]  # readings, seconds, failure


class Sink(Protocol):
    """Where readings go (the store's SegmentWriter is one)."""

    def append(self, readings: list[Reading]) -> None: ...

    def flush_due(self, now_ns: int) -> bool: ...

    def flush(self) -> object:
        """Write what is buffered (the return value, e.g. files written, is ignored)."""
        ...


def validate_interval(interval_s: float) -> float:
    """The interval in seconds, or ConfigError saying what is allowed."""
    if not MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S:
        raise ConfigError(
            f"collection interval {interval_s!r} s is out of range: use {MIN_INTERVAL_S} to "
            f"{MAX_INTERVAL_S:g} seconds (1 s is the default and matches NVML's sample period)"
        )
    return float(interval_s)


class Scheduler:
    """Runs collectors every `interval_s` and feeds their readings (with rates) to `sink`.

    `warn`, when given, is told in one line when the sink starts failing, at most once a
    minute while it fails, and when it recovers (`sinkwatch.SinkWatch`)."""

    def __init__(
        self,
        collectors: Sequence[Collector],
        sink: Sink,
        clock: Clock,
        interval_s: float = 1.0,
        timeout_s: float | None = None,
        rates: RateStage | None = None,
        self_stats_host: str | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.interval_s = validate_interval(interval_s)
        if timeout_s is not None and not 0 < timeout_s <= self.interval_s:
            raise ConfigError(
                f"collector timeout {timeout_s!r} s must be > 0 and at most the interval "
                f"({self.interval_s:g} s); leave it unset to run collectors inline"
            )
        self.collectors = tuple(collectors)
        self.keys = _unique_keys([c.name for c in collectors])
        self.sink = sink
        self.clock = clock
        self.timeout_s = timeout_s
        self.rates = rates
        self.self_stats_host = self_stats_host
        self.stats = SelfStats(self.keys)
        self.watch = SinkWatch(warn) if warn is not None else None
        self._interval_ns = s_to_ns(self.interval_s)
        self.clock_jumps_back = 0
        self._workers: dict[str, _Worker] = {}
        self._running: dict[str, cf.Future[_Done]] = {}
        self._endpoints = {
            key: c
            for key, c in zip(self.keys, self.collectors, strict=True)
            if isinstance(c, HasEndpoints)
        }
        self._call_errors = {
            key: c
            for key, c in zip(self.keys, self.collectors, strict=True)
            if isinstance(c, HasCallErrors)
        }

    # -- one tick -------------------------------------------------------------------------------
    def tick(self, now_ns: int, lag_s: float = 0.0, missed_ticks: int = 0) -> TickResult:
        """Collect once at `now_ns`, append to the sink, flush when the sink says it is due."""
        if self.timeout_s is None:
            batches, outcomes = self._run_inline(now_ns)
        else:
            batches, outcomes = self._run_pooled(now_ns, self.timeout_s)
        readings = [r for batch in batches for r in batch]
        if self.rates is not None:
            readings = self.rates.process(readings)
        flushed, sink_error = False, None
        try:  # a failing store (disk full) is reported and retried, it does not stop the loop
            if readings:
                self.sink.append(readings)
            if self.sink.flush_due(now_ns):
                if self.self_stats_host is not None:  # one health snapshot per flush
                    self.sink.append(self.self_readings(self.self_stats_host, now_ns))
                self.sink.flush()
                flushed = True
        except Exception as exc:
            sink_error = f"{type(exc).__name__}: {exc}"
        result = TickResult(now_ns, lag_s, outcomes, readings, flushed, missed_ticks, sink_error)
        self.stats.record(result)
        if self.watch is not None:
            self.watch.update(now_ns, sink_error, self._sink_stats())
        for key, collector in self._endpoints.items():
            self.stats.record_endpoints(key, collector.endpoint_health())
        for key, counting in self._call_errors.items():
            self.stats.record_call_errors(key, counting.call_errors())
        return result

    def prime(self, now_ns: int) -> None:
        """Collect once at `now_ns` and discard the readings, keeping only the state they leave
        (GPM's previous sample, counters' first values): a run that starts here then gives
        exactly what an uninterrupted run would have given from its first tick."""
        if self.timeout_s is None:
            batches, _ = self._run_inline(now_ns)
        else:
            batches, _ = self._run_pooled(now_ns, self.timeout_s)
        if self.rates is not None:
            self.rates.process([r for batch in batches for r in batch])

    def _run_inline(self, now_ns: int) -> tuple[list[list[Reading]], dict[str, CollectorOutcome]]:
        batches: list[list[Reading]] = []
        outcomes: dict[str, CollectorOutcome] = {}
        for key, collector in zip(self.keys, self.collectors, strict=True):
            start = time.perf_counter()
            try:
                batch = list(collector.collect(now_ns))
            except Exception as exc:  # isolation: any collector failure is data, not a crash
                outcomes[key] = _failed(exc, time.perf_counter() - start)
                continue
            batches.append(batch)
            outcomes[key] = CollectorOutcome("ok", time.perf_counter() - start, len(batch))
        return batches, outcomes

    def _run_pooled(
        self, now_ns: int, timeout_s: float
    ) -> tuple[list[list[Reading]], dict[str, CollectorOutcome]]:
        outcomes: dict[str, CollectorOutcome] = {}
        submitted: dict[str, cf.Future[_Done]] = {}
        start = time.perf_counter()
        for key, collector in zip(self.keys, self.collectors, strict=True):
            if key in self._running:
                outcomes[key] = CollectorOutcome(
                    "skipped", error="still running from an earlier tick"
                )
                continue
            worker = self._workers.get(key)
            if worker is None:
                worker = self._workers[key] = _Worker(collector, f"gpulens-collect-{key}")
            submitted[key] = worker.submit(now_ns)
        cf.wait(submitted.values(), timeout=timeout_s)
        batches: list[list[Reading]] = []
        for name, future in submitted.items():
            if not future.done():
                self._running[name] = future
                future.add_done_callback(partial(self._finished, name))
                outcomes[name] = CollectorOutcome(
                    "timeout",
                    time.perf_counter() - start,
                    error=f"no result within {timeout_s:g} s; late result discarded",
                )
                continue
            batch, duration, exc = future.result()
            if exc is not None:
                outcomes[name] = _failed(exc, duration)
                continue
            batches.append(batch)
            outcomes[name] = CollectorOutcome("ok", duration, len(batch))
        return batches, outcomes

    def _finished(self, name: str, _future: cf.Future[_Done]) -> None:
        self._running.pop(name, None)

    # -- the loop -------------------------------------------------------------------------------
    def run(
        self,
        duration_s: float | None = None,
        stop: threading.Event | None = None,
        on_tick: Callable[[TickResult], None] | None = None,
    ) -> int:
        """Tick on the interval grid until `duration_s` of clock time passed or `stop` is set.

        Ticks are the grid points in [start, start + duration). Returns how many ran. The sink
        is flushed at the end, also when a collector or `on_tick` raised.
        """
        interval = self._interval_ns
        start = self.clock.now_ns()
        due = -(-start // interval) * interval  # first grid point at or after start
        end = None if duration_s is None else start + s_to_ns(duration_s)
        ticks = 0
        try:
            while end is None or due < end:
                if due - self.clock.now_ns() > interval:  # the clock went back: regrid on it
                    due = -(-self.clock.now_ns() // interval) * interval
                    self.clock_jumps_back += 1
                if not self.clock.sleep_until(due, stop):
                    break
                now = self.clock.now_ns()
                if due - now > interval:
                    continue  # it went back while we slept: regrid at the top
                missed = max(0, (now - due) // interval)
                if missed:  # overran: jump to the latest grid point, count the rest as missed
                    due += missed * interval
                    if end is not None and due >= end:
                        break
                result = self.tick(due, lag_s=(now - due) / 1e9, missed_ticks=missed)
                ticks += 1
                if on_tick is not None:
                    on_tick(result)
                due += interval
                if stop is not None and stop.is_set():
                    break
        finally:
            self.sink.flush()
        return ticks

    def self_readings(self, host: str, ts: int | None = None) -> list[Reading]:
        """SelfStats as HOST readings at `ts` (default: the last tick), plus the sink's
        `stats()` if it has one."""
        store = self._sink_stats()
        if ts is None:
            last = self.stats.last_tick_ns
            ts = last if last is not None else self.clock.now_ns()
        return self.stats.readings(ts, host, store)

    def _sink_stats(self) -> dict[str, float]:
        """The sink's `stats()` as numbers by name (empty when it has none)."""
        stats = getattr(self.sink, "stats", None)
        if not callable(stats):
            return {}
        raw = stats()
        items = asdict(raw) if is_dataclass(raw) and not isinstance(raw, type) else raw
        if not isinstance(items, dict):
            return {}
        return {k: float(v) for k, v in items.items() if isinstance(v, int | float)}

    def close(self) -> None:
        """Let the worker threads end (one stuck in a collector ends with the process;
        collectors are closed by whoever made them)."""
        for worker in self._workers.values():
            worker.stop()
        self._workers = {}

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Worker:
    """One daemon thread that runs one collector's calls, one at a time."""

    def __init__(self, collector: Collector, name: str) -> None:
        self._collector = collector
        self._jobs: queue.SimpleQueue[tuple[int, cf.Future[_Done]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, now_ns: int) -> cf.Future[_Done]:
        future: cf.Future[_Done] = cf.Future()
        self._jobs.put((now_ns, future))
        return future

    def stop(self) -> None:
        self._jobs.put(None)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            now_ns, future = job
            if future.set_running_or_notify_cancel():
                future.set_result(_collect_timed(self._collector, now_ns))


def _collect_timed(collector: Collector, now_ns: int) -> _Done:
    """Runs in a worker thread; failures come back as data, with how long the call took."""
    start = time.perf_counter()
    try:
        return list(collector.collect(now_ns)), time.perf_counter() - start, None
    except Exception as exc:
        return [], time.perf_counter() - start, exc


def _failed(exc: BaseException, duration_s: float) -> CollectorOutcome:
    return CollectorOutcome("error", duration_s, 0, f"{type(exc).__name__}: {exc}")


def _unique_keys(names: list[str]) -> tuple[str, ...]:
    """Collector names as stats keys; a repeated name gets `#2`, `#3`... in order."""
    seen: dict[str, int] = {}
    keys = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        keys.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return tuple(keys)
