"""The live view model: what every GPU and process does now, and why.

`LiveState` is fed each tick (`on_tick`). It keeps the raw readings of the last tick, and the
last few minutes in a `RecentWindow`, from which `refresh` builds the interval frame of the
last `state_window_s` seconds with the same code as reports (frames → classify → useful work →
waste), so the state a live view shows is the state a report will show for that minute. It
also counts, per GPU and cause, the wasted GPU-seconds of every interval that closed since the
state began (Prometheus counters), and holds the findings the agent last computed.

Front ends (the exporter, the web dashboard, `gpulens top`) read `snapshot()`: plain frozen
records, no formatting, safe to read from any thread.

A refresh is needed only when an interval closes (`refresh_due`): the waste counters and the
states /metrics shows are those of closed intervals. A viewer that wants the interval still
filling asks for it (`fresh`), and pays for it only while it looks.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from gpulens.analyze.carbon import DEFAULT_REGION
from gpulens.analyze.efficiency import Thresholds
from gpulens.analyze.prices import Prices
from gpulens.analyze.schema import IDENTITY_COLUMNS
from gpulens.collect.base import EndpointHealth
from gpulens.findings.engine import build_context
from gpulens.findings.model import Finding
from gpulens.model import HOLDER_LABELS, Kind, Reading
from gpulens.pipeline.scheduler import TickResult
from gpulens.pipeline.selfstats import SelfStats
from gpulens.store.recent import RecentWindow
from gpulens.store.recent_frame import recent_intervals

NS = 1_000_000_000
#: labels that identify a GPU entity (a whole GPU or a MIG instance)
GPU_KEY_LABELS: tuple[str, ...] = ("host", "gpu_uuid", "mig_instance")
#: attribution carried from the interval frame onto a GPU row: who holds the GPU
ATTRIBUTION: tuple[str, ...] = HOLDER_LABELS

#: labels a waste counter is kept per: the GPU and who held it (a new job or pod is a new series)
WASTE_LABELS: tuple[str, ...] = (
    *(c for c in IDENTITY_COLUMNS if c != "parent_uuid"),
    "mig_profile",
    *HOLDER_LABELS,
)
#: a waste counter not increased for this long (its job ended) is dropped from the exposition
WASTE_FORGET_S = 3600.0


def gpu_key(labels: Mapping[str, str]) -> tuple[str, str, str]:
    """(host, gpu_uuid, mig_instance) of a GPU reading or frame row; '' where absent."""
    return (
        str(labels.get("host") or ""),
        str(labels.get("gpu_uuid") or ""),
        str(labels.get("mig_instance") or ""),
    )


@dataclass(frozen=True, slots=True)
class GpuNow:
    """One GPU entity: its identity labels, the last tick's readings (catalog names, base
    units) and, once a state window has been analysed, its state and useful work."""

    labels: dict[str, str]
    values: dict[str, float]
    state: str | None = None
    reason: str | None = None
    useful_ratio: float | None = None
    attribution: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProcessNow:
    """One process on a GPU: its labels (pid, user, job, container, engine...) and readings."""

    labels: dict[str, str]
    values: dict[str, float]


@dataclass(frozen=True, slots=True)
class CollectorHealth:
    """One collector's health since the agent started, with its endpoints' (dcgm URLs)."""

    name: str
    last_status: str
    last_duration_s: float
    errors_total: int
    timeouts_total: int
    last_error: str | None
    last_success_ns: int | None = None
    endpoints: tuple[EndpointHealth, ...] = ()
    call_errors: tuple[tuple[str, str, int], ...] = ()  # (call, error name, failures): NVML


@dataclass(frozen=True, slots=True)
class WasteCounter:
    """Not-useful GPU-seconds of one GPU entity and the job holding it, for one cause and kind
    ("wasted": actionable waste, `wasted_s`; "headroom": the remainder in a healthy state,
    `headroom_s`, not waste), summed over closed intervals (kept until an hour after its last
    increase)."""

    labels: dict[str, str]
    cause: str
    seconds: float
    kind: str = "wasted"


@dataclass(frozen=True, slots=True)
class LiveSnapshot:
    """Everything live front ends show, at tick `ts` (None before the first tick)."""

    ts: int | None
    gpus: list[GpuNow]
    processes: list[ProcessNow]
    hosts: list[ProcessNow]
    events: list[ProcessNow]
    collectors: list[CollectorHealth]
    waste: list[WasteCounter]
    findings: list[Finding]
    findings_ts: int | None
    state_window_s: float
    store: dict[str, float] = field(default_factory=dict)
    store_lag_s: float | None = None


class LiveState:
    """Thread-safe live state; see the module doc."""

    def __init__(
        self,
        state_window_s: float = 60.0,
        keep_s: float = 300.0,
        *,
        states: Thresholds | None = None,
        prices: Prices | None = None,
        region: str | float = DEFAULT_REGION,
        waste_forget_s: float = WASTE_FORGET_S,
    ) -> None:
        if state_window_s <= 0 or keep_s < state_window_s:
            raise ValueError("need 0 < state_window_s <= keep_s")
        self.state_window_s = float(state_window_s)
        self.window = RecentWindow(keep_s)
        self.states = states
        self.prices = prices
        self.region = region
        self.waste_forget_ns = round(waste_forget_s * NS)
        self._lock = threading.Lock()
        self._gpus: dict[tuple[str, str, str], Reading] = {}
        self._processes: list[Reading] = []
        self._hosts: list[Reading] = []
        self._events: list[Reading] = []
        self._ts: int | None = None
        self._analysis: dict[tuple[str, str, str], dict[str, Any]] = {}
        # (labels, cause, kind) -> seconds, and when each last grew
        self._waste: dict[tuple[tuple[tuple[str, str], ...], str, str], float] = {}
        self._waste_seen: dict[tuple[tuple[tuple[str, str], ...], str, str], int] = {}
        self._counted_until_ns: int | None = None
        self._findings: list[Finding] = []
        self._findings_ts: int | None = None
        self._stats: SelfStats | None = None
        self._store: dict[str, float] = {}
        self._last_flush_ns: int | None = None
        self._refresh_lock = threading.Lock()
        self.refreshed_ns: int | None = None  # the window end (newest tick) of the last refresh
        self.changes = 0  # counts every change of what `snapshot` shows
        self.refreshes = 0

    # -- feeding -------------------------------------------------------------------------------
    def on_tick(self, tick: TickResult) -> None:
        """Take one tick's readings (after the rate stage)."""
        gpus: dict[tuple[str, str, str], Reading] = {}
        processes: list[Reading] = []
        hosts: list[Reading] = []
        events: list[Reading] = []
        for r in tick.readings:
            if r.kind is Kind.GPU:
                gpus[gpu_key(r.labels)] = r
            elif r.kind is Kind.PROCESS:
                processes.append(r)
            elif r.kind is Kind.HOST:
                hosts.append(r)
            elif r.kind is Kind.EVENT:
                events.append(r)
        self.window.append(tick.ts, tick.readings)
        with self._lock:
            self.changes += 1
            self._ts = tick.ts
            self._gpus = gpus
            self._processes = processes
            self._hosts = hosts
            if events:
                self._events = (self._events + events)[-100:]
            if tick.flushed:
                self._last_flush_ns = tick.ts

    def watch(self, stats: SelfStats, store_stats: Mapping[str, float] | None = None) -> None:
        """Where collector health (the scheduler's SelfStats) and store figures come from."""
        with self._lock:
            self.changes += 1
            self._stats = stats
            if store_stats is not None:
                self._store = dict(store_stats)

    def set_store_stats(self, store_stats: Mapping[str, float]) -> None:
        with self._lock:
            self.changes += 1
            self._store = dict(store_stats)

    def set_findings(self, findings: list[Finding], ts: int) -> None:
        """The findings of the agent's last analysis pass over its recent history."""
        with self._lock:
            self.changes += 1
            self._findings = list(findings)
            self._findings_ts = ts

    # -- analysis ------------------------------------------------------------------------------
    def refresh_due(self, ts: int) -> bool:
        """True when the tick at `ts` closed an interval since the last refresh (or there was
        none yet): the only ticks after which /metrics has something new to show."""
        done = self.refreshed_ns
        step_ns = round(self.state_window_s * NS)
        return done is None or ts // step_ns > done // step_ns

    def fresh(self, max_age_s: float = 5.0) -> None:
        """Refresh unless the last refresh saw a tick at most `max_age_s` seconds older than
        the newest (for a viewer of the interval still filling). Never raises: a failing
        analysis leaves the last state."""
        latest, done = self.window.latest_ns, self.refreshed_ns
        if latest is None or (done is not None and latest - done <= max_age_s * NS):
            return
        try:
            self.refresh()
        except Exception:  # the snapshot still shows the readings; the states wait
            return

    def refresh(self) -> pa.Table | None:
        """Classify the last `state_window_s` seconds and count the waste of closed intervals.

        Returns the annotated frame (None before any reading): the interval frame of a few
        minutes of readings, computed in memory (`recent_intervals`, no DuckDB for a state
        window that divides a minute or is one). One refresh runs at a time.
        """
        with self._refresh_lock:
            return self._refresh()

    def _refresh(self) -> pa.Table | None:
        latest = self.window.latest_ns
        if latest is None:
            return None
        self.refreshed_ns, self.refreshes = latest, self.refreshes + 1
        step_ns = round(self.state_window_s * NS)
        # the current (possibly partial) interval and the ones before it still in the window
        end = (latest // step_ns + 1) * step_ns
        start = end - 3 * step_ns
        frame = recent_intervals(
            self.window, step_s=self.state_window_s, start_ns=start, end_ns=end
        )
        if frame.num_rows == 0:
            return frame
        ctx = build_context(frame, states=self.states, prices=self.prices, region=self.region)
        annotated = ctx.frame
        rows = annotated.to_pylist()
        closed_before = (latest // step_ns) * step_ns  # buckets that start before it are closed
        newest: dict[tuple[str, str, str], dict[str, Any]] = {}
        for row in rows:  # per GPU the newest closed interval, else the one still filling
            key = gpu_key(row)
            have = newest.get(key)
            if have is None or _fresher(row, have, closed_before):
                newest[key] = row
        with self._lock:
            self.changes += 1
            self._analysis = newest
            counted = self._counted_until_ns
            for row in rows:
                if row["start_ns"] >= closed_before:
                    continue  # still filling
                if counted is not None and row["start_ns"] < counted:
                    continue  # already counted
                for kind, column in (("wasted", "wasted_s"), ("headroom", "headroom_s")):
                    seconds = row.get(column)
                    if seconds is None or seconds <= 0:
                        continue
                    labels = tuple(
                        (k, str(row[k])) for k in WASTE_LABELS if row.get(k) not in (None, "")
                    )
                    key2 = (labels, str(row.get("waste_cause") or "other"), kind)
                    self._waste[key2] = self._waste.get(key2, 0.0) + float(seconds)
                    self._waste_seen[key2] = latest
            forget = latest - self.waste_forget_ns
            for stale in [k for k, seen in self._waste_seen.items() if seen < forget]:
                del self._waste[stale], self._waste_seen[stale]
            self._counted_until_ns = max(counted or 0, closed_before)
        return annotated

    # -- reading -------------------------------------------------------------------------------
    def snapshot(self) -> LiveSnapshot:
        """A consistent copy of the live state."""
        with self._lock:
            gpus = []
            for key, r in sorted(self._gpus.items(), key=lambda kv: _gpu_order(kv[1].labels)):
                row = self._analysis.get(key, {})
                gpus.append(
                    GpuNow(
                        labels=dict(r.labels),
                        values=dict(r.values),
                        state=row.get("state"),
                        reason=row.get("state_reason"),
                        useful_ratio=row.get("useful_ratio"),
                        attribution={
                            k: str(row[k]) for k in ATTRIBUTION if row.get(k) not in (None, "")
                        },
                    )
                )
            collectors = []
            if self._stats is not None:
                for s in self._stats.collectors.values():
                    collectors.append(
                        CollectorHealth(
                            s.name,
                            s.last_status,
                            s.last_duration_s,
                            s.errors_total,
                            s.timeouts_total,
                            s.last_error,
                            s.last_success_ns,
                            s.endpoints,
                            tuple(sorted((c, e, n) for (c, e), n in s.call_errors.items())),
                        )
                    )
            lag = None
            if self._ts is not None and self._last_flush_ns is not None:
                lag = (self._ts - self._last_flush_ns) / NS
            return LiveSnapshot(
                ts=self._ts,
                gpus=gpus,
                processes=[ProcessNow(dict(r.labels), dict(r.values)) for r in self._processes],
                hosts=[ProcessNow(dict(r.labels), dict(r.values)) for r in self._hosts],
                events=[ProcessNow(dict(r.labels), dict(r.values)) for r in self._events],
                collectors=collectors,
                waste=[
                    WasteCounter(dict(labels), cause, seconds, kind)
                    for (labels, cause, kind), seconds in sorted(self._waste.items())
                ],
                findings=list(self._findings),
                findings_ts=self._findings_ts,
                state_window_s=self.state_window_s,
                store=dict(self._store),
                store_lag_s=lag,
            )

    def release(self) -> None:
        """Hand back what the recent window's DuckDB connection holds between refreshes (its
        readings stay; the next refresh opens a new connection). For an agent nobody views,
        where refreshes are a minute apart."""
        self.window.release()

    def close(self) -> None:
        self.window.close()


def _fresher(row: Mapping[str, Any], have: Mapping[str, Any], closed_before: int) -> bool:
    """Whether `row` shows a GPU's state better than `have`: closed beats filling, then newer."""
    row_closed, have_closed = row["start_ns"] < closed_before, have["start_ns"] < closed_before
    if row_closed != have_closed:
        return bool(row_closed)
    return bool(row["start_ns"] > have["start_ns"])


def _gpu_order(labels: Mapping[str, str]) -> tuple[str, int, str, str]:
    index = str(labels.get("gpu_index", ""))
    return (
        str(labels.get("host", "")),
        int(index) if index.isdigit() else 1 << 30,
        index,
        str(labels.get("mig_instance", "")),
    )
