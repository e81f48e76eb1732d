"""The FastAPI application: /metrics, /healthz, the dashboard pages and the read-only JSON API.

Before any route runs, the guard middleware applies security.py: loopback Host names only
without a token; the token (header, or the cookie a dashboard page sets after one `?token=`
visit) everywhere but /healthz with one; same-origin, non-simple content types for POST. The
routes serve GET, HEAD and POST (trace uploads, which store nothing); another method is 405
with `Allow`. Static files are the dashboard's own and plotly.js from the installed plotly
package: nothing is loaded from the network.
"""

from __future__ import annotations

import gzip
import importlib.util
from collections.abc import Awaitable, Callable
from functools import cache
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.middleware.gzip import GZipMiddleware
from starlette.routing import Match

from gpulens import __version__
from gpulens.app.agent import AgentContext
from gpulens.errors import StoreError
from gpulens.present.dashboard.service import Dashboard
from gpulens.present.web import api, pages
from gpulens.present.web.cached import PageBodies
from gpulens.present.web.security import (
    COOKIE,
    OPEN_PATHS,
    SAFE_METHODS,
    SECURITY_HEADERS,
    check_token,
    cross_site_refusal,
    loopback_host,
    presented_token,
    token_ok,
)

STATIC = Path(__file__).parent / "static"
STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
CACHE_STATIC = "public, max-age=3600"


