"""Token check for the agent's HTTP port: constant-time, header or query or cookie."""

from __future__ import annotations

import hmac

from starlette.requests import Request

COOKIE = "gpulens_token"
OPEN_PATHS: frozenset[str] = frozenset({"/healthz"})


def presented_token(request: Request) -> str | None:
    """The token a request carries: `Authorization: Bearer T`, `?token=T`, or the cookie the
    dashboard sets after a `?token=` visit."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value:
        return value.strip()
    return request.query_params.get("token") or request.cookies.get(COOKIE)


def token_ok(expected: str | None, presented: str | None) -> bool:
    """True when no token is configured, or `presented` equals it (constant time)."""
    if expected is None:
        return True
    if presented is None:
        return False
    return hmac.compare_digest(expected.encode(), presented.encode())
