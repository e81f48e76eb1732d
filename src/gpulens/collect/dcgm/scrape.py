"""Fetching dcgm-exporter pages: bounded HTTP GETs, and a background scraper per URL.

`fetch` is the only network call. One attempt has a deadline that covers everything from the
connect to the last byte (a watchdog shuts the socket down when it passes, so a server that
trickles one line a second or never answers cannot hold it longer), and a byte limit on the
page as decoded (a huge or endless page is cut off at the limit, never held in memory).
`Scraper` owns one URL, one httpx.Client and one daemon thread; the thread scrapes when
`trigger()` is called (and once at start), parses the page (pure, `parse.parse_exposition`)
and keeps the latest result for `take()`. Nothing here raises into the caller's thread:
failures are counted and the last one is kept as text, with the time of the last success.
A URL's user and password never appear in a message or label (`public_url`).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from gpulens.clock import Clock
from gpulens.collect.dcgm.parse import ParseResult, parse_exposition
from gpulens.errors import GpulensError, SourceUnavailable

#: default byte limit of one page: real pages are a few kB per GPU, so this is hundreds of
#: times a full 8-GPU node with MIG
MAX_PAGE_BYTES = 8 * 1024 * 1024


class PageTooLarge(SourceUnavailable):
    """The page passed the byte limit (not retried: it would be as large again)."""


class DeadlinePassed(SourceUnavailable):
    """No complete page within the deadline (not retried: the next scrape tries again)."""


class Cutoff:
    """Shuts down the socket of one request when its deadline passes or `fire()` is called,
    so that a read blocked inside the HTTP client returns at once.

    `trace` is an httpcore trace hook: it learns the request's socket as soon as the
    connection is made (and again after a TLS handshake)."""

    def __init__(self, seconds: float) -> None:
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self.fired = False
        self._timer = threading.Timer(seconds, self.fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                with self._lock:
                    self._socket = sock
                    if self.fired:
                        _shut(sock)

    def fire(self) -> None:
        with self._lock:
            self.fired = True
            if self._socket is not None:
                _shut(self._socket)

    def cancel(self) -> None:
        self._timer.cancel()


def public_url(url: str) -> str:
    """`url` without its user and password, for messages and metric labels."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return url
    return str(parsed.copy_with(userinfo=b"")) if parsed.userinfo else url


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


def get_page(
    client: httpx.Client,
    url: str,
    deadline_s: float,
    max_bytes: int,
    on_cutoff: Callable[[Cutoff | None], None] | None = None,
) -> str:
    """One GET of `url` → the page text, within `deadline_s` seconds in all and `max_bytes`
    bytes of body. Raises DeadlinePassed, PageTooLarge, or httpx.HTTPError.

    `on_cutoff` is told the attempt's Cutoff (and None when it ends), so that another thread
    can abort the request."""
    started = time.monotonic()
    name = public_url(url)
    cutoff = Cutoff(deadline_s)
    if on_cutoff is not None:
        on_cutoff(cutoff)
    size = 0
    try:
        with client.stream(
            "GET", url, timeout=httpx.Timeout(deadline_s), extensions={"trace": cutoff.trace}
        ) as response:
            response.raise_for_status()
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise _too_large(name, max_bytes, f"it declares {int(declared):,} bytes")
            chunks: list[bytes] = []
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise _too_large(name, max_bytes, "it goes on past that")
                if cutoff.fired:
                    break
                chunks.append(chunk)
            if cutoff.fired:
                raise httpx.ReadTimeout("deadline passed")
            encoding = response.encoding or "utf-8"
    except httpx.HTTPError:
        if cutoff.fired or time.monotonic() - started >= deadline_s:
            raise DeadlinePassed(
                f"{name}: no complete page within {deadline_s:g} s (dcgm.timeout_seconds; "
                f"{size:,} bytes by then): check that dcgm-exporter runs there and is not "
                "overloaded, or raise dcgm.timeout_seconds"
            ) from None
        raise
    finally:
        cutoff.cancel()
        if on_cutoff is not None:
            on_cutoff(None)
    return b"".join(chunks).decode(encoding, errors="replace")


