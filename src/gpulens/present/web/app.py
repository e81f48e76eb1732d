"""The FastAPI application: /metrics, /healthz, the dashboard pages and the read-only JSON API.

Every path but /healthz needs the agent's token when one is configured (header, `?token=` or
the cookie a `?token=` visit sets); only GET, HEAD and POST (trace uploads, which store
nothing) are served. Static files are the dashboard's own and plotly.js from the installed
plotly package: nothing is loaded from the network.
"""

from __future__ import annotations

import gzip
import importlib.util
from collections.abc import Awaitable, Callable
from functools import cache
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.exception_handlers import (
    http_exception_handler,
    request_validation_exception_handler,
)
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.middleware.gzip import GZipMiddleware

from gpulens import __version__
from gpulens.app.agent import AgentContext
from gpulens.errors import StoreError
from gpulens.present.dashboard.service import Dashboard
from gpulens.present.web import api, pages
from gpulens.present.web.security import (
    COOKIE,
    OPEN_PATHS,
    SECURITY_HEADERS,
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


def _wants_json(request: Request) -> bool:
    path = request.url.path
    return path.startswith(("/api/", "/charts/")) or "text/html" not in request.headers.get(
        "accept", ""
    )


def create_app(ctx: AgentContext) -> FastAPI:
    """The app serving `ctx` (the agent's store, live state and settings)."""
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

    @app.middleware("http")
    async def require_token(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if request.method not in ("GET", "HEAD", "POST"):
            return JSONResponse({"detail": "read-only API"}, status_code=405)
        presented = presented_token(request)
        if request.url.path not in OPEN_PATHS and not token_ok(ctx.token, presented):
            return JSONResponse(
                {"detail": "a valid token is required (Authorization: Bearer TOKEN)"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        response = await call_next(request)
        if ctx.token is not None and request.query_params.get("token") == presented:
            response.set_cookie(COOKIE, presented or "", httponly=True, samesite="strict")
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    app.add_middleware(GZipMiddleware, minimum_size=2048)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        if _wants_json(request):
            return await http_exception_handler(request, exc)
        return pages.error_page(request, exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        if _wants_json(request):
            return await request_validation_exception_handler(request, exc)
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())[1:])}: {e.get('msg')}"
            for e in exc.errors()
        )
        return pages.error_page(request, 422, f"invalid request: {problems}")

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
    return app
