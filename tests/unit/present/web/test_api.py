"""The JSON API: page data over a small simulated store, validation, uploads, read-only."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi import FastAPI

from gpulens.findings.context import FindingThresholds

from .helpers import SCENARIOS, TestClient, kineto

RANGE = "?range=1h"
PAGE_DATA = re.compile(r'<script type="application/json" id="page-data">(.*?)</script>', re.S)


def test_fleet_adds_up(client: TestClient) -> None:
    page = client.get(f"/api/fleet{RANGE}").json()
    t = page["totals"]
    assert t["gpus"] == 4
    assert t["useful_gpu_hours"] < t["allocated_gpu_hours"] <= t["gpu_hours"]
    causes = page["waste_by_cause"]
    assert sum(c["gpu_hours"] for c in causes) == pytest.approx(t["gpu_hours"])
    hm = page["heatmap"]
    assert len(hm["gpus"]) == 4 and len(hm["useful"]) == 4
    assert all(len(row) == len(hm["times_ns"]) for row in hm["useful"])
    assert len(page["timeline"]["useful"]) == len(page["timeline"]["times_ns"]) == 60
    assert page["window"]["step_s"] == 60


def test_workloads_separate_the_engines(client: TestClient) -> None:
    page = client.get(f"/api/workloads{RANGE}").json()
    kinds = {s["engine"]: s["kind"] for s in page["stack"]}
    assert kinds["pytorch"] == "native" and kinds["tensorrt"] == "optimised"
    engines = {e["engine"]: e for e in page["engines"]}
    assert engines["tensorrt"]["mean_sm_active"] > engines["pytorch"]["mean_sm_active"]
    assert page["migrations"] and page["migrations"][0]["target_engine"] == "tensorrt"


def test_people_cards_and_fairness(client: TestClient) -> None:
    page = client.get(f"/api/people{RANGE}&by=user").json()
    assert page["jobs_total"] == len(SCENARIOS)
    assert {c["kind"] for c in page["jobs"]} == {"job"}
    assert page["fairness"]["by"] == "user" and page["fairness"]["rows"]
    idle = next(c for c in page["jobs"] if c["top_waste_cause"] == "idle_allocated")
    assert idle["efficiency"] < 0.05


def test_fairness_follows_the_configured_quota_group(
    client: TestClient, make_app: Callable[..., FastAPI]
) -> None:
    assert client.get(f"/api/people{RANGE}").json()["fairness"]["by"] == "team"  # the default
    by_project = TestClient(
        make_app(analysis={"finding_thresholds": FindingThresholds(unfair_by="project")})
    )
    page = by_project.get(f"/api/people{RANGE}").json()
    assert page["fairness"]["by"] == "project"
    rows = page["fairness"]["rows"]
    assert rows and all(r.get("project") for r in rows)


def test_findings_link_to_their_gpu_window(client: TestClient) -> None:
    page = client.get(f"/api/findings{RANGE}").json()
    assert page["total"] == len(page["findings"]) > 0
    for f in page["findings"]:
        assert f["evidence"] and f["recommendation"]
        link = f["chart"]
        assert link is not None
        assert link["start_ns"] <= f["start_ns"] and link["end_ns"] >= f["end_ns"]
        bounds = {"start_ns": link["start_ns"], "end_ns": link["end_ns"]}
        gpu = client.get(f"/api/gpus/{link['gpu_uuid']}", params=bounds)
        assert gpu.status_code == 200
    one = page["findings"][0]["rule_id"]
    only = client.get(f"/api/findings{RANGE}&rule={one}").json()
    assert {f["rule_id"] for f in only["findings"]} == {one}


def test_gpu_page_has_series_warmups_and_events(client: TestClient) -> None:
    gpus = client.get("/api/gpus").json()
    assert len(gpus) == 4
    pages = [client.get(f"/api/gpus/{g['gpu_uuid']}{RANGE}").json() for g in gpus]
    busy = [p for p in pages if p["jobs"]]
    assert busy and all(p["warmups"] for p in busy)
    assert any(e["category"] == "engine_build" for p in pages for e in p["events"])
    for p in pages:
        n = len(p["times_ns"])
        assert all(len(v) == n for v in p["series"].values())


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("/api/fleet?range=2h", "Input should be '1h', '6h', '24h' or '7d'"),
        ("/api/fleet?points=1", "greater than or equal to 24"),
        ("/api/fleet?start_ns=-1", "greater than or equal to 0"),
        ("/api/fleet?start_ns=abc", "valid integer"),
        ("/api/fleet?start_ns=20&end_ns=10", "is not before end_ns"),
        ("/api/people?by=planet", "Input should be 'user', 'team' or 'project'"),
        ("/api/findings?severity=bad", "Input should be 'critical', 'warning' or 'info'"),
        ("/api/findings?rule=nope", "rule: String should match pattern '^(baseline_regression|"),
        ("/api/findings?limit=-3", "greater than or equal to 0"),
        ("/api/traces/analysis?name=../../etc/passwd", "not a relative path"),
        ("/api/traces/uploads/xyz", "String should match pattern"),
    ],
)
def test_bad_parameters_are_422_with_a_reason(client: TestClient, url: str, fragment: str) -> None:
    r = client.get(url)
    assert r.status_code == 422
    assert fragment in json.dumps(r.json())


def test_unknown_things_are_404(client: TestClient) -> None:
    assert client.get("/api/gpus/GPU-none").status_code == 404
    assert client.get("/api/traces/analysis?name=missing.json").status_code == 404
    assert client.get("/api/traces/uploads/" + "0" * 32).status_code == 404


@pytest.mark.parametrize("method", ["put", "delete", "patch"])
def test_the_api_is_read_only(client: TestClient, method: str) -> None:
    assert getattr(client, method)("/api/fleet").status_code == 405


def test_listed_trace_analyses(client: TestClient) -> None:
    listed = {e["name"] for e in client.get("/api/traces").json()}
    assert {"run1.json", "job"} <= listed
    page = client.get("/api/traces/analysis?dir=0&name=job").json()
    assert len(page["ranks"]) == 2 and page["cluster"]["ranks"] == 2


#: how the dashboard sends a trace (a simple content type would be refused as cross-site)
BINARY = {"content-type": "application/octet-stream"}


def test_upload_analyses_and_keeps_the_result(client: TestClient) -> None:
    body = gzip.compress(json.dumps(kineto()).encode())
    r = client.post("/api/traces/upload?name=mine.json.gz", content=body, headers=BINARY)
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["size_bytes"] == len(body) and result["page"]["source"] == "mine.json.gz"
    again = client.get(f"/api/traces/uploads/{result['id']}").json()
    assert again["ranks"][0]["file"] == result["page"]["ranks"][0]["file"]
    assert client.get(f"/traces?upload={result['id']}").status_code == 200


def test_upload_of_garbage_is_422_without_server_paths(client: TestClient) -> None:
    r = client.post("/api/traces/upload?name=bad.json", content=b"{not json", headers=BINARY)
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert detail.startswith("bad.json:") and "gpulens-upload" not in detail
    assert client.post("/api/traces/upload", content=b"", headers=BINARY).status_code == 422


def test_upload_over_the_limit_is_413(make_app: Callable[..., FastAPI]) -> None:
    small = TestClient(make_app(max_upload_bytes=1024))
    body = json.dumps(kineto(200)).encode()
    r = small.post("/api/traces/upload?name=big.json", content=body, headers=BINARY)
    assert r.status_code == 413 and "limit" in r.json()["detail"]

    def chunks() -> object:  # no Content-Length: counted while streaming
        for i in range(0, len(body), 256):
            yield body[i : i + 256]

    r = small.post("/api/traces/upload?name=big.json", content=chunks(), headers=BINARY)
    assert r.status_code == 413


def test_the_agents_trace_limits_bound_uploads_and_opened_traces(
    make_app: Callable[..., FastAPI],
) -> None:
    """The `limits.*` of the agent's configuration (its context), not only the environment's."""
    from gpulens.analyze.traces.limits import TraceLimits
    from gpulens.app.agent import context_from_config
    from gpulens.config import load_config

    cfg = load_config(env={}, overrides={"limits.max_events": 5})
    limits = context_from_config(cfg).trace_limits
    assert limits.max_events == 5
    strict = TestClient(make_app(trace_limits=limits))
    body = json.dumps(kineto(20)).encode()
    r = strict.post("/api/traces/upload?name=many.json", content=body, headers=BINARY)
    assert r.status_code == 413 and "limits.max_events" in r.json()["detail"], r.text
    r = strict.get("/api/traces/analysis?dir=0&name=run1.json")
    assert r.status_code == 413 and "limits.max_events" in r.json()["detail"], r.text
    roomy = TestClient(make_app(trace_limits=TraceLimits(max_events=10_000)))
    r = roomy.post("/api/traces/upload?name=many.json", content=body, headers=BINARY)
    assert r.status_code == 200, r.text


def test_openapi_describes_every_endpoint(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    paths = set(schema["paths"])
    assert {"/api/now", "/api/fleet", "/api/gpus/{gpu_uuid}", "/api/workloads", "/api/people",
            "/api/findings", "/api/traces", "/api/traces/analysis", "/api/traces/upload",
            "/metrics"} <= paths  # fmt: skip
    fleet = schema["paths"]["/api/fleet"]["get"]
    assert fleet["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "FleetPage"
    )
    assert all(p.startswith(("/api/", "/metrics")) for p in paths)


def test_pages_render(client: TestClient) -> None:
    uuid = client.get("/api/gpus").json()[0]["gpu_uuid"]
    for path in ["/", "/gpus", f"/gpus/{uuid}", "/workloads", "/people", "/findings",
                 "/traces", "/traces?dir=0&name=run1.json"]:  # fmt: skip
        r = client.get(path + ("&" if "?" in path else "?") + "range=1h")
        assert r.status_code == 200, path
        assert "/static/plotly.min.js" in r.text
        assert r.headers["content-security-policy"].startswith("default-src 'self'")
        data = json.loads(PAGE_DATA.search(r.text).group(1))  # type: ignore[union-attr]
        if data["refresh"]:
            fresh = client.get(data["refresh"])
            assert fresh.status_code == 200, data["refresh"]
            assert fresh.json()["figures"].keys() == data["figures"].keys()


def test_page_errors_are_html(client: TestClient) -> None:
    r = client.get("/gpus/GPU-none", headers={"accept": "text/html"})
    assert r.status_code == 404 and "<h1>404</h1>" in r.text
    r = client.get("/findings?range=9y", headers={"accept": "text/html"})
    assert r.status_code == 422 and "range" in r.text


def test_plotly_is_served_locally(client: TestClient) -> None:
    r = client.get("/static/plotly.min.js")
    assert r.status_code == 200 and len(r.content) > 1_000_000
    assert r.headers["content-encoding"] == "gzip"
    assert client.get("/static/../app.py").status_code == 404


def test_an_empty_store_serves_empty_pages(
    make_app: Callable[..., FastAPI], tmp_path: Path
) -> None:
    empty = TestClient(make_app(data_dir=tmp_path / "none"))
    for path in ["/api/fleet", "/api/workloads", "/api/people", "/api/findings", "/api/gpus",
                 "/", "/gpus", "/workloads", "/people", "/findings", "/charts/fleet"]:  # fmt: skip
        assert empty.get(path).status_code == 200, path
    assert empty.get("/api/fleet").json()["notes"] == ["no GPU readings in this window"]
    assert empty.get("/api/gpus/GPU-0").status_code == 404
