"""The FastAPI application: /metrics, the dashboard pages and the read-only JSON API."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpulens import __version__
from gpulens.present.agent import AgentContext
from gpulens.present.web.security import COOKIE, OPEN_PATHS, presented_token, token_ok


def create_app(ctx: AgentContext) -> FastAPI:
    """The app serving `ctx` (the agent's store, live state and settings)."""
    app = FastAPI(
        title="gpulens",
        version=__version__,
        description="What GPUs really do: useful work, its waste, its price and the fix.",
    )
    app.state.ctx = ctx

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
        return response

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", response_class=PlainTextResponse, tags=["prometheus"])
    def metrics() -> Response:
        """Prometheus exposition of the live state (fresh families on every scrape)."""
        if ctx.registry is None:
            return PlainTextResponse("", media_type=CONTENT_TYPE_LATEST)
        return Response(generate_latest(ctx.registry), media_type=CONTENT_TYPE_LATEST)

    return app
