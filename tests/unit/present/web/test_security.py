"""Requests another site can make a browser send: DNS rebinding (a foreign `Host` on the
loopback port) and cross-site POSTs (forms and preflight-free fetches)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable

import pytest
from fastapi import FastAPI

from gpulens.present.web.security import loopback_host

from .helpers import TestClient, kineto

TOKEN = "s3cret-token-0123456789"
UPLOAD = "/api/traces/upload?name=t.json.gz"
BINARY = {"content-type": "application/octet-stream"}


@pytest.fixture(scope="module")
def trace() -> bytes:
    return gzip.compress(json.dumps(kineto()).encode())


@pytest.mark.parametrize(
    "host",
    ["localhost", "localhost:9477", "127.0.0.1", "127.0.0.1:1", "[::1]", "[::1]:9477",
     "127.1.2.3:80", "LOCALHOST:9477"],
)  # fmt: skip
def test_loopback_names_are_served(client: TestClient, host: str) -> None:
    assert loopback_host(host)
    assert client.get("/api/now", headers={"host": host}).status_code == 200


@pytest.mark.parametrize(
    "host",
    ["rebind.attacker.example", "rebind.attacker.example:9477", "localhost.attacker.example",
     "127.0.0.1.nip.io", "evil@localhost", "localhost:9477@evil", "[::1]x", "[::2]:1",
     "10.0.0.1:9477", "", "localhost:port", "localhost:99999999"],
)  # fmt: skip
def test_other_host_names_are_400_without_a_token(client: TestClient, host: str) -> None:
    assert not loopback_host(host)
    for path in ("/", "/api/now", "/metrics", "/healthz"):
        r = client.get(path, headers={"host": host})
        assert r.status_code == 400, (host, path)
        assert "loopback" in r.json()["detail"]


def test_with_a_token_any_host_name_is_served(make_app: Callable[..., FastAPI]) -> None:
    secured = TestClient(make_app(token=TOKEN))
    host = {"host": "gpu-node-7.example:9477"}
    assert secured.get("/api/now", headers=host).status_code == 401
    bearer = {**host, "authorization": f"Bearer {TOKEN}"}
    assert secured.get("/api/now", headers=bearer).status_code == 200


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
     "multipart/form-data; boundary=x", "TEXT/PLAIN"],
)  # fmt: skip
def test_a_simple_content_type_post_is_refused(
    client: TestClient, trace: bytes, content_type: str | None
) -> None:
    """What a cross-site form or a preflight-free fetch can send: 415, nothing analysed."""
    headers = {"content-type": content_type} if content_type else {}
    r = client.post(UPLOAD, content=trace, headers=headers)
    assert r.status_code == 415, r.text
    assert "application/octet-stream" in r.json()["detail"]


@pytest.mark.parametrize(
    "headers",
    [{"origin": "http://attacker.example"}, {"origin": "null"},
     {"origin": "http://127.0.0.1:9999"}, {"sec-fetch-site": "cross-site"},
     {"sec-fetch-site": "same-site"}],
)  # fmt: skip
def test_a_cross_origin_post_is_refused(
    client: TestClient, trace: bytes, headers: dict[str, str]
) -> None:
    r = client.post(UPLOAD, content=trace, headers={**BINARY, **headers})
    assert r.status_code == 403, r.text


@pytest.mark.parametrize(
    "headers",
    [{}, {"origin": "http://127.0.0.1", "sec-fetch-site": "same-origin"},
     {"sec-fetch-site": "none"}],
)  # fmt: skip
def test_a_same_origin_post_is_analysed(
    client: TestClient, trace: bytes, headers: dict[str, str]
) -> None:
    r = client.post(UPLOAD, content=trace, headers={**BINARY, **headers})
    assert r.status_code == 200, r.text
    assert r.json()["page"]["source"] == "t.json.gz"


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS"])
@pytest.mark.parametrize("path", ["/api/fleet", "/api/traces/upload", "/metrics", "/"])
def test_other_methods_are_405_with_allow(client: TestClient, method: str, path: str) -> None:
    for accept in ("application/json", "text/html"):
        r = client.request(method, path, headers={"accept": accept})
        assert r.status_code == 405, (method, path, accept)
        allowed = {m.strip() for m in r.headers["allow"].split(",")}
        assert allowed <= {"GET", "HEAD", "POST"} and allowed, r.headers["allow"]
