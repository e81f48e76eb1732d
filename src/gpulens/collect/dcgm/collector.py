"""DcgmExporterCollector: gpu readings from one or more dcgm-exporter `/metrics` endpoints.

Each URL is scraped in its own background thread (`scrape.Scraper`), so `collect(now_ns)`
never waits on the network: it hands out the readings of the latest scrape that completed
since the previous call, stamped with that scrape's own time, and asks for the next scrape.
A scrape older than about two collect intervals is dropped as stale, and no scrape is handed
out twice. An endpoint that is down, slow or serves garbage is counted in `errors[url]` (the
message in `last_error`). `collect` raises CollectError only when every endpoint's last
scrape failed, so the collector reads as down; `endpoint_health()` gives each URL's own state.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import httpx

from gpulens.clock import Clock, SystemClock
from gpulens.collect.base import EndpointHealth
from gpulens.collect.dcgm.scrape import MAX_PAGE_BYTES, Scraper
from gpulens.errors import CollectError, ConfigError
from gpulens.model import Kind, Reading, event

#: how long `close` waits in all for the scraper threads (their requests are aborted first)
CLOSE_S = 1.0


class DcgmExporterCollector:
    """Collector over dcgm-exporter endpoints (`name` "dcgm"; see docs/collectors/dcgm.md).

    `urls`: full `/metrics` URLs (e.g. "http://node1:9400/metrics"). `host` labels GPUs whose
    series carry no Hostname label. `transport` replaces httpx's network transport (tests use
    `httpx.MockTransport`). `timeout_s` bounds one HTTP attempt from connect to last byte, and
    `max_page_bytes` its page; `retries` more attempts follow a failure to connect or an error
    status, `backoff_s` × 2**attempt apart. `clock` stamps scrapes (UTC ns).
    `stale_after` × the last collect interval is the oldest scrape `collect` still returns.
    """

    def __init__(
        self,
        urls: Sequence[str],
        host: str | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = 2.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        clock: Clock | None = None,
        name: str = "dcgm",
        stale_after: float = 2.0,
        max_page_bytes: int = MAX_PAGE_BYTES,
    ) -> None:
        if isinstance(urls, str) or not urls:
            raise ConfigError(
                f"dcgm: urls must be a non-empty list of dcgm-exporter /metrics URLs, got "
                f"{urls!r}: for example ['http://localhost:9400/metrics']"
            )
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ConfigError(
                    f"dcgm: {url!r} is not an http(s) URL: give dcgm-exporter's metrics "
                    "endpoint, for example 'http://localhost:9400/metrics'"
                )
        if timeout_s <= 0 or retries < 0 or backoff_s < 0 or stale_after <= 0 or max_page_bytes < 1:
            raise ConfigError(
                f"dcgm: timeout_s ({timeout_s}), stale_after ({stale_after}) and max_page_bytes "
                f"({max_page_bytes}) must be > 0, retries ({retries}) and backoff_s ({backoff_s}) "
                ">= 0"
            )
        self.name = name
        self.host = host
        self.stale = 0
        self.skipped: dict[str, int] = {}
        self._clock: Clock = clock or SystemClock()
        self._stale_after = stale_after
        self._last_collect: int | None = None
        self._drivers: dict[tuple[str, str], str] = {}
        self._closed = False
        self._scrapers = [
            Scraper(
                url,
                host=host,
                clock=self._clock,
                timeout_s=timeout_s,
                retries=retries,
                backoff_s=backoff_s,
                transport=transport,
                thread_name=f"gpulens-{name}-{i}",
                max_bytes=max_page_bytes,
            )
            for i, url in enumerate(urls)
        ]

    @property
    def errors(self) -> dict[str, int]:
        """Failed scrapes (after retries) per URL."""
        return {s.url: s.errors for s in self._scrapers}

    @property
    def scrapes(self) -> dict[str, int]:
        """Completed scrapes per URL."""
        return {s.url: s.scrapes for s in self._scrapers}

    @property
    def last_error(self) -> str | None:
        """The message of the most recent failure of any URL (None when none failed yet)."""
        messages = [s.last_error for s in self._scrapers if s.last_error]
        return messages[-1] if messages else None

    def endpoint_health(self) -> list[EndpointHealth]:
        """Each URL's state (named without its user and password): up (last scrape good),
        failed scrapes, last success, last error."""
        return [
            EndpointHealth(s.name, s.up, s.errors, s.last_success_ns, s.last_error)
            for s in self._scrapers
        ]

    def collect(self, now_ns: int) -> list[Reading]:
        """Readings of the scrapes completed since the last call; starts the next scrapes.

        Raises CollectError, quoting each URL's last failure, when every URL's last scrape
        failed."""
        max_age = None
        if self._last_collect is not None and now_ns > self._last_collect:
            max_age = self._stale_after * (now_ns - self._last_collect)
        self._last_collect = now_ns
        out: list[Reading] = []
        for scraper in self._scrapers:
            scrape = scraper.take()
            if not self._closed:
                scraper.trigger()
            if scrape is None:
                continue
            if max_age is not None and now_ns - scrape.ts_ns > max_age:
                self.stale += 1
                continue
            for reason, count in scrape.result.skipped.items():
                self.skipped[reason] = self.skipped.get(reason, 0) + count
            for reading in scrape.result.readings:
                if reading.kind is Kind.EVENT:
                    out.extend(self._driver_event(scraper.url, reading))
                else:
                    out.append(reading)
        if not out and all(s.up is False for s in self._scrapers):
            failures = "; ".join(str(s.last_error) for s in self._scrapers)
            raise CollectError(f"dcgm: every endpoint is failing: {failures}")
        return out

    def _driver_event(self, url: str, reading: Reading) -> list[Reading]:
        """The driver-version event at first sight and when it changes, per URL and host."""
        host = reading.label("host")
        version = reading.label("driver_version")
        key = (url, host)
        previous = self._drivers.get(key)
        if previous == version:
            return []
        self._drivers[key] = version
        message = (
            f"NVIDIA driver {version}"
            if previous is None
            else f"NVIDIA driver changed from {previous} to {version}"
        )
        labels = {"host": host, "source": self.name} if host else {"source": self.name}
        return [event(reading.ts, "driver_version", message, labels)]

    def close(self) -> None:
        """Stop the scraper threads and close their HTTP clients (idempotent)."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + CLOSE_S
        for scraper in self._scrapers:
            scraper.close(max(0.0, deadline - time.monotonic()))
