"""The agent's web guard in a real browser: the `?token=` link becomes an HttpOnly,
SameSite=Strict cookie on the dashboard's first page and leaves the address bar, the page then
works on the cookie (live strip, upload); another site can neither post to a loopback agent
(a cross-site form, a no-cors fetch) nor reach it under its own DNS name (rebinding)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(  # never skipped in CI, where a missing install must fail
        not CHROMIUM.exists() and not os.environ.get("CI"),
        reason=f"no system Chromium at {CHROMIUM} (Debian `chromium`)",
    ),
]

TOKEN = "browser-token-0123456789abcdef"
ATTACKER = "http://attacker.example"


@dataclass(frozen=True)
class Secured:
    url: str
    trace: Path


def _agent(root: Path, traces: Path, token: str | None) -> Iterator[str]:
    """`gpulens agent` on the simulated fleet on a free loopback port; yields its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env.update(
        GPULENS_COLLECT_COLLECTORS="simulated",
        GPULENS_SIMULATED_HOSTS="1",
        GPULENS_AGENT_TRACE_DIRS=str(traces),
    )
    if token is not None:
        env["GPULENS_AGENT_TOKEN"] = token
    command = [sys.executable, "-m", "gpulens", "agent", "--data-dir", str(root / "data"),
               "--listen", f"127.0.0.1:{port}"]  # fmt: skip
    log = (root / "agent.log").open("wb")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (root / "agent.log").read_text()
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the agent did not start"
            time.sleep(0.2)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, step_trace: Path) -> Iterator[Secured]:
    """An agent with a token."""
    root = tmp_path_factory.mktemp("secured")
    for url in _agent(root, step_trace.parent, TOKEN):
        yield Secured(url, step_trace)


@pytest.fixture(scope="module")
def open_agent(tmp_path_factory: pytest.TempPathFactory, step_trace: Path) -> Iterator[str]:
    """An agent without a token (the loopback default)."""
    yield from _agent(tmp_path_factory.mktemp("open"), step_trace.parent, None)


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        yield ctx
    finally:
        ctx.close()


def test_the_token_link_becomes_a_cookie(secured: Secured, context: Any) -> None:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    response = page.goto(f"{secured.url}/traces?token={TOKEN}", wait_until="load")
    assert response is not None and response.status == 200
    assert page.url == f"{secured.url}/traces"  # the token left the address bar and history
    (cookie,) = [c for c in context.cookies() if c["name"] == "gpulens_token"]
    assert cookie["value"] == TOKEN and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/"
    assert TOKEN not in page.evaluate("document.cookie")  # scripts cannot read it
    page.wait_for_function(  # the now strip's fetch of /api/now carries the cookie
        "document.getElementById('now').textContent.includes('GPUs')", timeout=30_000
    )
    page.set_input_files("#upload input[type=file]", str(secured.trace))
    page.click("#upload button")  # a same-origin POST with the cookie
    page.wait_for_url("**/traces?upload=*", timeout=30_000)
    assert "step.json" in page.inner_text("main")
    assert errors == []


def test_without_the_cookie_a_page_is_refused(secured: Secured, context: Any) -> None:
    page = context.new_page()
    response = page.goto(f"{secured.url}/", wait_until="load")
    assert response is not None and response.status == 401
    wrong = page.goto(f"{secured.url}/?token=not-the-token-at-all", wait_until="load")
    assert wrong is not None and wrong.status == 401
    assert context.cookies() == []


def _attacker_page(context: Any, html: str) -> Any:
    """A page served as http://attacker.example/ (another site)."""
    context.route(
        f"{ATTACKER}/**",
        lambda route: route.fulfill(status=200, content_type="text/html", body=html),
    )
    return context.new_page()


def test_a_cross_site_form_post_is_refused(open_agent: str, context: Any) -> None:
    """A loopback agent without a token: a page on another site submits a form to it."""
    action = f"{open_agent}/api/traces/upload?name=x.json"
    html = (
        f'<form method="POST" action="{action}" enctype="text/plain">'
        '<input name=\'{"traceEvents": [], "x": "\' value=\'"}\'></form>'
        "<script>document.forms[0].submit()</script>"
    )
    page = _attacker_page(context, html)
    with page.expect_response(lambda r: r.url.startswith(action)) as answer:
        page.goto(f"{ATTACKER}/", wait_until="commit")
    assert answer.value.status == 403  # cross-site: never analysed


def test_a_cross_site_fetch_is_refused(open_agent: str, context: Any) -> None:
    """The same page's no-cors fetch with a text/plain body (no preflight needed)."""
    url = f"{open_agent}/api/traces/upload?name=y.json"
    page = _attacker_page(context, "<p>hello</p>")
    page.goto(f"{ATTACKER}/", wait_until="load")
    with page.expect_response(lambda r: r.url.startswith(url)) as answer:
        page.evaluate(
            "u => fetch(u, {method: 'POST', mode: 'no-cors', body: '{\"traceEvents\": []}'})"
            ".catch(() => null)",
            url,
        )
    assert answer.value.status == 403


def test_a_rebound_name_is_refused(open_agent: str, context: Any, rebound_host: str) -> None:
    """DNS rebinding: the browser resolves the attacker's name to 127.0.0.1."""
    port = open_agent.rsplit(":", 1)[1]
    page = context.new_page()
    response = page.goto(f"http://{rebound_host}:{port}/api/now", wait_until="load")
    assert response is not None and response.status == 400
    assert "loopback" in page.inner_text("body")
