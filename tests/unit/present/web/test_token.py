"""With a token configured, every path but /healthz needs it: the `Authorization: Bearer`
header, or the cookie a dashboard page sets after one `?token=` visit. The query string is a
credential for that first page load only."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi import FastAPI

from gpulens.errors import ConfigError

from .helpers import TestClient

TOKEN = "s3cret-token-0123456789"
PATHS = ["/api/now", "/api/fleet?range=1h", "/", "/findings", "/metrics", "/static/app.js"]
API_PATHS = ["/api/now", "/api/window?range=1h", "/metrics", "/charts/fleet", "/openapi.json"]


@pytest.fixture(scope="module")
def secured(make_app: Callable[..., FastAPI]) -> TestClient:
    return TestClient(make_app(token=TOKEN))


@pytest.mark.parametrize("path", PATHS)
def test_no_token_is_401(secured: TestClient, path: str) -> None:
    r = secured.get(path)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert "token is required" in r.json()["detail"]


@pytest.mark.parametrize("path", PATHS)
def test_wrong_token_is_401(secured: TestClient, path: str) -> None:
    assert secured.get(path, headers={"Authorization": "Bearer nope"}).status_code == 401
    sep = "&" if "?" in path else "?"
    assert secured.get(f"{path}{sep}token=nope").status_code == 401


def test_header_works(secured: TestClient) -> None:
    r = secured.get("/api/now", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200 and r.json()["live"] is False


@pytest.mark.parametrize("path", API_PATHS)
def test_the_query_string_is_no_credential_for_the_api(secured: TestClient, path: str) -> None:
    sep = "&" if "?" in path else "?"
    r = secured.get(f"{path}{sep}token={TOKEN}", follow_redirects=False)
    assert r.status_code == 401 and "set-cookie" not in r.headers


def test_a_page_trades_the_query_token_for_a_cookie(make_app: Callable[..., FastAPI]) -> None:
    browser = TestClient(make_app(token=TOKEN))
    r = browser.get(f"/findings?range=1h&token={TOKEN}", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/findings?range=1h"  # the token leaves the address bar
    cookie = r.headers["set-cookie"].lower()
    assert cookie.startswith(f"gpulens_token={TOKEN}".lower())
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
    assert browser.get("/findings?range=1h").status_code == 200  # the cookie now
    assert browser.get("/api/window?range=1h").status_code == 200
    upload = browser.post(
        "/api/traces/upload?name=x.json",
        content=b"{}",
        headers={"content-type": "application/octet-stream"},
    )
    assert upload.status_code == 422  # past the token and origin checks, to the analysis


def test_healthz_is_open(secured: TestClient) -> None:
    assert secured.get("/healthz").json() == {"status": "ok"}


def test_without_a_token_configured_all_is_open(client: TestClient) -> None:
    assert client.get("/api/now").status_code == 200


@pytest.mark.parametrize("token", ["x", "short-token-15ch"[:15]])
def test_a_weak_token_is_refused_naming_the_setting(
    make_app: Callable[..., FastAPI], token: str
) -> None:
    with pytest.raises(ConfigError) as err:
        make_app(token=token)
    assert "agent.token" in str(err.value) and "16" in str(err.value)
    assert token not in str(err.value).replace("agent.token", "")
