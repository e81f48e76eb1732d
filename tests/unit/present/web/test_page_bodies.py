"""Dashboard pages serialised once per analysis and shared by every viewer: the bytes are those
FastAPI would have sent, concurrent viewers cost one serialisation, and the cache is bounded."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.encoders import jsonable_encoder

from gpulens.app.agent import AgentContext
from gpulens.app.live import LiveState
from gpulens.present.web.app import create_app
from gpulens.present.web.cached import PageBodies
from present.sim import fleet, ticks

from .helpers import TestClient

ROUTES = ("/api/fleet?range=1h", "/api/workloads?range=1h", "/api/people?range=1h",
          "/api/findings?range=1h")  # fmt: skip


@pytest.mark.parametrize("path", ROUTES)
def test_the_shared_body_is_the_page_as_fastapi_encodes_it(
    make_app: Callable[..., FastAPI], path: str
) -> None:
    app = make_app()
    client = TestClient(app)
    plain = client.get(path, headers={"Accept-Encoding": "identity"})
    zipped = client.get(path, headers={"Accept-Encoding": "gzip"})
    assert plain.status_code == zipped.status_code == 200
    assert plain.headers["content-type"] == "application/json"
    assert zipped.headers.get("content-encoding") == "gzip"  # decoded by the client
    assert zipped.content == plain.content
    # the page object the dashboard kept, encoded independently of the cache
    dash = app.state.dashboard
    name = path.split("?")[0].removeprefix("/api/")
    window = dash.window("1h")
    page = getattr(dash, name)(window)
    assert json.loads(plain.content) == jsonable_encoder(page)
    assert app.state.bodies.serialised == 1  # both requests: one serialisation


def test_sixteen_viewers_share_one_serialisation_and_one_gzip(
    make_app: Callable[..., FastAPI],
) -> None:
    app = make_app()
    client = TestClient(app)
    bodies: list[bytes] = []
    lock = threading.Lock()

    def view() -> None:
        r = client.get("/api/fleet?range=1h", headers={"Accept-Encoding": "gzip"})
        assert r.status_code == 200
        with lock:
            bodies.append(r.content)

    view()  # the first viewer makes the page; first requests racing may each serialise it
    viewers = [threading.Thread(target=view) for _ in range(16)]  # (never under the lock)
    for v in viewers:
        v.start()
    for v in viewers:
        v.join(120)
    assert len(bodies) == 17 and len(set(bodies)) == 1
    cache: PageBodies = app.state.bodies
    assert cache.serialised == 1 and cache.compressed == 1  # sixteen more viewers, no more work


@dataclass
class Page:
    n: int
    values: list[float]


class FakeRequest:
    def __init__(self, gzip_ok: bool) -> None:
        self.headers = {"accept-encoding": "gzip" if gzip_ok else ""}


def test_the_cache_holds_the_last_pages_only_and_never_confuses_them() -> None:
    cache = PageBodies(keep=3)
    pages = [Page(i, [float(i)] * 1000) for i in range(5)]
    for page in pages:
        assert json.loads(cache.json(page)) == {"n": page.n, "values": page.values}
    assert len(cache) == 3 and cache.serialised == 5
    cache.json(pages[4])  # still cached
    assert cache.serialised == 5
    cache.json(pages[0])  # dropped: serialised again
    assert cache.serialised == 6 and len(cache) == 3
    request: Any = FakeRequest(gzip_ok=True)
    response = cache.response(request, pages[0])
    assert response.headers["content-encoding"] == "gzip"
    assert json.loads(gzip.decompress(bytes(response.body)))["n"] == 0
    small: Any = cache.response(FakeRequest(gzip_ok=True), Page(9, []))
    assert "content-encoding" not in small.headers  # too small to be worth it


def test_keep_must_be_positive() -> None:
    with pytest.raises(ValueError, match="keep"):
        PageBodies(keep=0)


def test_the_live_strip_is_built_and_serialised_once_per_change_of_the_live_state(
    store_dir: Path,
) -> None:
    sim = fleet(hosts=1, gpus_per_host=2, seed=0)
    live = LiveState(state_window_s=60, keep_s=180)
    feed = iter(ticks(sim, 0, 10))
    live.on_tick(next(feed))
    app = create_app(AgentContext(data_dir=store_dir, live=live))
    client = TestClient(app)
    first = client.get("/api/now")
    assert first.status_code == 200 and first.json()["live"] is True
    again = client.get("/api/now")
    assert again.content == first.content
    assert app.state.bodies.serialised == 1  # no change: the same strip, the same bytes
    live.on_tick(next(feed))
    moved = client.get("/api/now")
    assert moved.json()["ts_ns"] > first.json()["ts_ns"]
    assert app.state.bodies.serialised == 2
