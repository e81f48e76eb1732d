"""The agent's light front: /metrics and /healthz without building the dashboard app, with the
full app's guard; anything else builds the full app once."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gpulens.app.agent import AgentContext
from gpulens.present.web.app import create_app
from gpulens.present.web.front import LazyApp

TOKEN = "s3cret-token-0123456789"


def front(tmp_path: Path, token: str | None = None) -> tuple[LazyApp, list[int]]:
    ctx = AgentContext(data_dir=tmp_path, live=None, token=token)
    ctx.exposition = lambda: b"gpulens_up 1\n" * 400  # big enough to be gzipped
    builds: list[int] = []

    def build(c: AgentContext) -> object:
        builds.append(1)
        return create_app(c)

    return LazyApp(ctx, build=build), builds  # type: ignore[arg-type]


def test_metrics_and_healthz_do_not_build_the_dashboard(tmp_path: Path) -> None:
    app, builds = front(tmp_path)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        r = client.get("/metrics", headers={"accept-encoding": "gzip"})
        assert r.status_code == 200 and r.text.startswith("gpulens_up 1")
        assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert r.headers["content-encoding"] == "gzip"
        assert r.headers["x-frame-options"] == "DENY"
        assert client.get("/healthz").json() == {"status": "ok"}
        assert builds == [] and not app.loaded
        assert client.get("/api/now").status_code == 200  # the first other request builds it
        assert client.get("/api/now").status_code == 200
        assert builds == [1] and app.loaded
        assert client.get("/metrics").text.startswith("gpulens_up 1")


@pytest.mark.parametrize(
    ("token", "host", "headers"),
    [
        (None, "rebind.attacker.example", {}),
        (TOKEN, "127.0.0.1", {}),
        (TOKEN, "127.0.0.1", {"authorization": "Bearer nope"}),
        (TOKEN, "127.0.0.1", {"authorization": f"Bearer {TOKEN}"}),
        (TOKEN, "127.0.0.1", {"cookie": f"gpulens_token={TOKEN}"}),
    ],
)
def test_the_light_guard_answers_as_the_full_app(
    tmp_path: Path, token: str | None, host: str, headers: dict[str, str]
) -> None:
    app, builds = front(tmp_path, token)
    full = create_app(app.ctx)
    for path in ("/metrics", "/healthz"):
        with TestClient(app, base_url=f"http://{host}") as light:
            got = light.get(path, headers=headers)
        with TestClient(full, base_url=f"http://{host}") as client:
            want = client.get(path, headers=headers)
        assert (got.status_code, got.content) == (want.status_code, want.content), path
        assert got.headers.get("www-authenticate") == want.headers.get("www-authenticate")
    assert builds == []
