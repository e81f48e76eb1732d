"""With a token configured, every path but /healthz needs it: header, ?token= or the cookie."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi import FastAPI

from .helpers import TestClient

TOKEN = "s3cret-token"
PATHS = ["/api/now", "/api/fleet?range=1h", "/", "/findings", "/metrics", "/static/app.js"]


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


def test_query_token_works_and_sets_the_cookie(make_app: Callable[..., FastAPI]) -> None:
    browser = TestClient(make_app(token=TOKEN))
    r = browser.get(f"/api/now?token={TOKEN}")
    assert r.status_code == 200
    assert "gpulens_token" in r.headers["set-cookie"]
    assert "httponly" in r.headers["set-cookie"].lower()
    assert browser.get("/api/window?range=1h").status_code == 200  # the cookie now


def test_healthz_is_open(secured: TestClient) -> None:
    assert secured.get("/healthz").json() == {"status": "ok"}


def test_without_a_token_configured_all_is_open(client: TestClient) -> None:
    assert client.get("/api/now").status_code == 200