def plotly_js_path() -> Path | None:
    """plotly.min.js as the installed plotly package ships it (found without importing it)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    return path if path.is_file() else None


@cache
def _plotly_gzip() -> bytes | None:
    path = plotly_js_path()
    return gzip.compress(path.read_bytes(), compresslevel=6) if path is not None else None


#: what the guard (security.py) refuses, by status, for every operation of the schema
GUARD_RESPONSES = {
    "400": "Not a loopback Host name, and no agent.token set.",
    "401": "The agent.token is required: Authorization: Bearer, or the dashboard's cookie.",
}
CROSS_SITE_RESPONSES = {
    "403": "A cross-origin request (Origin or Sec-Fetch-Site).",
    "415": "A simple content type, as a cross-site form sends: send application/octet-stream.",
}


def _wants_json(request: Request) -> bool:
    path = request.url.path
    return path.startswith(("/api/", "/charts/")) or "text/html" not in request.headers.get(
        "accept", ""
    )


def create_app(ctx: AgentContext) -> FastAPI:
    """The app serving `ctx` (the agent's store, live state and settings); ConfigError when
    its token is too weak."""
    check_token(ctx.token)
    app = FastAPI(
        title="gpulens",
        version=__version__,
        description="What GPUs really do: useful work, its waste, its price and the fix. "
        "Read-only: every endpoint reads the agent's store and live state.",
        docs_url=None,  # Swagger UI and ReDoc load their scripts from a CDN: the schema is
        redoc_url=None,  # at /openapi.json instead
    )
    app.state.ctx = ctx
    app.state.dashboard = Dashboard(ctx)
    app.state.bodies = PageBodies()

    page_paths = [
        route.path_regex
        for route in pages.router.routes
        if isinstance(route, APIRoute) and route.response_class is HTMLResponse
    ]

    def is_page(request: Request) -> bool:
        return request.method in ("GET", "HEAD") and any(
            regex.match(request.url.path) for regex in page_paths
        )

    def routed(request: Request) -> bool:
        """True when a route takes this method on this path (else the router answers 404 or
        405, having changed nothing)."""
        return any(route.matches(request.scope)[0] is Match.FULL for route in app.router.routes)

    @app.middleware("http")
    async def guard(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        """Host, origin and token checks (security.py), then the security headers."""
        response = refusal(request)
        if response is None:
            response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    def refusal(request: Request) -> Response | None:
        host = request.headers.get("host", "")
        if ctx.token is None and not loopback_host(host):
            return problem(
                request,
                400,
                f"Host {host[:100]!r} is not a loopback name: without agent.token the agent "
                "answers only http://localhost, 127.0.0.1 or [::1]; set a token to serve others",
            )
        refused = cross_site_refusal(request) if routed(request) else None
        if refused is not None:
            return problem(request, *refused)
        if ctx.token is None or request.url.path in OPEN_PATHS:
            return None
        query_token = request.query_params.get("token")
        if query_token is not None and is_page(request) and token_ok(ctx.token, query_token):
            url = request.url.remove_query_params("token")
            redirect = RedirectResponse(url.path + (f"?{url.query}" if url.query else ""), 303)
            redirect.set_cookie(COOKIE, ctx.token, httponly=True, samesite="strict", path="/")
            return redirect
        if token_ok(ctx.token, presented_token(request)):
            return None
        return problem(
            request,
            401,
            "a valid token is required: send Authorization: Bearer TOKEN, or open a dashboard "
            "page once with ?token=TOKEN",
            {"WWW-Authenticate": "Bearer"},
        )

    def problem(
        request: Request, status: int, message: str, headers: dict[str, str] | None = None
    ) -> Response:
        if is_page(request) and "text/html" in request.headers.get("accept", ""):
            page = pages.error_page(request, status, message)
            page.headers.update(headers or {})
            return page
        return JSONResponse({"detail": message}, status_code=status, headers=headers)

    app.add_middleware(GZipMiddleware, minimum_size=2048)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        if _wants_json(request):
            return await http_exception_handler(request, exc)
        page = pages.error_page(request, exc.status_code, str(exc.detail))
        page.headers.update(exc.headers or {})  # e.g. a 405's Allow
        return page

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        """One line naming each bad parameter (the `Problem` the schema declares for 422)."""
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'body'}: {e.get('msg')}"
            for e in exc.errors()
        )
        message = f"invalid request: {problems[:1000]}"
        if _wants_json(request):
            return JSONResponse({"detail": message}, status_code=422)
        return pages.error_page(request, 422, message)

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError) -> Response:
        message = f"the store cannot be read now: {exc}"
        if _wants_json(request):
            return JSONResponse({"detail": message}, status_code=503)
        return pages.error_page(request, 503, message)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", response_class=PlainTextResponse, tags=["prometheus"])
    def metrics() -> Response:
        """Prometheus exposition of the live state (fresh families on every scrape)."""
        if ctx.exposition is None:
            return PlainTextResponse("", media_type=CONTENT_TYPE_LATEST)
        return Response(ctx.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/static/plotly.min.js", include_in_schema=False)
    def plotly_js(request: Request) -> Response:
        body = _plotly_gzip()
        if body is None:
            raise HTTPException(404, "plotly.js is not installed: pip install plotly")
        headers = {"Cache-Control": CACHE_STATIC}
        if "gzip" in request.headers.get("accept-encoding", ""):
            headers["Content-Encoding"] = "gzip"
            return Response(body, media_type=STATIC_TYPES[".js"], headers=headers)
        return Response(gzip.decompress(body), media_type=STATIC_TYPES[".js"], headers=headers)

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        path = STATIC / name
        kind = STATIC_TYPES.get(path.suffix)
        if kind is None or path.parent != STATIC or not path.is_file():
            raise HTTPException(404, f"no static file {name!r}")
        return Response(path.read_bytes(), media_type=kind, headers={"Cache-Control": CACHE_STATIC})

    app.include_router(api.router)
    app.include_router(pages.router)
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        """FastAPI's schema, plus what the guard and the validation handler answer."""
        if app.openapi_schema is None:
            declare_guard(generate())
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def declare_guard(doc: dict[str, Any]) -> None:
    """Add the guard's refusals (400, 401; 403 and 415 for a POST) to every operation of an
    OpenAPI document, and make every 422 the one-line `Problem` the handler answers."""
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("Problem", api.Problem.model_json_schema())
    problem = {"application/json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    for operations in doc.get("paths", {}).values():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            refusals = dict(GUARD_RESPONSES)
            if method.upper() not in SAFE_METHODS:
                refusals.update(CROSS_SITE_RESPONSES)
            for status, description in refusals.items():
                responses.setdefault(status, {"description": description, "content": problem})
            if "422" in responses:
                responses["422"]["content"] = problem
