"""The Cluster page of an agent that records into a store: the 30-day cluster of
tests/promdata.py, backfilled into Debian's Prometheus, copied into a store with
`ingest --prometheus`, then served by the dashboard over an explicit window (the store's
cluster, not a Prometheus read): heat map, allocation, useful work and the idle-allocated
inventory against the rule that built the history and the coverage rule (`promdata.truth`).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gpulens.analyze.prices import Prices
from gpulens.app.agent import AgentContext
from gpulens.app.cluster_feed import ClusterFeed
from gpulens.app.prometheus import ingest
from gpulens.config import load_config
from gpulens.present.web.app import create_app
from promdata import PROMETHEUS, PROMTOOL, ClusterSpec, Prometheus, backfill, truth

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()) and not os.environ.get("CI"),
        reason="needs Prometheus and promtool (Debian package `prometheus`; .ci/run installs it)",
    ),
]
SPEC = ClusterSpec()
SCRAPE_S = SPEC.scrape_s  # the store holds one reading per scrape
NS = 1_000_000_000
USEFUL = {"free": 0.0, "idle": 0.0, "train": 0.45}


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("cluster-store")
    backfill(SPEC, home / "data", home)
    store = home / "store"
    cfg = load_config(None, overrides={"data_dir": str(store)})
    with Prometheus(home, home / "data") as server:
        ingest(cfg, server.url, SPEC.start_s * NS, SPEC.end_s * NS, time.time_ns(), SCRAPE_S)
    queues = {SPEC.host(n): SPEC.queue(n) for n in range(SPEC.nodes)}
    ctx = AgentContext(data_dir=store, live=None, cluster=ClusterFeed(cfg, node_queues=queues))
    with TestClient(create_app(ctx), base_url="http://127.0.0.1") as client:
        window = {"start_ns": SPEC.start_s * NS, "end_ns": SPEC.end_s * NS}
        got = client.get("/api/cluster", params=window)
        assert got.status_code == 200, got.text
        page = client.get("/cluster", params=window, headers={"accept": "text/html"})
        assert page.status_code == 200
        yield {**got.json(), "html": page.text}


def test_heat_map_per_node(doc: dict[str, Any]) -> None:
    step = doc["step_s"]
    assert SPEC.block_s % step == 0  # each step inside one block of the rule
    heat = doc["heat"]
    assert heat["nodes"] == [SPEC.host(n) for n in (0, 2, 1, 3)]  # by queue, then name
    for row, name in enumerate(heat["nodes"]):
        node = int(name.rsplit("-", 1)[1])
        for i, got in enumerate(heat["useful"][row]):
            block = i * step // SPEC.block_s
            if not SPEC.observed(node, block):
                assert got is None
                continue
            want = sum(USEFUL[SPEC.state(node, g, block)] for g in range(SPEC.gpus)) / SPEC.gpus
            assert got == pytest.approx(want, abs=1e-6), (name, i)


def test_allocation_useful_work_and_idle_inventory(doc: dict[str, Any]) -> None:
    want = truth(SPEC, SCRAPE_S)  # each reading covers until the next (at most two scrapes)
    t = doc["totals"]
    assert t["gpu_hours"] == pytest.approx(want.gpu_hours)
    assert t["in_use_gpu_hours"] == pytest.approx(want.allocated_hours)
    assert t["pooled_allocation"] == pytest.approx(want.allocated_hours / want.gpu_hours)
    assert t["useful_gpu_hours"] == pytest.approx(want.train_hours * USEFUL["train"], rel=1e-5)
    for q in doc["queues"]:
        gpu_h, alloc_h = want.by_queue[q["queue"]]
        assert q["allocation"] == pytest.approx(alloc_h / gpu_h)
    assert t["idle_allocated_gpu_hours"] == pytest.approx(want.idle_allocated_hours)
    price = Prices().gpu_hour_price("NVIDIA H100 80GB HBM3")
    assert t["idle_allocated_cost"] == pytest.approx(want.idle_allocated_hours * price)
    idle_jobs = {
        f"job_id={n}-{g}-{b}"
        for n in range(SPEC.nodes)
        for g in range(SPEC.gpus)
        for b in range(SPEC.blocks)
        if SPEC.observed(n, b) and SPEC.state(n, g, b) == "idle"
    }
    assert {r["owner"] for r in doc["idle"]} == idle_jobs
    assert "Source: store" in doc["html"] and 'id="chart-heatmap"' in doc["html"]
