"""Who may talk to the agent's HTTP port, decided before any route runs (docs/security.md).

- Without a token the agent listens on loopback only, and answers only requests addressed to
  a loopback name (`Host: localhost`, `127.0.0.1`, `[::1]`, any port): a page on another site
  that rebinds its own DNS name to 127.0.0.1 gets 400.
- With a token, every path but /healthz needs it: `Authorization: Bearer T`, or the cookie
  that a browser gets by opening a dashboard page once with `?token=T` (the page then
  redirects to its URL without the token). The query string is never a credential elsewhere.
- A state-changing request (POST, PUT, PATCH, DELETE) must come from this origin: a non-simple
  content type (which a cross-site form cannot send without a CORS preflight, which the agent
  never grants) and no cross-site `Origin` or `Sec-Fetch-Site`.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gpulens.errors import ConfigError

if TYPE_CHECKING:  # starlette is 15 MB: the light /metrics front never loads it
    from starlette.requests import Request

COOKIE = "gpulens_token"
OPEN_PATHS: frozenset[str] = frozenset({"/healthz"})
MIN_TOKEN_CHARS = 16
SAFE_METHODS: frozenset[str] = frozenset({"GET", "HEAD", "OPTIONS"})
#: the content types a cross-site form or a preflight-free fetch can send
SIMPLE_TYPES: frozenset[str] = frozenset(
    {"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"}
)
_HOST = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?$")


def check_token(token: str | None) -> None:
    """ConfigError unless `token` is None or at least MIN_TOKEN_CHARS long (it is not quoted:
    it is a secret)."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"setting 'agent.token' is {len(token)} characters long; use at least "
            f"{MIN_TOKEN_CHARS}, e.g. the output of "
            "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        )


def loopback_host(host: str) -> bool:
    """True when a `Host` header names this machine's loopback: localhost, 127.0.0.0/8 or
    [::1], with or without a port."""
    if not _HOST.match(host):
        return False
    name = urlsplit(f"//{host}").hostname or ""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def presented_token(request: Request) -> str | None:
    """The credential a request carries: `Authorization: Bearer T`, else the cookie."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.cookies.get(COOKIE)


def token_ok(expected: str | None, presented: str | None) -> bool:
    """True when no token is configured, or `presented` equals it (constant time)."""
    if expected is None:
        return True
    if presented is None:
        return False
    return hmac.compare_digest(expected.encode(), presented.encode())


def cross_site_refusal(request: Request) -> tuple[int, str] | None:
    """(status, why) when a state-changing request may come from another site; None when it
    is a safe method, or comes from this origin with a non-simple content type."""
    if request.method in SAFE_METHODS:
        return None
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return 403, f"a {fetch_site} {request.method} is refused: send it from the dashboard"
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
        return 403, f"a {request.method} from origin {origin[:100]!r} is refused"
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if not media or media in SIMPLE_TYPES:
        return 415, (
            f"a {request.method} with content type {media or 'none'!r} is refused: send the body "
            "as application/octet-stream (curl: -H 'Content-Type: application/octet-stream')"
        )
    return None


#: headers on every response: no framing, no sniffing, no referrer, and scripts and styles
#: only from this origin (plotly sets inline styles on its elements, hence 'unsafe-inline'
#: for styles only)
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
