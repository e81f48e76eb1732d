"""The dashboard over an agent's context: windows anchored at the newest reading, one analysed
window shared by the pages that show it, and the page builders.

However many viewers refresh at once, one window is analysed once per `ttl_s`: requests for it
wait for the one analysis in flight (single flight); once it is older than `ttl_s`, requests
get it at once while one background thread analyses it again (stale while revalidate). A
window that has moved on by a step, as live windows do, is served from the previous window of
the same span and step while the new one is analysed, and once the new one is in, the older
live windows of that span and step are dropped (a viewed range holds one analysis, not
`keep`). Pages built from an analysed window are kept with it, so many viewers of a page cost
one page build per analysis.

Every request tells the agent's context that someone is looking (`AgentContext.viewed`), and
the live strip asks the live state for the interval still filling (`LiveState.fresh`)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar, cast

from gpulens.app.agent import AgentContext
from gpulens.app.heap import trim_heap
from gpulens.app.trace_dirs import TraceEntry, list_traces, resolve_trace
from gpulens.app.traces import analyze_files
from gpulens.present.dashboard.cluster import ClusterPage, SourceStatus, cluster_page
from gpulens.present.dashboard.common import Analysed, Settings, analyse_window
from gpulens.present.dashboard.findings import FindingsPage, findings_page
from gpulens.present.dashboard.fleet import FleetPage, fleet_page
from gpulens.present.dashboard.gpu import GpuEntry, GpuPage, gpu_list, gpu_page
from gpulens.present.dashboard.now import NowStrip, now_strip
from gpulens.present.dashboard.people import PeoplePage, people_page
from gpulens.present.dashboard.traces import TraceCache, TracePage, trace_page
from gpulens.present.dashboard.window import DEFAULT_POINTS, DEFAULT_RANGE, Window, resolve
from gpulens.present.dashboard.workloads import WorkloadsPage, workloads_page
from gpulens.store import Store

WindowKey = tuple[int, int, int]
PageKey = tuple[str, tuple[object, ...]]
T = TypeVar("T")
#: the live strip's states are at most this many seconds behind the newest tick
NOW_MAX_AGE_S = 5.0
#: the store's newest reading is asked again after this many seconds (see `latest_ns`)
BOUNDS_TTL_S = 2.0


class Dashboard:
    """Page data for the web app; thread-safe (store access goes through `ctx.with_store`)."""

    def __init__(
        self,
        ctx: AgentContext,
        ttl_s: float = 10.0,
        keep: int = 6,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ctx = ctx
        self.settings = Settings.of(ctx.prices, ctx.region, ctx.quotas, ctx.analysis)
        self.ttl_s = ttl_s
        self.keep = keep
        self.clock = clock
        self.traces = TraceCache(limits=ctx.trace_limits)
        self._cache: OrderedDict[WindowKey, _Entry] = OrderedDict()
        self._pending: dict[WindowKey, threading.Event] = {}
        self._failed: set[WindowKey] = set()  # windows whose background analysis failed
        self._uploads: OrderedDict[str, TracePage] = OrderedDict()
        self._lock = threading.Lock()
        self._uploads_lock = threading.Lock()
        self._bounds: tuple[float, int | None] | None = None  # (when asked, store's newest)
        self._now: tuple[int, NowStrip] | None = None  # (live state's changes, its strip)
        self._cluster: tuple[object, ClusterPage] | None = None  # (feed state, its page)

    # -- windows -------------------------------------------------------------------------------
    def latest_ns(self) -> int | None:
        """The newest reading: the store's, or the live state's tick when that is newer.

        The store's newest reading is asked at most every `BOUNDS_TTL_S` seconds, and not
        while another query (an analysis) holds the store when there is an answer already:
        requests do not queue behind an analysis only to learn where their window ends."""
        last = self._store_last()
        live_ts = self.ctx.live.snapshot().ts if self.ctx.live is not None else None
        candidates = [t for t in (last, live_ts) if t is not None]
        return max(candidates) if candidates else None

    def _store_last(self) -> int | None:
        with self._lock:
            known = self._bounds
        if known is not None and self.clock() - known[0] <= BOUNDS_TTL_S:
            return known[1]
        if known is not None:
            got, bounds = self.ctx.try_with_store(lambda s: s.time_bounds())
            if not got:
                return known[1]
        else:
            bounds = self.ctx.with_store(lambda s: s.time_bounds())
        last: int | None = bounds[1]
        with self._lock:
            self._bounds = (self.clock(), last)
        return last

    def window(
        self,
        range_name: str = DEFAULT_RANGE,
        points: int = DEFAULT_POINTS,
        start_ns: int | None = None,
        end_ns: int | None = None,
    ) -> Window:
        """The window of a request (ValueError for bad bounds, see `window.resolve`)."""
        self.ctx.viewed()
        return resolve(self.latest_ns(), range_name, points, start_ns, end_ns)

    def analysed(self, window: Window) -> Analysed:
        """`window` through the report pipeline, shared by every request for `ttl_s` seconds
        (see the module's docstring for how concurrent and stale requests are served)."""
        return self._entry(window).analysed

    def _entry(self, window: Window) -> _Entry:
        key = (window.start_ns, window.end_ns, window.step_s)
        while True:
            with self._lock:
                # after a background analysis failed, the next request analyses in the
                # foreground, so the failure reaches a viewer instead of old data forever
                failed = key in self._failed
                entry = None if failed else self._cache.get(key) or self._previous(window)
                pending = self._pending.get(key)
                if entry is not None and (
                    entry.key == key and self.clock() - entry.at <= self.ttl_s
                ):
                    self._cache.move_to_end(entry.key)
                    return entry
                if entry is not None:  # stale, or the window before this one: serve it
                    if pending is None:
                        self._pending[key] = threading.Event()
                        threading.Thread(
                            target=self._refresh_quietly, args=(key, window), daemon=True
                        ).start()
                    return entry
                owner = pending is None
                if owner:
                    pending = self._pending[key] = threading.Event()
            if owner:
                return self._refresh(key, window)
            assert pending is not None
            pending.wait()  # then take what the owner stored (or, if it failed, try again)

    def _refresh(self, key: WindowKey, window: Window) -> _Entry:
        """Analyse `window`, store it under `key`, and wake the requests waiting for it."""
        try:
            result: Analysed = self.ctx.with_store(
                partial(_analyse, window=window, settings=self.settings)
            )
            entry = _Entry(key, self.clock(), result, live=bool(window.range))
            with self._lock:
                self._failed.discard(key)
                self._cache[key] = entry
                self._cache.move_to_end(key)
                if entry.live:
                    for old in self._superseded(entry):
                        del self._cache[old]
                while len(self._cache) > self.keep:
                    self._cache.popitem(last=False)
            del result
            trim_heap()  # the analysis' temporaries, back to the system
            return entry
        finally:
            with self._lock:
                event = self._pending.pop(key, None)
            if event is not None:
                event.set()

    def _refresh_quietly(self, key: WindowKey, window: Window) -> None:
        """`_refresh` in the background: a failure leaves the served entry as it is and marks
        the window, so that its next request analyses it in the foreground and shows why."""
        try:
            self._refresh(key, window)
        except Exception:
            with self._lock:
                if len(self._failed) >= 8 * self.keep:  # windows move on; keep the set small
                    self._failed.clear()
                self._failed.add(key)

    def _superseded(self, entry: _Entry) -> list[WindowKey]:
        """The cached live windows of `entry`'s span and step that end before it: no request
        is served them any more (a live window only moves forward, and `_previous` takes the
        newest), so each viewed range keeps one analysed window, not `keep` of them. Called
        with the lock held."""
        start, end, step = entry.key
        return [
            key
            for key, other in self._cache.items()
            if other.live and key[2] == step and key[1] - key[0] == end - start and key[1] < end
        ]

    def _previous(self, window: Window) -> _Entry | None:
        """For a live window (a named range, anchored at the newest reading): the newest cached
        live window of the same span and step that ends before it, or None. A window with
        explicit bounds is only ever served its own analysis. Called with the lock held."""
        if not window.range:
            return None
        span = window.end_ns - window.start_ns
        for key in reversed(self._cache):
            start, end, step = key
            entry = self._cache[key]
            if entry.live and step == window.step_s and end - start == span and end < window.end_ns:
                return entry
        return None

    def _page(
        self, window: Window, name: str, args: tuple[object, ...], build: Callable[[Analysed], T]
    ) -> T:
        """The page `name` with `args` built from `window`'s analysis, built once per analysis."""
        entry = self._entry(window)
        page_key: PageKey = (name, args)
        with entry.lock:
            page = entry.pages.get(page_key)
            if page is None:
                page = entry.pages[page_key] = build(entry.analysed)
        return cast(T, page)

    # -- pages ---------------------------------------------------------------------------------
    def now(self) -> NowStrip:
        """The live strip: one object per change of the live state, shared by its viewers."""
        self.ctx.viewed()
        live = self.ctx.live
        if live is None:
            return now_strip(None)
        live.fresh(NOW_MAX_AGE_S)
        changes = live.changes
        with self._lock:
            if self._now is not None and self._now[0] == changes:
                return self._now[1]
        strip = now_strip(live.snapshot())  # may be newer than `changes`: never older
        with self._lock:
            self._now = (changes, strip)
        return strip

    def fleet(self, window: Window) -> FleetPage:
        return self._page(window, "fleet", (), fleet_page)

    def workloads(self, window: Window) -> WorkloadsPage:
        def build(a: Analysed) -> WorkloadsPage:
            page: WorkloadsPage = self.ctx.with_store(lambda s: workloads_page(a, s))
            return page

        return self._page(window, "workloads", (), build)

    def people(self, window: Window, by: str | None = None) -> PeoplePage:
        """The Jobs and users page; fairness by `by`, else by the configured quota group."""
        group = by or self.quota_by()
        return self._page(window, "people", (group,), lambda a: people_page(a, group))

    def quota_by(self) -> str:
        """The label quotas are set for (`fairness.quota_by`, through the findings settings)."""
        thresholds = self.ctx.analysis.get("finding_thresholds")
        return str(getattr(thresholds, "unfair_by", None) or "team")

    def findings(
        self, window: Window, severity: str | None = None, rule: str | None = None, limit: int = 200
    ) -> FindingsPage:
        return self._page(
            window,
            "findings",
            (severity, rule, limit),
            lambda a: findings_page(a, severity, rule, limit),
        )

    def cluster_from_prometheus(self) -> bool:
        """Whether the Cluster page is a Prometheus read (its own window), not the store's."""
        return self.ctx.cluster is not None and self.ctx.cluster.prometheus

    def cluster(self, window: Window | None) -> ClusterPage:
        """The Cluster page: the feed's last Prometheus read, or the store's cluster over
        `window`; one page object per feed state, shared by its viewers."""
        self.ctx.viewed()
        feed = self.ctx.cluster
        if feed is None:
            status = SourceStatus(
                source="none",
                prometheus=False,
                error="this agent has no cluster source: run it with --prometheus URL",
            )
            return ClusterPage(status)
        if feed.prometheus or window is None:
            state = feed.state()
        else:
            state = feed.for_window(window.start_ns, window.end_ns, window.step_s)
        with self._lock:
            if self._cluster is not None and self._cluster[0] is state:
                return self._cluster[1]
        page = cluster_page(state, feed.prometheus)
        with self._lock:
            self._cluster = (state, page)
        return page

    def gpus(self) -> list[GpuEntry]:
        self.ctx.viewed()
        latest = self.latest_ns()
        result: list[GpuEntry] = self.ctx.with_store(lambda s: gpu_list(s, latest))
        return result

    def gpu(self, gpu_uuid: str, window: Window) -> GpuPage:
        """UnknownGpu when the window has no reading of `gpu_uuid`."""
        page: GpuPage = self.ctx.with_store(lambda s: gpu_page(s, gpu_uuid, window, self.settings))
        return page

    def trace_list(self) -> list[TraceEntry]:
        return list_traces(self.ctx.trace_dirs)

    def trace(self, dir_index: int, name: str) -> TracePage:
        """TracePathError for a name outside the trace directories; TraceFormatError for a
        file that is not a trace."""
        files = resolve_trace(self.ctx.trace_dirs, dir_index, name, self.ctx.max_upload_bytes)
        return self.traces.get(files, name)

    def analyse_upload(self, path: Path, source: str, upload_id: str) -> TracePage:
        """Analyse an uploaded file (called `source` in errors and on the page) and keep the
        result under `upload_id` (TraceFormatError when it is not a trace)."""
        job = analyze_files([path], names=[source], limits=self.ctx.trace_limits)
        page = trace_page(job, source)
        with self._uploads_lock:
            self._uploads[upload_id] = page
            while len(self._uploads) > self.keep:
                self._uploads.popitem(last=False)
        return page

    def uploaded(self, upload_id: str) -> TracePage | None:
        """A recent upload's analysis, or None."""
        with self._uploads_lock:
            return self._uploads.get(upload_id)


@dataclass
class _Entry:
    """An analysed window (`key`, analysed at `at` on the dashboard's clock) and the pages
    built from it."""

    key: WindowKey
    at: float
    analysed: Analysed
    live: bool = False  # a named range's window, anchored at the newest reading
    pages: dict[PageKey, object] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _analyse(store: Store, *, window: Window, settings: Settings) -> Analysed:
    return analyse_window(store, window, settings)
