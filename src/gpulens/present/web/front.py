"""The agent's ASGI front: /metrics and /healthz without the dashboard, the rest loaded on demand.

A node scraped by Prometheus and never viewed needs only the exposition. `LazyApp` answers
`GET`/`HEAD` of /metrics and /healthz itself, with the same guard as the full app (loopback
`Host` without a token; the token for /metrics with one; the same one-line refusals; the
security headers; gzip when asked and worth it), and builds the full application (FastAPI, the
dashboard, the analysis) in a worker thread at the first other request.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any

from gpulens.app.agent import AgentContext
from gpulens.present.web.security import (
    COOKIE,
    OPEN_PATHS,
    SECURITY_HEADERS,
    check_token,
    loopback_host,
    token_ok,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: the exposition's content type (prometheus_client's CONTENT_TYPE_LATEST)
EXPOSITION_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: bodies at least this long are gzipped for a client that accepts it (as the full app does)
GZIP_MIN_BYTES = 2048
LIGHT_PATHS = frozenset({"/metrics", "/healthz"})


def _full_app(ctx: AgentContext) -> ASGIApp:
    from gpulens.present.web.app import create_app

    app: ASGIApp = create_app(ctx)
    return app


class LazyApp:
    """See the module doc; `build(ctx)` makes the full app (present/web/app's `create_app`)."""

    def __init__(
        self, ctx: AgentContext, build: Callable[[AgentContext], ASGIApp] = _full_app
    ) -> None:
        check_token(ctx.token)
        self.ctx = ctx
        self._build = build
        self._app: ASGIApp | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the full app has been built."""
        return self._app is not None

    def full(self) -> ASGIApp:
        """The full app, built on first use (one build, however many callers)."""
        with self._lock:
            if self._app is None:
                self._app = self._build(self.ctx)
            return self._app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" and self._app is None:
            await _lifespan(receive, send)  # the full app has no startup or shutdown work
            return
        light = scope["type"] == "http" and scope["path"] in LIGHT_PATHS
        if self._app is None and light and scope["method"] in ("GET", "HEAD"):
            refused = self._refusal(scope)
            if refused is not None:
                await _send(scope, send, *refused)
            else:
                await self._answer(scope, send)
            return
        app = self._app if self._app is not None else await asyncio.to_thread(self.full)
        await app(scope, receive, send)

    def _refusal(self, scope: Scope) -> tuple[int, bytes, str, list[tuple[bytes, bytes]]] | None:
        """The full app's guard for a GET of a light path: (status, body, type, headers)."""
        headers = _headers(scope)
        host = headers.get("host", "")
        if self.ctx.token is None and not loopback_host(host):
            return _problem(
                400,
                f"Host {host[:100]!r} is not a loopback name: without agent.token the agent "
                "answers only http://localhost, 127.0.0.1 or [::1]; set a token to serve others",
            )
        if self.ctx.token is None or scope["path"] in OPEN_PATHS:
            return None
        if token_ok(self.ctx.token, _presented(headers)):
            return None
        return _problem(
            401,
            "a valid token is required: send Authorization: Bearer TOKEN, or open a dashboard "
            "page once with ?token=TOKEN",
            [(b"www-authenticate", b"Bearer")],
        )

    async def _answer(self, scope: Scope, send: Send) -> None:
        if scope["path"] == "/healthz":
            body, media = b'{"status":"ok"}', "application/json"
        else:
            exposition = self.ctx.exposition
            body = b"" if exposition is None else await asyncio.to_thread(exposition)
            media = EXPOSITION_TYPE
        await _send(scope, send, 200, body, media, [])


async def _send(
    scope: Scope, send: Send, status: int, body: bytes, media: str, extra: list[tuple[bytes, bytes]]
) -> None:
    """One response with the security headers, gzipped when the client accepts it and the
    body is worth it (as the full app's GZipMiddleware does)."""
    headers = [(b"content-type", media.encode()), *extra]
    if len(body) >= GZIP_MIN_BYTES and "gzip" in _headers(scope).get("accept-encoding", ""):
        body = gzip.compress(body, compresslevel=9)
        headers += [(b"content-encoding", b"gzip"), (b"vary", b"Accept-Encoding")]
    headers.append((b"content-length", str(len(body)).encode()))
    headers += [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})


def _problem(
    status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None
) -> tuple[int, bytes, str, list[tuple[bytes, bytes]]]:
    body = json.dumps({"detail": message}, ensure_ascii=False, separators=(",", ":")).encode()
    return status, body, "application/json", headers or []


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def lazy_app(ctx: AgentContext) -> LazyApp:
    """What the agent serves: the light front over the full app (see the module doc)."""
    return LazyApp(ctx)


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _presented(headers: dict[str, str]) -> str | None:
    """The credential of a request: `Authorization: Bearer T`, else the token cookie (as
    security.presented_token)."""
    scheme, _, value = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    cookie: SimpleCookie = SimpleCookie()
    try:
        cookie.load(headers.get("cookie", ""))
    except Exception:  # a malformed cookie header: no credential
        return None
    morsel = cookie.get(COOKIE)
    return morsel.value if morsel is not None else None
