"""DcgmExporterCollector: background scrapes, staleness, retries, failures, a real local server."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from gpulens.clock import FakeClock
from gpulens.collect.base import Collector
from gpulens.collect.dcgm.collector import DcgmExporterCollector
from gpulens.errors import CollectError, ConfigError
from gpulens.model import Kind, Reading

T4 = "data/telemetry/cncf_k8s-ai-conformance/v1.35/ericsson-ccd/accelerator_metrics.prom"
URL = "http://node1:9400/metrics"
S = 1_000_000_000


def _until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


@pytest.fixture
def page(shared: Path) -> str:
    return (shared / T4).read_text(encoding="utf-8")


def _collector(
    handler: Callable[[httpx.Request], httpx.Response], **kw: object
) -> DcgmExporterCollector:
    kw.setdefault("clock", FakeClock(100 * S))
    kw.setdefault("backoff_s", 0.0)
    return DcgmExporterCollector([URL], transport=httpx.MockTransport(handler), **kw)  # type: ignore[arg-type]


def test_is_a_collector(page: str) -> None:
    c = _collector(lambda r: httpx.Response(200, text=page))
    try:
        assert isinstance(c, Collector) and c.name == "dcgm"
    finally:
        c.close()


def test_collect_returns_latest_scrape_once_stamped_with_its_time(page: str) -> None:
    clock = FakeClock(100 * S)
    c = _collector(lambda r: httpx.Response(200, text=page), clock=clock)
    try:
        _until(lambda: c.scrapes[URL] == 1)
        clock.advance(S)
        out = c.collect(clock.now_ns())
        gpus = [r for r in out if r.kind is Kind.GPU]
        (gpu,) = gpus
        assert gpu.ts == 100 * S  # the scrape's own time, not the tick's
        assert gpu.values["gpu_util_ratio"] == pytest.approx(0.91)
        (ev,) = [r for r in out if r.kind is Kind.EVENT]
        assert ev.labels["message"] == "NVIDIA driver 590.48.01"
        assert ev.labels["source"] == "dcgm"
        # the collect triggered the next scrape; until it lands nothing is returned twice
        _until(lambda: c.scrapes[URL] == 2)
        second = c.collect(clock.now_ns() + S)
        assert [r.kind for r in second] == [Kind.GPU]  # driver unchanged: no second event
        assert c.collect(clock.now_ns() + 2 * S) == [] or c.scrapes[URL] == 3
    finally:
        c.close()


def test_stale_scrapes_are_dropped(page: str) -> None:
    clock = FakeClock(100 * S)
    c = _collector(lambda r: httpx.Response(200, text=page), clock=clock)
    try:
        _until(lambda: c.scrapes[URL] == 1)
        c.collect(200 * S)  # takes scrape 1, asks for scrape 2 (stamped 100 s by the clock)
        _until(lambda: c.scrapes[URL] == 2)
        # ticks 1 s apart → max age 2 s; scrape 2 is 101 s old: a stuck scrape, dropped
        assert c.collect(201 * S) == []
        assert c.stale >= 1
    finally:
        c.close()


def test_unreachable_endpoint_is_counted_and_makes_the_collector_down() -> None:
    calls: list[int] = []

    def down(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        raise httpx.ConnectError("connection refused", request=request)

    c = _collector(down, retries=2)
    try:
        _until(lambda: c.errors[URL] == 1)
        assert len(calls) == 3  # one attempt plus two retries
        with pytest.raises(CollectError, match="every endpoint is failing") as info:
            c.collect(101 * S)
        assert URL in str(info.value) and "ConnectError" in str(info.value)
        assert c.last_error is not None
        assert URL in c.last_error and "ConnectError" in c.last_error
        (health,) = c.endpoint_health()
        assert (health.endpoint, health.up, health.errors_total) == (URL, False, 1)
        assert health.last_success_ns is None
    finally:
        c.close()


def test_retry_recovers_after_a_transient_failure(page: str) -> None:
    answers = iter([httpx.Response(503), httpx.Response(200, text=page)])
    c = _collector(lambda r: next(answers), retries=1)
    try:
        _until(lambda: c.scrapes[URL] == 1)
        assert c.errors[URL] == 0
        assert any(r.kind is Kind.GPU for r in c.collect(101 * S))
    finally:
        c.close()


def test_garbage_page_is_a_counted_error() -> None:
    c = _collector(lambda r: httpx.Response(200, text="<html>oops</html>"))
    try:
        _until(lambda: c.errors[URL] == 1)
        with pytest.raises(CollectError, match="line 1"):
            c.collect(101 * S)
        assert "line 1" in (c.last_error or "")
    finally:
        c.close()


def test_collect_does_not_wait_for_a_slow_endpoint(page: str) -> None:
    release = threading.Event()

    def slow(request: httpx.Request) -> httpx.Response:
        release.wait(5)
        return httpx.Response(200, text=page)

    c = _collector(slow)
    try:
        t0 = time.monotonic()
        assert c.collect(101 * S) == []
        assert time.monotonic() - t0 < 0.5
    finally:
        release.set()
        c.close()


def test_close_stops_threads(page: str) -> None:
    before = set(threading.enumerate())
    c = _collector(lambda r: httpx.Response(200, text=page))
    _until(lambda: c.scrapes[URL] == 1)
    mine = [
        t for t in threading.enumerate() if t not in before and t.name.startswith("gpulens-dcgm-")
    ]
    assert mine, "the collector scrapes in its own thread"
    c.close()
    c.close()  # idempotent
    assert not any(t.is_alive() for t in mine)


@pytest.mark.parametrize(
    "kw",
    [
        {"urls": []},
        {"urls": "http://x/metrics"},
        {"urls": ["node1:9400"]},
        {"urls": [URL], "timeout_s": 0},
    ],
)
def test_bad_settings_are_config_errors(kw: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        DcgmExporterCollector(**kw)  # type: ignore[arg-type]


@pytest.fixture
def local_server(page: str) -> Iterator[str]:
    body = page.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def test_real_http_server_on_loopback(local_server: str) -> None:
    c = DcgmExporterCollector([local_server], host="fallback", timeout_s=2.0)
    try:
        _until(lambda: c.scrapes[local_server] >= 1)
        out: list[Reading] = c.collect(time.time_ns())
        (gpu,) = [r for r in out if r.kind is Kind.GPU]
        assert gpu.labels["host"] == "cp-bm14r7"
        assert gpu.values["tensor_active_ratio"] == pytest.approx(0.005822)
        assert c.errors[local_server] == 0
    finally:
        c.close()