def _too_large(url: str, limit: int, detail: str) -> PageTooLarge:
    return PageTooLarge(
        f"{url}: the page is larger than {limit:,} bytes, the limit dcgm.max_page_bytes "
        f"({detail}); dcgm-exporter serves a few kB per GPU: check that the URL is its "
        "/metrics page, or raise dcgm.max_page_bytes"
    )


def fetch(
    client: httpx.Client,
    url: str,
    retries: int,
    backoff_s: float,
    wait: Callable[[float], bool],
    *,
    deadline_s: float = 2.0,
    max_bytes: int = MAX_PAGE_BYTES,
    on_cutoff: Callable[[Cutoff | None], None] | None = None,
) -> str:
    """GET `url` → the page text; retry `retries` times, backing off `backoff_s` × 2**attempt.

    Each attempt is `get_page` (deadline and byte limit). A page past the limit or past the
    deadline is not retried. `wait(seconds)` sleeps between attempts and returns False to
    abandon (shutdown). Raises SourceUnavailable, naming the URL and the last failure.
    """
    last: Exception | None = None
    for attempt in range(retries + 1):
        try:
            return get_page(client, url, deadline_s, max_bytes, on_cutoff)
        except httpx.HTTPError as exc:
            last = exc
        if attempt < retries and not wait(backoff_s * (2**attempt)):
            break
    name = public_url(url)
    raise SourceUnavailable(
        f"{name}: dcgm-exporter did not answer ({type(last).__name__}: "
        f"{str(last).replace(url, name)}) after "
        f"{retries + 1} attempt(s); expected its /metrics page: check that dcgm-exporter runs "
        "and listens there (default port 9400) and that this host may reach it"
    )


@dataclass(frozen=True, slots=True)
class Scrape:
    """One completed scrape: when it was taken (UTC ns) and what its page held."""

    ts_ns: int
    result: ParseResult


class Scraper:
    """Scrapes one URL in a daemon thread, on demand; `take()` hands each result out once.

    `up` is whether the last finished scrape succeeded (None before the first), `errors` the
    failed scrapes, `last_success_ns` the clock time of the last good one."""

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
        max_bytes: int = MAX_PAGE_BYTES,
    ) -> None:
        self.url = url
        self.name = public_url(url)
        self.scrapes = 0
        self.errors = 0
        self.up: bool | None = None
        self.last_error: str | None = None
        self.last_success_ns: int | None = None
        self._host = host
        self._clock = clock
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes
        self._retries = retries
        self._backoff_s = backoff_s
        self._client = httpx.Client(
            transport=transport,
            timeout=httpx.Timeout(timeout_s),
            follow_redirects=True,
            limits=httpx.Limits(max_keepalive_connections=0),  # a fresh socket the cutoff sees
        )
        self._lock = threading.Lock()
        self._latest: Scrape | None = None
        self._cutoff: Cutoff | None = None
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
        """Stop the thread, aborting a request in flight, wait up to `join_s` for it, and close
        the HTTP client once the thread is done (a thread still running is a daemon)."""
        self._stop.set()
        self._wake.set()
        with self._lock:
            cutoff = self._cutoff
        if cutoff is not None:
            cutoff.fire()
        self._thread.join(join_s)
        if not self._thread.is_alive():
            self._client.close()

    def _wait(self, seconds: float) -> bool:
        return not self._stop.wait(seconds)

    def _set_cutoff(self, cutoff: Cutoff | None) -> None:
        with self._lock:
            self._cutoff = cutoff
        if cutoff is not None and self._stop.is_set():
            cutoff.fire()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                break
            self._scrape_once()

    def _scrape_once(self) -> None:
        try:
            text = fetch(
                self._client,
                self.url,
                self._retries,
                self._backoff_s,
                self._wait,
                deadline_s=self._timeout_s,
                max_bytes=self._max_bytes,
                on_cutoff=self._set_cutoff,
            )
            ts = self._clock.now_ns()
            result = parse_exposition(text, self.name, ts, self._host)
        except GpulensError as exc:
            self._fail(str(exc))
            return
        except Exception as exc:  # never let the thread die: count it like any failure
            self._fail(f"{self.name}: unexpected {type(exc).__name__}: {exc}")
            return
        with self._lock:
            self._latest = Scrape(ts, result)
            self.scrapes += 1
            self.up = True
            self.last_success_ns = ts

    def _fail(self, message: str) -> None:
        with self._lock:
            self.errors += 1
            self.up = False
            self.last_error = message
