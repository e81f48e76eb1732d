"""Fetching a dcgm-exporter page from a real loopback server that misbehaves: the deadline
covers the whole read, the byte limit the whole page, and a scraper stops at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.faults import FaultServer

from gpulens.clock import SystemClock
from gpulens.collect.dcgm.collector import DcgmExporterCollector
from gpulens.collect.dcgm.scrape import DeadlinePassed, PageTooLarge, Scraper, get_page
from gpulens.errors import CollectError

T4 = "data/telemetry/cncf_k8s-ai-conformance/v1.35/ericsson-ccd/accelerator_metrics.prom"


@pytest.fixture
def server(shared: Path) -> Iterator[FaultServer]:
    with FaultServer(page=(shared / T4).read_text(encoding="utf-8"), slow_every_s=0.1) as s:
        yield s


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)) as c:
        yield c


def test_a_good_page_is_read_whole(server: FaultServer, client: httpx.Client) -> None:
    assert get_page(client, server.url("ok"), 2.0, 1 << 20) == server.page


@pytest.mark.parametrize("mode", ["slow", "hang"])
def test_the_deadline_covers_the_whole_read(
    mode: str, server: FaultServer, client: httpx.Client
) -> None:
    # "slow" sends a line every 0.1 s, so no single read ever waits long; "hang" never answers
    started = time.monotonic()
    with pytest.raises(DeadlinePassed) as info:
        get_page(client, server.url(mode), 0.5, 1 << 20)
    assert time.monotonic() - started < 1.0
    assert server.url(mode) in str(info.value) and "dcgm.timeout_seconds" in str(info.value)


def test_an_endless_page_stops_at_the_byte_limit(server: FaultServer, client: httpx.Client) -> None:
    started = time.monotonic()
    with pytest.raises(PageTooLarge) as info:
        get_page(client, server.url("huge"), 10.0, 1 << 20)
    assert time.monotonic() - started < 2.0
    assert "dcgm.max_page_bytes" in str(info.value) and "1,048,576" in str(info.value)


def test_a_declared_length_past_the_limit_is_refused_unread(
    server: FaultServer, client: httpx.Client
) -> None:
    with pytest.raises(PageTooLarge, match="declares 1,073,741,824 bytes"):
        get_page(client, server.url("big"), 10.0, 1 << 20)


def test_a_deadline_or_size_failure_is_not_retried(server: FaultServer) -> None:
    c = DcgmExporterCollector(
        [server.url("hang"), server.url("huge")],
        timeout_s=0.3,
        retries=2,
        backoff_s=0.0,
        max_page_bytes=1 << 20,
    )
    try:
        deadline = time.monotonic() + 5
        while min(c.errors.values()) < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.hits["hang"] == 1 and server.hits["huge"] == 1
        with pytest.raises(CollectError, match="every endpoint is failing"):
            c.collect(time.time_ns())
        health = {h.endpoint: h for h in c.endpoint_health()}
        assert "0.3 s" in str(health[server.url("hang")].last_error)
        assert "max_page_bytes" in str(health[server.url("huge")].last_error)
    finally:
        c.close()


def test_closing_aborts_a_request_in_flight(server: FaultServer) -> None:
    scraper = Scraper(
        server.url("hang"),
        host=None,
        clock=SystemClock(),
        timeout_s=30.0,
        retries=0,
        backoff_s=0.0,
        transport=None,
        thread_name="test-scraper",
    )
    deadline = time.monotonic() + 5
    while server.hits["hang"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    scraper.close(2.0)
    assert time.monotonic() - started < 0.5
    assert not any(t.name == "test-scraper" for t in threading.enumerate())


def test_endpoint_labels_and_errors_carry_no_password(server: FaultServer) -> None:
    url = server.url("garbage").replace("http://", "http://admin:hunter2@")
    c = DcgmExporterCollector([url], timeout_s=1.0, backoff_s=0.0)
    try:
        deadline = time.monotonic() + 5
        while c.errors[url] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        (health,) = c.endpoint_health()
        assert health.endpoint == server.url("garbage")
        assert "hunter2" not in str(health.last_error)
    finally:
        c.close()
