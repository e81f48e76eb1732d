"""SelfStats: totals per collector and the HOST readings they become."""

from __future__ import annotations

from gpulens.model import Kind
from gpulens.pipeline.scheduler import CollectorOutcome, TickResult
from gpulens.pipeline.selfstats import SELF_METRICS, SelfStats

S = 10**9


def _tick(ts: int, **outcomes: CollectorOutcome) -> TickResult:
    return TickResult(ts, 0.002, dict(outcomes), readings=[], flushed=ts == 2 * S, missed_ticks=1)


def test_totals_per_collector() -> None:
    stats = SelfStats(["nvml", "host"])
    stats.record(_tick(S, nvml=CollectorOutcome("ok", 0.01, 3), host=CollectorOutcome("error")))
    stats.record(_tick(2 * S, nvml=CollectorOutcome("timeout", 0.5),
                       host=CollectorOutcome("skipped")))  # fmt: skip
    nvml, host = stats.collectors["nvml"], stats.collectors["host"]
    assert (nvml.readings_total, nvml.timeouts_total, nvml.last_duration_s) == (3, 1, 0.5)
    assert (host.errors_total, host.skipped_total, host.last_status) == (1, 1, "skipped")
    assert (stats.ticks_total, stats.ticks_missed_total, stats.flushes_total) == (2, 2, 1)
    assert stats.last_tick_ns == 2 * S


def test_readings_are_host_kind_with_source_and_collector_labels() -> None:
    stats = SelfStats(["nvml"])
    stats.record(_tick(S, nvml=CollectorOutcome("ok", 0.01, 3)))
    agent, nvml = stats.readings(S, "node1", store={"segments_written": 4})
    assert agent.kind is Kind.HOST and nvml.kind is Kind.HOST
    assert agent.labels == {"host": "node1", "source": "gpulens"}
    assert nvml.labels == {"host": "node1", "source": "gpulens", "collector": "nvml"}
    assert agent.values["gpulens_tick_lag_seconds"] == 0.002
    assert agent.values["gpulens_store_segments_written_total"] == 4.0
    assert nvml.values["gpulens_collector_readings_total"] == 3.0
    assert set(nvml.values) <= SELF_METRICS
    assert set(agent.values) <= SELF_METRICS
