"""One analysis per window however many viewers refresh: single flight, stale while
revalidate, the previous live window while the next is analysed, one page build per analysis."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gpulens.app.agent import AgentContext
from gpulens.present.dashboard import service
from gpulens.present.dashboard.service import Dashboard
from gpulens.present.dashboard.window import Window

NS = 1_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingAnalyse:
    """The real analysis, counted per window, held at a gate when the test closes it."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self._real = service._analyse
        self._lock = threading.Lock()

    def __call__(self, store: Any, *, window: Window, settings: Any) -> Any:
        with self._lock:
            self.calls.append((window.start_ns, window.end_ns, window.step_s))
        self.entered.set()
        assert self.gate.wait(30)
        return self._real(store, window=window, settings=settings)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> CountingAnalyse:
    counter = CountingAnalyse()
    monkeypatch.setattr(service, "_analyse", counter)
    return counter


@pytest.fixture
def dash(store_dir: Path) -> Dashboard:
    return Dashboard(AgentContext(data_dir=store_dir, live=None), ttl_s=10.0, clock=Clock())


def _next(window: Window) -> Window:
    step = window.step_s * NS
    return Window(window.start_ns + step, window.end_ns + step, window.step_s, window.range)


def test_sixteen_concurrent_viewers_cost_one_analysis(
    dash: Dashboard, counting: CountingAnalyse
) -> None:
    window = dash.window("1h")
    counting.gate.clear()
    pages: list[Any] = []
    viewers = [threading.Thread(target=lambda: pages.append(dash.fleet(window))) for _ in range(16)]
    for v in viewers:
        v.start()
    assert counting.entered.wait(30)
    counting.gate.set()
    for v in viewers:
        v.join(60)
    assert len(counting.calls) == 1
    assert len(pages) == 16 and all(p is pages[0] for p in pages)  # one page build too


def test_a_stale_window_is_served_at_once_and_analysed_again_in_the_background(
    dash: Dashboard, counting: CountingAnalyse
) -> None:
    window = dash.window("1h")
    first = dash.analysed(window)
    assert dash.analysed(window) is first and len(counting.calls) == 1  # fresh: reused
    assert isinstance(dash.clock, Clock)
    dash.clock.now += 11.0
    counting.gate.clear()
    assert dash.analysed(window) is first  # stale: served without waiting
    assert counting.entered.wait(30)
    assert len(counting.calls) == 2
    assert dash.analysed(window) is first  # the refresh is in flight: no second one
    counting.gate.set()
    for _ in range(300):
        if dash.analysed(window) is not first:
            break
        threading.Event().wait(0.05)
    assert dash.analysed(window) is not first
    assert len(counting.calls) == 2


def test_the_next_live_window_is_served_the_previous_one_while_it_is_analysed(
    dash: Dashboard, counting: CountingAnalyse
) -> None:
    window = dash.window("1h")
    first = dash.analysed(window)
    later = _next(window)
    counting.gate.clear()
    assert dash.analysed(later) is first
    counting.gate.set()


def test_explicit_bounds_are_only_served_their_own_analysis(
    dash: Dashboard, counting: CountingAnalyse
) -> None:
    live = dash.window("1h")
    explicit = dash.window(start_ns=live.start_ns, end_ns=live.end_ns - live.step_s * NS)
    dash.analysed(explicit)
    moved = Window(
        explicit.start_ns + explicit.step_s * NS,
        explicit.end_ns + explicit.step_s * NS,
        explicit.step_s,
    )
    got = dash.analysed(moved)
    assert counting.calls[-1] == (moved.start_ns, moved.end_ns, moved.step_s)
    assert got is not dash.analysed(explicit)


def test_a_failed_analysis_is_not_cached_and_waiting_viewers_try_again(
    dash: Dashboard, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def failing(store: Any, *, window: Window, settings: Any) -> Any:
        calls.append(window)
        raise RuntimeError("store unreadable")

    monkeypatch.setattr(service, "_analyse", failing)
    window = dash.window("1h")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="store unreadable"):
            dash.analysed(window)
    assert len(calls) == 2


def test_a_failed_background_analysis_is_shown_by_the_next_request(
    dash: Dashboard, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = dash.window("1h")
    first = dash.analysed(window)
    broken = threading.Event()

    def failing(store: Any, *, window: Window, settings: Any) -> Any:
        broken.set()
        raise RuntimeError("store unreadable")

    monkeypatch.setattr(service, "_analyse", failing)
    assert isinstance(dash.clock, Clock)
    dash.clock.now += 11.0
    assert dash.analysed(window) is first  # stale: served while analysed in the background
    assert broken.wait(30)
    for _ in range(300):  # the background thread marks the window once its analysis failed
        if window_failed(dash, window):
            break
        threading.Event().wait(0.05)
    with pytest.raises(RuntimeError, match="store unreadable"):
        dash.analysed(window)  # not the old data again: the failure, in the foreground


def window_failed(dash: Dashboard, window: Window) -> bool:
    return (window.start_ns, window.end_ns, window.step_s) in dash._failed


def test_a_viewed_live_range_keeps_one_analysis_not_one_per_step(
    dash: Dashboard, counting: CountingAnalyse
) -> None:
    window = dash.window("1h")
    other_range = dash.window("6h")
    dash.analysed(other_range)
    moved = window
    for _ in range(5):  # the live window moves on with the newest reading, step by step
        dash.analysed(moved)  # the first time in the foreground; later ones in the background
        for _ in range(300):
            if (moved.start_ns, moved.end_ns, moved.step_s) in dash._cache:
                break
            threading.Event().wait(0.05)
        moved = _next(moved)
    spans = [(end - start, step) for start, end, step in dash._cache]
    assert len(counting.calls) == 6
    assert len(dash._cache) == 2  # the newest 1 h window, and the 6 h one
    assert sorted(spans) == sorted(
        {(w.end_ns - w.start_ns, w.step_s) for w in (window, other_range)}
    )


def test_where_a_window_ends_is_not_queued_behind_a_running_analysis(
    dash: Dashboard, counting: CountingAnalyse
) -> None:
    window = dash.window("1h")  # the store's newest reading is known from here on
    assert isinstance(dash.clock, Clock)
    dash.clock.now += service.BOUNDS_TTL_S + 1  # and due to be asked again
    counting.gate.clear()
    analysis = threading.Thread(target=dash.analysed, args=(window,))
    analysis.start()
    assert counting.entered.wait(30)  # holds the store's one connection
    try:
        started = time.monotonic()
        assert dash.window("1h") == window  # answered from what it knew, not after the analysis
        assert time.monotonic() - started < 5
    finally:
        counting.gate.set()
        analysis.join(60)
