"""The Cluster page where the source knows pending demand: a two-queue cluster sequence whose
pending-while-idle minutes and GPU-time are worked out by hand, through `gpulens fleet`'s
analysis, shown by the dashboard (view model, JSON API and HTML) with its units."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpulens.app.agent import AgentContext
from gpulens.app.cluster_feed import ClusterFeed
from gpulens.app.cluster_view import ClusterData, NodeHeat
from gpulens.app.fleet import FleetSources, run_fleet
from gpulens.app.fleet_plans import run_plans
from gpulens.config import load_config
from gpulens.present.web.app import create_app

T0 = 1_790_812_800  # 2026-10-01T00:00:00Z
#: per minute: q0 holds its 4 GPUs but 2 in minutes 2-4; q1 holds its 4 and has jobs waiting
Q0_IN_USE = [4, 4, 2, 2, 2, 4, 4, 4, 4, 4]
Q1_PENDING = [0, 0, 3, 1, 0, 2, 0, 0, 0, 0]
#: what could have moved each minute: min(q0's idle GPUs, q1's pending GPUs)
MOVABLE = [min(4 - u, p) for u, p in zip(Q0_IN_USE, Q1_PENDING, strict=True)]


def _sequence(path: Path) -> Path:
    rows = ["time,queue,total,in_use,pending"]
    for i, (used, waiting) in enumerate(zip(Q0_IN_USE, Q1_PENDING, strict=True)):
        rows.append(f"{T0 + 60 * i},q0,4,{used},0")
        rows.append(f"{T0 + 60 * i},q1,4,4,{waiting}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    view = run_fleet(
        FleetSources(
            sequences=[_sequence(tmp_path / "seq.csv")],
            maps=["time=time,total=total,in_use=in_use,pending=pending,queue=queue"],
        )
    )
    data = ClusterData(
        source="cluster sequence",
        start_ns=T0 * 10**9,
        end_ns=(T0 + 600) * 10**9,
        step_s=60,
        built_ns=0,
        currency="USD",
        heat=NodeHeat(),
        view=view,
        plans=run_plans(view, None, plans=True),
    )
    cfg = load_config(None, overrides={"data_dir": str(tmp_path / "store")})
    feed = ClusterFeed(cfg, build=lambda start, end: data)
    ctx = AgentContext(data_dir=tmp_path / "store", live=None, cluster=feed)
    return TestClient(create_app(ctx), base_url="http://127.0.0.1")


def test_pending_while_idle_per_minute_and_in_total(client: TestClient) -> None:
    doc = client.get("/api/cluster", params={"start_ns": T0 * 10**9, "range": "1h"}).json()
    t = doc["totals"]
    moved_gpu_h = sum(MOVABLE) * 60 / 3600
    assert t["pending_while_idle_share"] == pytest.approx(sum(m > 0 for m in MOVABLE) / 10)
    assert t["pending_while_idle_gpu_hours"] == pytest.approx(moved_gpu_h)
    assert t["pooled_allocation"] == pytest.approx((sum(Q0_IN_USE) + 40) / 80)
    assert doc["series"]["pending_while_idle"] == MOVABLE
    assert doc["series"]["pending"] == Q1_PENDING
    q = {r["queue"]: r for r in doc["queues"]}
    assert q["q1"]["waited_while_idle_gpu_hours"] == pytest.approx(moved_gpu_h)
    assert q["q0"]["idle_while_others_waited_gpu_hours"] == pytest.approx(moved_gpu_h)
    assert q["q0"]["allocation"] == pytest.approx(sum(Q0_IN_USE) / 40)
    assert q["q1"]["pending_gpu_hours"] == pytest.approx(sum(Q1_PENDING) / 60)
    # the off-peak heat map is the hour's mean demand (in use + pending): all ten minutes
    # fall in one hour of the week
    demand = [u + 4 + p for u, p in zip(Q0_IN_USE, Q1_PENDING, strict=True)]
    assert doc["offpeak"]["peak_gpus"] == pytest.approx(sum(demand) / len(demand))

    html = client.get("/cluster", params={"start_ns": T0 * 10**9}, headers={"accept": "text/html"})
    assert html.status_code == 200
    assert "20% of steps" in html.text
    assert f"{moved_gpu_h:.2g} GPU-h could have moved" in html.text


def test_without_a_source_the_page_says_how_to_get_one(tmp_path: Path) -> None:
    ctx = AgentContext(data_dir=tmp_path, live=None)  # no cluster feed
    client = TestClient(create_app(ctx), base_url="http://127.0.0.1")
    page = client.get("/cluster", headers={"accept": "text/html"})
    assert page.status_code == 200 and "run it with --prometheus URL" in page.text
