"""The data behind `gpulens top`: collectors → scheduler (with rates) → `LiveState`.

Nothing is stored: the scheduler's sink discards readings. The tick loop runs in a daemon
thread; a failing collector is reported by the scheduler's health stats, and anything else
that goes wrong in the loop becomes a note for the status line instead of an exception.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from gpulens.analyze.efficiency import Thresholds
from gpulens.app.live import LiveSnapshot, LiveState
from gpulens.clock import Clock
from gpulens.collect.base import Collector
from gpulens.pipeline.rates import RateStage
from gpulens.pipeline.scheduler import Scheduler, TickResult
from gpulens.pipeline.sinks import DiscardSink


class TopFeed:
    """Runs `collectors` every `interval_s` into a `LiveState` and classifies every
    `refresh_every` ticks (the first tick included). `step(now)` does one tick in the calling
    thread (tests and benchmarks); `start()` runs the loop in a thread until `close()`."""

    def __init__(
        self,
        collectors: Sequence[Collector],
        clock: Clock,
        *,
        interval_s: float = 1.0,
        timeout_s: float | None = None,
        state_window_s: float = 60.0,
        refresh_every: int | None = None,
        states: Thresholds | None = None,
    ) -> None:
        self.collectors = list(collectors)
        self.clock = clock
        self.live = LiveState(state_window_s, max(300.0, 3 * state_window_s), states=states)
        self.scheduler = Scheduler(
            self.collectors,
            DiscardSink(),
            clock,
            interval_s=interval_s,
            timeout_s=timeout_s,
            rates=RateStage(),
        )
        self.live.watch(self.scheduler.stats)
        self.refresh_every = refresh_every or max(1, round(5.0 / self.scheduler.interval_s))
        self.ticks = 0
        self._notes: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- feeding -------------------------------------------------------------------------------
    def on_tick(self, tick: TickResult) -> None:
        """Take one tick; refresh the states when due. Never raises."""
        self.ticks += 1
        try:
            self.live.on_tick(tick)
            if (self.ticks - 1) % self.refresh_every == 0:
                self.refresh()
        except Exception as exc:
            self._note("live state", exc)

    def refresh(self) -> None:
        """Classify the state window now; a failure becomes a note, and clears when it passes."""
        try:
            self.live.refresh()
        except Exception as exc:
            self._note("states", exc)
        else:
            self._clear("states")

    def step(self, now_ns: int) -> TickResult:
        """One tick at `now_ns`, in this thread."""
        tick = self.scheduler.tick(now_ns)
        self.on_tick(tick)
        return tick

    def start(self) -> None:
        """Tick on the interval grid in a daemon thread until `close()`."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gpulens-top", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.scheduler.run(stop=self._stop, on_tick=self.on_tick)
        except Exception as exc:
            self._note("collection stopped", exc)

    # -- reading -------------------------------------------------------------------------------
    def snapshot(self) -> LiveSnapshot:
        return self.live.snapshot()

    def notes(self) -> list[str]:
        """What went wrong outside the collectors, one line each."""
        with self._lock:
            return list(self._notes.values())

    def _note(self, what: str, exc: BaseException) -> None:
        with self._lock:
            self._notes[what] = f"{what}: {type(exc).__name__}: {exc}"

    def _clear(self, what: str) -> None:
        with self._lock:
            self._notes.pop(what, None)

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop the loop, then release the scheduler, the collectors and the live state; a
        collector that fails to close is ignored (it is being dropped anyway)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.scheduler.close()
        for collector in self.collectors:
            try:
                collector.close()
            except Exception as exc:
                self._note(f"closing {collector.name}", exc)
        self.live.close()
