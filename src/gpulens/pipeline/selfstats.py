"""The agent's own health: per-collector timings, failures and volume, tick lag, store stats.

`SelfStats.record(tick_result)` folds each tick in, `record_endpoints` the per-endpoint health
of a collector that reads several (dcgm URLs), `record_call_errors` the failed calls of one that
counts them (NVML); `readings(ts, host)` turns the state into
Kind.HOST readings labelled `source="gpulens"` (agent-wide values), additionally
`collector=<name>` (per-collector values) and `endpoint=<url>` (per-endpoint values), which
the exporter publishes as Prometheus self-metrics. The metrics are declared in
`gpulens.catalog.SELF_METRICS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpulens import catalog
from gpulens.collect.base import EndpointHealth
from gpulens.model import Kind, Reading

if TYPE_CHECKING:
    from gpulens.pipeline.tick import TickResult

SELF_METRICS: frozenset[str] = frozenset(m.name for m in catalog.SELF_METRICS)

# The store writer's stats (WriterStats fields) → the catalog metric each one is published as.
STORE_STAT_METRICS: dict[str, str] = {
    "rows_written": "gpulens_store_rows_written_total",
    "bytes_written": "gpulens_store_written_bytes_total",
    "segments_written": "gpulens_store_segments_written_total",
    "flush_errors": "gpulens_store_flush_errors_total",
    "dropped_rows": "gpulens_store_dropped_rows_total",
    "rejected_rows": "gpulens_store_rejected_rows_total",
    "buffered_rows": "gpulens_store_buffered_rows",
    "max_buffered_rows": "gpulens_store_max_buffered_rows",
    "last_flush_seconds": "gpulens_store_last_flush_seconds",
}


@dataclass(slots=True)
class CollectorStats:
    """Running totals for one collector."""

    name: str
    last_status: str = ""
    last_duration_s: float = 0.0
    last_readings: int = 0
    last_error: str | None = None
    readings_total: int = 0
    errors_total: int = 0
    timeouts_total: int = 0
    skipped_total: int = 0
    last_success_ns: int | None = None
    endpoints: tuple[EndpointHealth, ...] = field(default_factory=tuple)
    #: failed calls of a collector that counts them (NVML), by (call, error name)
    call_errors: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def up(self) -> bool:
        """Whether the last run succeeded (a skipped tick keeps the run still going as down)."""
        return self.last_status == "ok"


class SelfStats:
    """Health of the tick loop, updated once per tick."""

    def __init__(self, collectors: Iterable[str]) -> None:
        self.collectors: dict[str, CollectorStats] = {n: CollectorStats(n) for n in collectors}
        self.ticks_total = 0
        self.ticks_missed_total = 0
        self.flushes_total = 0
        self.sink_errors_total = 0
        self.last_sink_error: str | None = None
        self.last_tick_ns: int | None = None
        self.last_lag_s = 0.0

    def record(self, result: TickResult) -> None:
        """Fold one tick's outcomes into the totals."""
        self.ticks_total += 1
        self.ticks_missed_total += result.missed_ticks
        self.flushes_total += int(result.flushed)
        if result.sink_error is not None:
            self.sink_errors_total += 1
            self.last_sink_error = result.sink_error
        self.last_tick_ns = result.ts
        self.last_lag_s = result.lag_s
        for name, outcome in result.outcomes.items():
            stats = self.collectors.get(name)
            if stats is None:
                stats = self.collectors[name] = CollectorStats(name)
            stats.last_status = outcome.status
            stats.last_error = outcome.error
            if outcome.status == "ok":
                stats.last_success_ns = result.ts
            if outcome.status == "skipped":
                stats.skipped_total += 1
                continue
            stats.last_duration_s = outcome.duration_s
            stats.last_readings = outcome.readings
            stats.readings_total += outcome.readings
            if outcome.status == "error":
                stats.errors_total += 1
            elif outcome.status == "timeout":
                stats.timeouts_total += 1

    def record_endpoints(self, collector: str, health: Sequence[EndpointHealth]) -> None:
        """The current health of each endpoint of `collector`."""
        stats = self.collectors.get(collector)
        if stats is None:
            stats = self.collectors[collector] = CollectorStats(collector)
        stats.endpoints = tuple(health)

    def record_call_errors(self, collector: str, counts: Mapping[tuple[str, str], int]) -> None:
        """The failed calls of `collector` so far, by (call, error name)."""
        stats = self.collectors.get(collector)
        if stats is None:
            stats = self.collectors[collector] = CollectorStats(collector)
        if counts != stats.call_errors:
            stats.call_errors = dict(counts)

    def readings(
        self, ts: int, host: str, store: Mapping[str, float] | None = None
    ) -> list[Reading]:
        """The state as HOST readings; `store` (WriterStats fields) is added as
        the STORE_STAT_METRICS they map to."""
        agent: dict[str, float] = {
            "gpulens_ticks_total": float(self.ticks_total),
            "gpulens_ticks_missed_total": float(self.ticks_missed_total),
            "gpulens_tick_lag_seconds": self.last_lag_s,
            "gpulens_flushes_total": float(self.flushes_total),
            "gpulens_sink_errors_total": float(self.sink_errors_total),
        }
        for key, value in (store or {}).items():
            if key in STORE_STAT_METRICS:
                agent[STORE_STAT_METRICS[key]] = float(value)
        base = {"host": host, "source": "gpulens"}
        out = [Reading(Kind.HOST, ts, base, agent)]
        for stats in self.collectors.values():
            values = {
                "gpulens_collector_up": float(stats.up),
                "gpulens_collector_duration_seconds": stats.last_duration_s,
                "gpulens_collector_readings": float(stats.last_readings),
                "gpulens_collector_readings_total": float(stats.readings_total),
                "gpulens_collector_errors_total": float(stats.errors_total),
                "gpulens_collector_timeouts_total": float(stats.timeouts_total),
                "gpulens_collector_skipped_total": float(stats.skipped_total),
            }
            if stats.last_success_ns is not None:
                values["gpulens_collector_last_success_timestamp_seconds"] = (
                    stats.last_success_ns / 1e9
                )
            labels = {**base, "collector": stats.name}
            out.append(Reading(Kind.HOST, ts, labels, values))
            for ep in stats.endpoints:
                values = {
                    "gpulens_collector_endpoint_up": float(ep.up is True),
                    "gpulens_collector_endpoint_errors_total": float(ep.errors_total),
                }
                if ep.last_success_ns is not None:
                    values["gpulens_collector_endpoint_last_success_timestamp_seconds"] = (
                        ep.last_success_ns / 1e9
                    )
                out.append(Reading(Kind.HOST, ts, {**labels, "endpoint": ep.endpoint}, values))
        return out
