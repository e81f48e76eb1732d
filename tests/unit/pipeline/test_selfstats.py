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


def test_up_and_last_success_per_collector_and_per_endpoint() -> None:
    from gpulens.collect.base import EndpointHealth

    stats = SelfStats(["dcgm"])
    stats.record(_tick(S, dcgm=CollectorOutcome("ok", 0.01, 3)))
    stats.record(_tick(2 * S, dcgm=CollectorOutcome("error", 0.01, 0, "every endpoint fails")))
    stats.record_endpoints(
        "dcgm",
        [
            EndpointHealth("http://a:9400/metrics", False, 4, S, "refused"),
            EndpointHealth("http://b:9400/metrics", None, 0, None, None),
        ],
    )
    _, dcgm, a, b = stats.readings(2 * S, "node1")
    assert dcgm.values["gpulens_collector_up"] == 0.0
    assert dcgm.values["gpulens_collector_errors_total"] == 1.0
    assert dcgm.values["gpulens_collector_last_success_timestamp_seconds"] == 1.0
    assert a.labels["endpoint"] == "http://a:9400/metrics" and a.labels["collector"] == "dcgm"
    assert a.values == {
        "gpulens_collector_endpoint_up": 0.0,
        "gpulens_collector_endpoint_errors_total": 4.0,
        "gpulens_collector_endpoint_last_success_timestamp_seconds": 1.0,
    }
    assert b.values["gpulens_collector_endpoint_up"] == 0.0  # not scraped yet: not up
    assert "gpulens_collector_endpoint_last_success_timestamp_seconds" not in b.values
    for reading in (dcgm, a, b):
        assert set(reading.values) <= SELF_METRICS
