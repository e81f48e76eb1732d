"""Fetching dcgm-exporter pages: one HTTP GET with retries, and a background scraper per URL.

`fetch` is the only network call. `Scraper` owns one URL, one httpx.Client and one daemon
thread; the thread scrapes when `trigger()` is called (and once at start), parses the page
(pure, `parse.parse_exposition`) and keeps the latest result for `take()`. Nothing here raises
into the caller's thread: failures are counted and the last one is kept as text.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from gpulens.clock import Clock
from gpulens.collect.dcgm.parse import ParseResult, parse_exposition
from gpulens.errors import GpulensError, SourceUnavailable


def fetch(
    client: httpx.Client,
    url: str,
    retries: int,
    backoff_s: float,
    wait: Callable[[float], bool],
) -> str:
    """GET `url` → the page text; retry `retries` times, backing off `backoff_s` × 2**attempt.

    `wait(seconds)` sleeps between attempts and returns False to abandon (shutdown). Raises
    SourceUnavailable, naming the URL and the last failure, when every attempt failed.
    """
    last: Exception | None = None
    for attempt in range(retries + 1):
        try:
            response = client.get(url)
            response.raise_for_status()
            return response.text
        except httpx.HTTPError as exc:
            last = exc
        if attempt < retries and not wait(backoff_s * (2**attempt)):
            break
    raise SourceUnavailable(
        f"{url}: dcgm-exporter did not answer ({type(last).__name__}: {last}) after "
        f"{retries + 1} attempt(s); expected its /metrics page: check that dcgm-exporter runs "
        "and listens there (default port 9400) and that this host may reach it"
    )


@dataclass(frozen=True, slots=True)
class Scrape:
    """One completed scrape: when it was taken (UTC ns) and what its page held."""

    ts_ns: int
    result: ParseResult


class Scraper:
    """Scrapes one URL in a daemon thread, on demand; `take()` hands each result out once."""

    def __init__(
        self,
        url: str,
        *,
        host: str | None,
        clock: Clock,
        timeout_s: float,
        retries: int,
        backoff_s: float,
        transport: httpx.BaseTransport | None,
        thread_name: str,
    ) -> None:
        self.url = url
        self.scrapes = 0
        self.errors = 0
        self.last_error: str | None = None
        self._host = host
        self._clock = clock
        self._retries = retries
        self._backoff_s = backoff_s
        self._client = httpx.Client(
            transport=transport, timeout=httpx.Timeout(timeout_s), follow_redirects=True
        )
        self._lock = threading.Lock()
        self._latest: Scrape | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._wake.set()  # the first scrape starts at once
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    def trigger(self) -> None:
        """Ask for a fresh scrape (returns at once; a scrape in flight finishes first)."""
        self._wake.set()

    def take(self) -> Scrape | None:
        """The latest completed scrape not handed out before, or None."""
        with self._lock:
            latest, self._latest = self._latest, None
        return latest

    def close(self, join_s: float) -> None:
        """Stop the thread (waiting up to `join_s`) and close the HTTP client."""
        self._stop.set()
        self._wake.set()
        self._thread.join(join_s)
        self._client.close()

    def _wait(self, seconds: float) -> bool:
        return not self._stop.wait(seconds)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                break
            self._scrape_once()

    def _scrape_once(self) -> None:
        try:
            text = fetch(self._client, self.url, self._retries, self._backoff_s, self._wait)
            ts = self._clock.now_ns()
            result = parse_exposition(text, self.url, ts, self._host)
        except GpulensError as exc:
            self._fail(str(exc))
            return
        except Exception as exc:  # never let the thread die: count it like any failure
            self._fail(f"{self.url}: unexpected {type(exc).__name__}: {exc}")
            return
        with self._lock:
            self._latest = Scrape(ts, result)
            self.scrapes += 1

    def _fail(self, message: str) -> None:
        with self._lock:
            self.errors += 1
            self.last_error = message
