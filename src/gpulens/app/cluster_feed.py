"""The Cluster page's data kept for an agent: refreshed from a site's Prometheus in the
background, or built from the agent's store for the window a viewer asks for.

From Prometheus (`gpulens agent --prometheus URL`), one background thread reads the range
every `every_s` seconds (bounded to [MIN_EVERY_S, MAX_EVERY_S]); a read that fails keeps the
last good data, records why, and is retried sooner (30 s, doubling up to `every_s`). The agent
keeps serving whatever Prometheus does: the page shows the error, when it happened and the
age of what it shows. From a store, each window is built on first request and kept for
`ttl_s` seconds, one build at a time.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpulens.config import Config
from gpulens.errors import ConfigError

if TYPE_CHECKING:  # the fleet analysis is imported at the first read, not with the agent
    from gpulens.app.cluster_view import ClusterData

NS = 1_000_000_000
MIN_EVERY_S = 30.0
MAX_EVERY_S = 6 * 3600.0
DEFAULT_EVERY_S = 300.0
DEFAULT_SPAN_S = 7 * 86400.0
RETRY_FIRST_S = 30.0


@dataclass(frozen=True, slots=True)
class FeedState:
    """What the Cluster page shows: the data (None before the first good read), the last
    error and when it happened, when the data was read, and when the next read is due (all
    epoch ns; None: not yet)."""

    source: str
    data: ClusterData | None = None
    error: str | None = None
    failed_ns: int | None = None
    refreshed_ns: int | None = None
    next_ns: int | None = None
    every_s: float | None = None
    reading: bool = False  # a read is in flight


def check_every(every_s: float) -> float:
    """The refresh interval, or ConfigError naming it when outside the bounds."""
    if not MIN_EVERY_S <= every_s <= MAX_EVERY_S:
        raise ConfigError(
            f"--cluster-every {every_s:g}: give seconds between {MIN_EVERY_S:g} and "
            f"{MAX_EVERY_S:g} (each refresh reads the whole window from Prometheus)"
        )
    return every_s


class ClusterFeed:
    """See the module doc. `url` set: Prometheus mode (`run` refreshes in the background);
    else store mode (`for_window`). `start_ns`/`end_ns` fix the window's ends; without them
    the window is the `span_s` before now. `node_queues` (node → queue) names the queues
    where the series carry no `queue` or `partition` label."""

    def __init__(
        self,
        cfg: Config,
        url: str | None = None,
        *,
        start_ns: int | None = None,
        end_ns: int | None = None,
        span_s: float = DEFAULT_SPAN_S,
        node_queues: Mapping[str, str] | None = None,
        every_s: float = DEFAULT_EVERY_S,
        ttl_s: float = 60.0,
        keep: int = 4,
        now_ns: Callable[[], int] = time.time_ns,
        build: Callable[..., ClusterData] | None = None,
    ) -> None:
        self.cfg = cfg
        self.url = url
        self.start_ns, self.end_ns, self.span_s = start_ns, end_ns, span_s
        self.node_queues = dict(node_queues or {})
        self.every_s = check_every(every_s) if url is not None else every_s
        self.ttl_s, self.keep = ttl_s, keep
        self.now_ns = now_ns
        self._build = build
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()  # one build at a time (each may take seconds)
        self.public_url = None  # the URL without user and password, for the page and logs
        if url is not None:
            from gpulens.collect.dcgm.scrape import public_url

            self.public_url = public_url(url)
        label = f"Prometheus {self.public_url}" if url is not None else f"store {cfg.data_dir}"
        self._state = FeedState(source=label, every_s=self.every_s if url else None)
        self._failures = 0
        self._windows: OrderedDict[tuple[int, int, int], tuple[float, FeedState]] = OrderedDict()

    @property
    def prometheus(self) -> bool:
        return self.url is not None

    # -- Prometheus ----------------------------------------------------------------------------
    def window(self) -> tuple[int, int]:
        """[start, end) in ns of the next read."""
        end = self.end_ns if self.end_ns is not None else self.now_ns()
        start = self.start_ns if self.start_ns is not None else end - int(self.span_s * NS)
        return start, end

    def state(self) -> FeedState:
        with self._lock:
            return self._state

    def refresh(self) -> FeedState:
        """Read the window from Prometheus now; on failure keep the last data and say why."""
        with self._lock:
            self._state = replace(self._state, reading=True)
        start, end = self.window()
        try:
            with self._build_lock:
                data = self._make_prometheus(start, end)
        except Exception as exc:  # any failure: the agent keeps serving, the page says why
            now = self.now_ns()
            with self._lock:
                self._failures += 1
                wait = min(self.every_s, RETRY_FIRST_S * 2 ** (self._failures - 1))
                self._state = replace(
                    self._state,
                    error=_message(exc),
                    failed_ns=now,
                    next_ns=now + int(wait * NS),
                    reading=False,
                )
                return self._state
        now = self.now_ns()
        with self._lock:
            self._failures = 0
            self._state = FeedState(
                source=self._state.source,
                data=data,
                refreshed_ns=now,
                next_ns=now + int(self.every_s * NS),
                every_s=self.every_s,
            )
            return self._state

    def _make_prometheus(self, start: int, end: int) -> ClusterData:
        if self._build is not None:
            return self._build(start, end)
        from gpulens.app.cluster_view import from_prometheus

        return from_prometheus(self.cfg, self.url, start, end, self.now_ns(), self.node_queues)

    def run(self, stop: threading.Event, after: Callable[[], None] | None = None) -> None:
        """Refresh until `stop` is set: at once, then whenever the next read is due; `after`
        runs after each read (the agent hands freed memory back)."""
        while not stop.is_set():
            state = self.refresh()
            if after is not None:
                after()
            due = state.next_ns if state.next_ns is not None else self.now_ns()
            wait = max(1.0, (due - self.now_ns()) / NS)
            if stop.wait(wait):
                return

    # -- a store -------------------------------------------------------------------------------
    def for_window(self, start_ns: int, end_ns: int, step_s: int) -> FeedState:
        """The store's Cluster data over a window (built once per `ttl_s`; an error is shown
        on the page, not raised)."""
        key = (start_ns, end_ns, step_s)
        with self._lock:
            hit = self._windows.get(key)
            if hit is not None and time.monotonic() - hit[0] <= self.ttl_s:
                return hit[1]
        with self._build_lock:
            with self._lock:  # built meanwhile by the request this one waited for
                hit = self._windows.get(key)
                if hit is not None and time.monotonic() - hit[0] <= self.ttl_s:
                    return hit[1]
            now = self.now_ns()
            try:
                if self._build is not None:
                    data = self._build(start_ns, end_ns)
                else:
                    from gpulens.app.cluster_view import from_store

                    data = from_store(self.cfg, start_ns, end_ns, step_s, self.node_queues)
                state = FeedState(source=self._state.source, data=data, refreshed_ns=now)
            except Exception as exc:
                state = FeedState(source=self._state.source, error=_message(exc), failed_ns=now)
        with self._lock:
            self._windows[key] = (time.monotonic(), state)
            self._windows.move_to_end(key)
            while len(self._windows) > self.keep:
                self._windows.popitem(last=False)
        return state


def _message(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 600 else text[:600] + "…"
