"""Requests another site can make a browser send: DNS rebinding (a foreign `Host` on the
loopback port) and cross-site POSTs (forms and preflight-free fetches)."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi import FastAPI

from gpulens.config import BY_KEY
from gpulens.present.web.api import MAX_UPLOADS
from gpulens.present.web.security import COOKIE, MIN_TOKEN_CHARS, loopback_host

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


DOC = Path(__file__).resolve().parents[4] / "docs" / "security.md"


def test_the_security_page_states_the_code() -> None:
    """docs/security.md quotes the token minimum, the upload concurrency and real settings."""
    text = DOC.read_text(encoding="utf-8")
    assert f"At least {MIN_TOKEN_CHARS} characters" in text
    assert f"| uploads received or analysed at once | {MAX_UPLOADS} |" in text
    named = set(re.findall(r"`((?:agent|limits|procs|collect|dcgm|nvidia_smi)\.[a-z_]+)`", text))
    assert named and named <= set(BY_KEY), named - set(BY_KEY)
    assert f"`{COOKIE}` (`HttpOnly`, `SameSite=Strict`, `Path=/`)" in text


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_the_systemd_unit_is_valid_and_confined(tmp_path: Path) -> None:
    unit = re.search(r"```ini\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert unit is not None
    path = tmp_path / "gpulens.service"
    path.write_text(unit.group(1), encoding="utf-8")
    verify = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    problems = [line for line in verify.stderr.splitlines() if "is not executable" not in line]
    assert problems == [], problems  # the binary's path is the site's
    security = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    level = re.search(r"Overall exposure level for gpulens.service: ([0-9.]+)", security.stdout)
    assert level is not None and float(level.group(1)) <= 2.0, security.stdout[-500:]
