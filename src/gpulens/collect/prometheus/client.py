"""The Prometheus HTTP API v1 over httpx: `query_range`, `series`, `labels` and label values.

The only network code of the Prometheus source. The same API is served by Prometheus, Thanos
Query, Mimir / Cortex (`.../prometheus`) and VictoriaMetrics, so the base URL is whatever
precedes `/api/v1`. Authentication: a bearer token, or basic auth (user and password); TLS
with the system's CAs, a custom CA file, or no verification.

Each request has a deadline covering everything from the connect to the last byte (the dcgm
source's `Cutoff` shuts the socket when it passes) and a byte limit on the body. A failure
that may pass (a connection error, a 429 or 5xx, the deadline) is retried with exponential
backoff; a query the server refuses for its size (too many points or samples) raises
`TooLarge`, which the caller answers by splitting the range. Every error names the URL
without its password and says what to do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote

import httpx
import orjson

from gpulens.collect.dcgm.scrape import Cutoff, public_url
from gpulens.errors import CollectError, ConfigError, InputTooLarge, SourceUnavailable

#: default byte limit of one response: a 900 s-step week of 512 GPUs is ~15 MB per metric
MAX_RESPONSE_BYTES = 512 * 1024 * 1024
_RETRY_STATUS = frozenset({429, 502, 503, 504})
_TOO_LARGE_MARKS = (
    "exceeded maximum resolution",
    "too many samples",
    "would load too many samples",
    "the query hit the max number of",
    "maxsamples",
    "max_samples",
)


class TooLarge(CollectError):
    """The server refused a query for its size: split the range and ask again."""


@dataclass(frozen=True, slots=True)
class Auth:
    """How to authenticate and verify the server. `ca_file`: a PEM bundle to trust;
    `verify=False` turns verification off (a self-signed test server only)."""

    bearer_token: str | None = None
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None
    verify: bool = True
    headers: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Transfer:
    """Per-request limits and retries."""

    timeout_s: float = 60.0
    max_bytes: int = MAX_RESPONSE_BYTES
    retries: int = 3
    backoff_s: float = 0.5


class PrometheusClient:
    """One base URL, one httpx.Client. `transport` is injected in tests; `sleep` waits
    between retries."""

    def __init__(
        self,
        url: str,
        auth: Auth | None = None,
        transfer: Transfer | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.auth = auth or Auth()
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError):
            raise ConfigError(f"--prometheus {public_url(url)!r} is not a URL") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ConfigError(
                f"--prometheus {public_url(url)!r}: expected an http:// or https:// URL such as "
                "http://prometheus:9090"
            )
        if parsed.userinfo:  # user:password in the URL is basic auth unless auth is given
            if self.auth.username is None and not self.auth.bearer_token:
                user, _, password = parsed.userinfo.decode().partition(":")
                self.auth = replace(self.auth, username=unquote(user), password=unquote(password))
            parsed = parsed.copy_with(userinfo=b"")
        self.base = str(parsed).rstrip("/").removesuffix("/api/v1")
        self.name = self.base
        self.transfer = transfer or Transfer()
        self.requests = 0
        self.bytes_read = 0
        self._count = threading.Lock()
        self._sleep = sleep
        self._client = httpx.Client(
            transport=transport,
            auth=self._basic(),
            headers=self._headers(),
            verify=self._verify(),
            follow_redirects=True,
            limits=httpx.Limits(max_keepalive_connections=0),  # a fresh socket the cutoff sees
        )

    def _basic(self) -> httpx.BasicAuth | None:
        a = self.auth
        if a.username is None:
            return None
        return httpx.BasicAuth(a.username, a.password or "")

    def _headers(self) -> dict[str, str]:
        out = dict(self.auth.headers or {})
        if self.auth.bearer_token:
            out["Authorization"] = f"Bearer {self.auth.bearer_token}"
        return out

    def _verify(self) -> bool | str:
        if self.auth.ca_file:
            return self.auth.ca_file
        return self.auth.verify

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the API calls ---------------------------------------------------------------------

    def query_range(self, query: str, start_s: float, end_s: float, step_s: float) -> Any:
        """`/api/v1/query_range` → the `data` object (resultType matrix)."""
        params = {"query": query, "start": _num(start_s), "end": _num(end_s),
                  "step": _num(step_s)}  # fmt: skip
        return self._get("/api/v1/query_range", params)

    def query_range_body(self, query: str, start_s: float, end_s: float, step_s: float) -> bytes:
        """`/api/v1/query_range` → the raw body of a successful answer (for
        `parse.parse_matrix`); errors are raised as for `query_range`."""
        params = {"query": query, "start": _num(start_s), "end": _num(end_s),
                  "step": _num(step_s)}  # fmt: skip
        body: bytes = self._get("/api/v1/query_range", params, raw=True)
        return body

    def query(self, query: str, time_s: float) -> Any:
        """`/api/v1/query` (an instant query) → the `data` object."""
        return self._get("/api/v1/query", {"query": query, "time": _num(time_s)})

    def series(self, match: Sequence[str], start_s: float, end_s: float) -> Any:
        """`/api/v1/series` → the label sets of the series matching any of `match`."""
        params = [("match[]", m) for m in match]
        params += [("start", _num(start_s)), ("end", _num(end_s))]
        return self._get("/api/v1/series", params)

    def labels(self, start_s: float, end_s: float) -> Any:
        """`/api/v1/labels` → the label names seen in the range."""
        return self._get("/api/v1/labels", {"start": _num(start_s), "end": _num(end_s)})

    def label_values(self, label: str, start_s: float, end_s: float) -> Any:
        """`/api/v1/label/<label>/values` → that label's values in the range (`__name__`: the
        metric names)."""
        params = {"start": _num(start_s), "end": _num(end_s)}
        return self._get(f"/api/v1/label/{label}/values", params)

    # -- one request, retried ---------------------------------------------------------------

    def _get(self, path: str, params: Any, raw: bool = False) -> Any:
        t = self.transfer
        last = ""
        for attempt in range(t.retries + 1):
            try:
                return self._once(path, params, raw)
            except _Retry as exc:
                last = str(exc)
            if attempt < t.retries:
                self._sleep(t.backoff_s * (2**attempt))
        raise SourceUnavailable(
            f"{self.name}{path}: Prometheus did not answer ({last}) after {t.retries + 1} "
            "attempt(s): check the URL (the part before /api/v1), that the server runs and that "
            "this host may reach it, or raise prometheus.timeout_seconds / prometheus.retries"
        )

    def _once(self, path: str, params: Any, raw: bool = False) -> Any:
        t = self.transfer
        url = self.base + path
        cutoff = Cutoff(t.timeout_s)
        size = 0
        with self._count:
            self.requests += 1
        try:
            with self._client.stream(
                "GET", url, params=params, timeout=httpx.Timeout(t.timeout_s),
                extensions={"trace": cutoff.trace},
            ) as response:  # fmt: skip
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > t.max_bytes:
                    raise self._too_big(path, f"it declares {int(declared):,} bytes")
                chunks: list[bytes] = []
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > t.max_bytes:
                        raise self._too_big(path, "it goes on past that")
                    if cutoff.fired:
                        break
                    chunks.append(chunk)
                if cutoff.fired:
                    raise _Retry(f"no complete answer within {t.timeout_s:g} s")
                status = response.status_code
        except httpx.HTTPError as exc:
            if cutoff.fired:
                raise _Retry(f"no complete answer within {t.timeout_s:g} s") from None
            raise _Retry(
                f"{type(exc).__name__}: {str(exc).replace(url, self.name + path)}"
            ) from None
        finally:
            cutoff.cancel()
        with self._count:
            self.bytes_read += size
        body = b"".join(chunks)
        if raw and status == 200 and body.startswith(b'{"status":"success"'):
            return body
        return self._data(path, status, body)

    def _data(self, path: str, status: int, body: bytes) -> Any:
        try:
            doc = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            doc = None
        if status in _RETRY_STATUS or (status >= 500 and not isinstance(doc, dict)):
            raise _Retry(f"HTTP {status}")
        if not isinstance(doc, dict):
            raise CollectError(
                f"{self.name}{path}: HTTP {status} with a body that is not the Prometheus API's "
                f"JSON ({body[:80]!r}): check that the URL is a Prometheus, Thanos, Mimir or "
                "VictoriaMetrics query endpoint (the part before /api/v1)"
            )
        if doc.get("status") == "success" and status < 400:
            return doc.get("data")
        error = str(doc.get("error") or f"HTTP {status}")
        kind = str(doc.get("errorType") or "")
        if any(mark in error.lower() for mark in _TOO_LARGE_MARKS):
            raise TooLarge(f"{self.name}{path}: the server refused the query as too large: {error}")
        if status in (401, 403):
            raise SourceUnavailable(
                f"{self.name}{path}: HTTP {status} ({error}): give credentials "
                "(prometheus.bearer_token_file, or prometheus.username and "
                "prometheus.password_file)"
            )
        if kind in ("timeout", "unavailable"):
            raise _Retry(f"{kind}: {error}")
        raise CollectError(f"{self.name}{path}: Prometheus answered {kind or status}: {error}")

    def _too_big(self, path: str, detail: str) -> InputTooLarge:
        return InputTooLarge(
            f"{self.name}{path}: the answer is larger than {self.transfer.max_bytes:,} bytes, "
            f"the limit prometheus.max_response_bytes ({detail}); raise it, or use a coarser "
            "--step"
        )


class _Retry(Exception):
    """A failure that may pass: retried, then reported as SourceUnavailable."""


def _num(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")
