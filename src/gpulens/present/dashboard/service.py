"""The dashboard over an agent's context: windows anchored at the newest reading, one analysed
window shared by the pages that show it (kept a few seconds), and the page builders."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from pathlib import Path

from gpulens.app.agent import AgentContext
from gpulens.app.trace_dirs import TraceEntry, list_traces, resolve_trace
from gpulens.app.traces import analyze_files
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
        self.traces = TraceCache()
        self._cache: OrderedDict[WindowKey, tuple[float, Analysed]] = OrderedDict()
        self._uploads: OrderedDict[str, TracePage] = OrderedDict()
        self._lock = threading.Lock()
        self._uploads_lock = threading.Lock()

    # -- windows -------------------------------------------------------------------------------
    def latest_ns(self) -> int | None:
        """The newest reading: the store's, or the live state's tick when that is newer."""
        _, last = self.ctx.with_store(lambda s: s.time_bounds())
        live_ts = self.ctx.live.snapshot().ts if self.ctx.live is not None else None
        candidates = [t for t in (last, live_ts) if t is not None]
        return max(candidates) if candidates else None

    def window(
        self,
        range_name: str = DEFAULT_RANGE,
        points: int = DEFAULT_POINTS,
        start_ns: int | None = None,
        end_ns: int | None = None,
    ) -> Window:
        """The window of a request (ValueError for bad bounds, see `window.resolve`)."""
        return resolve(self.latest_ns(), range_name, points, start_ns, end_ns)

    def analysed(self, window: Window) -> Analysed:
        """`window` through the report pipeline, reused for `ttl_s` seconds."""
        key = (window.start_ns, window.end_ns, window.step_s)
        with self._lock:
            now = self.clock()
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] <= self.ttl_s:
                self._cache.move_to_end(key)
                return hit[1]
            result: Analysed = self.ctx.with_store(
                partial(_analyse, window=window, settings=self.settings)
            )
            self._cache[key] = (self.clock(), result)
            while len(self._cache) > self.keep:
                self._cache.popitem(last=False)
            return result

    # -- pages ---------------------------------------------------------------------------------
    def now(self) -> NowStrip:
        return now_strip(self.ctx.live.snapshot() if self.ctx.live is not None else None)

    def fleet(self, window: Window) -> FleetPage:
        return fleet_page(self.analysed(window))

    def workloads(self, window: Window) -> WorkloadsPage:
        return workloads_page(self.analysed(window))

    def people(self, window: Window, by: str | None = None) -> PeoplePage:
        """The Jobs and users page; fairness by `by`, else by the configured quota group."""
        return people_page(self.analysed(window), by or self.quota_by())

    def quota_by(self) -> str:
        """The label quotas are set for (`fairness.quota_by`, through the findings settings)."""
        thresholds = self.ctx.analysis.get("finding_thresholds")
        return str(getattr(thresholds, "unfair_by", None) or "team")

    def findings(
        self, window: Window, severity: str | None = None, rule: str | None = None, limit: int = 200
    ) -> FindingsPage:
        return findings_page(self.analysed(window), severity, rule, limit)

    def gpus(self) -> list[GpuEntry]:
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
        page = trace_page(analyze_files([path], names=[source]), source)
        with self._uploads_lock:
            self._uploads[upload_id] = page
            while len(self._uploads) > self.keep:
                self._uploads.popitem(last=False)
        return page

    def uploaded(self, upload_id: str) -> TracePage | None:
        """A recent upload's analysis, or None."""
        with self._uploads_lock:
            return self._uploads.get(upload_id)


def _analyse(store: Store, *, window: Window, settings: Settings) -> Analysed:
    return analyse_window(store, window, settings)
