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


#: headers on every response: no framing, no sniffing, no referrer (a `?token=` URL must not
#: leak to another site), and scripts and styles only from this origin (plotly sets inline
#: styles on its elements, hence 'unsafe-inline' for styles only)
SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; "
        "base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
