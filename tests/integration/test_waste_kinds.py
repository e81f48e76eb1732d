"""What counts as waste (issue 12, section 1), end to end over the simulated demo fleet and
real captures.

Actionable waste is the not-useful time of the states a finding acts on; headroom is the
not-useful remainder of healthy `compute_tensor` intervals: shown and priced, never ranked as
a waste cause. Every report (fleet and per job over the demo fleet, which runs all nine
scenarios, a store of each scenario outside the demo, and ingested real captures) must add
up, to a relative 1e-6: allocated = useful + wasted + headroom + warm-up + unmeasured, and GPU
time = allocated + unallocated, in the totals and in `waste_by_cause`, whose every entry
carries its kind in each output format.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpulens.analyze.waste import HEADROOM_CAUSES, HEADROOM_NOTE, KINDS
from gpulens.app.analysis import ReportView, analyse
from gpulens.app.gpus import SNAPSHOT_NOTE
from gpulens.app.ingest import ingest
from gpulens.collect.simulated.scenarios import EXTRA_SCENARIOS, SCENARIOS
from gpulens.config import load_config
from gpulens.present.dashboard import Settings, analyse_window, fleet_page, resolve
from gpulens.present.reports.fleet import RENDERERS
from gpulens.store import Store

NS = 1_000_000_000
START = 1_764_374_400 * NS
DEMO_SPAN_S = 3600  # `gpulens demo`'s default duration
REL = 1e-6
Simulate = Callable[..., Any]  # the `simulated_store` fixture (tests/conftest.py)
PARTS = ("useful", "wasted", "headroom", "warmup", "unmeasured")

SNAPSHOTS = ("dcgm-t4", "nvidia-smi-a100")
REAL = {
    "acme-seren": ("data/clusters/acme-nsdi24/util_cdf_csv/util_gpu_seren.csv", "acme-nsdi24"),
    "dcgm-t4": (
        "data/telemetry/cncf_k8s-ai-conformance/v1.35/ericsson-ccd/accelerator_metrics.prom",
        None,
    ),
    "nvidia-smi-a100": (
        "data/telemetry/influxdata_telegraf/plugins/inputs/nvidia_smi/testdata/a100-sxm4-v12.xml",
        None,
    ),
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, simulated_store: Simulate) -> Any:
    """The demo fleet: 3 hosts × 4 GPUs running every scenario for the demo's hour."""
    return simulated_store(
        tmp_path_factory.mktemp("demo"), START, DEMO_SPAN_S, hosts=3, gpus_per_host=4, workers=2
    )


@pytest.fixture(scope="module")
def demo_views(demo: Any) -> dict[str, ReportView]:
    """The fleet report and one report per simulated job."""
    jobs = sorted({j["job_id"] for j in demo.ground_truth() if j["job_id"]})
    with Store(demo.data_dir) as store:
        views = {"fleet": analyse(store)}
        views.update({job: analyse(store, scope={"job_id": job}) for job in jobs})
    return views


def assert_adds_up(doc: dict[str, Any], where: str) -> None:
    """The report JSON's totals and waste_by_cause account for all GPU time, by kind."""
    t = doc["totals"]
    assert "headroom_gpu_hours" in t, where
    hours = {p: t[f"{p}_gpu_hours"] or 0.0 for p in PARTS}
    assert sum(hours.values()) == pytest.approx(t["allocated_gpu_hours"], rel=REL, abs=1e-9), (
        where,
        hours,
    )
    assert t["allocated_gpu_hours"] + t["idle_unallocated_gpu_hours"] == pytest.approx(
        t["gpu_hours"], rel=REL
    ), where
    by_kind: dict[str, float] = {}
    for w in doc["waste_by_cause"]:
        assert w["kind"] in KINDS, (where, w)
        by_kind[w["kind"]] = by_kind.get(w["kind"], 0.0) + w["gpu_hours"]
    expected = {**hours, "unallocated": t["idle_unallocated_gpu_hours"]}
    for kind, h in expected.items():
        assert by_kind.get(kind, 0.0) == pytest.approx(h, rel=REL, abs=1e-9), (where, kind)
    assert sum(by_kind.values()) == pytest.approx(t["gpu_hours"], rel=REL), where
    causes = {w["cause"] for w in doc["waste_by_cause"] if w["kind"] == "wasted"}
    assert causes.isdisjoint(HEADROOM_CAUSES), where


def ranking(doc: dict[str, Any]) -> list[str]:
    """The waste causes as the report ranks them."""
    return [w["cause"] for w in doc["waste_by_cause"] if w["kind"] == "wasted"]


def test_every_demo_report_adds_up(demo_views: dict[str, ReportView]) -> None:
    assert len(demo_views) == 1 + len(SCENARIOS)
    for name, view in demo_views.items():
        assert_adds_up(json.loads(RENDERERS["json"](view)), name)


def test_demo_fleet_ranks_the_idle_notebook_above_any_headroom(
    demo_views: dict[str, ReportView],
) -> None:
    doc = json.loads(RENDERERS["json"](demo_views["fleet"]))
    kinds = [(w["kind"], w["cause"]) for w in doc["waste_by_cause"]]
    assert ("headroom", "compute_tensor") in kinds  # the healthy training job's remainder
    assert "compute_tensor" not in ranking(doc)  # ... is not a waste cause
    assert kinds.index(("wasted", "idle_allocated")) < kinds.index(("headroom", "compute_tensor"))
    headroom = next(w for w in doc["waste_by_cause"] if w["kind"] == "headroom")
    assert headroom["total_cost"] > 0  # priced
    assert doc["totals"]["headroom_gpu_hours"] == pytest.approx(headroom["gpu_hours"], rel=REL)
    for fmt in ("terminal", "markdown", "html"):
        text = RENDERERS[fmt](demo_views["fleet"])
        idle = text.index("idle_allocated", text.index("Waste by cause"))
        assert idle < text.index("compute_tensor", idle), fmt
        assert "headroom" in text and HEADROOM_NOTE.split(";")[1].strip() in text, fmt


def test_the_healthy_training_job_has_headroom_and_no_waste_of_its_own(
    demo: Any, demo_views: dict[str, ReportView]
) -> None:
    job = next(j for j in demo.ground_truth() if j["scenario"] == "healthy_training")
    doc = json.loads(RENDERERS["json"](demo_views[job["job_id"]]))
    t = doc["totals"]
    assert t["headroom_gpu_hours"] > 0.5 * (t["allocated_gpu_hours"] - t["useful_gpu_hours"])
    assert t["wasted_gpu_hours"] < t["headroom_gpu_hours"]


def test_demo_dashboard_fleet_page_ranks_no_headroom(demo: Any) -> None:
    with Store(demo.data_dir) as store:
        window = resolve(store.time_bounds()[1], "1h")
        page = fleet_page(analyse_window(store, window, Settings()))
    kinds = [(c["kind"], c["cause"]) for c in page.waste_by_cause]
    assert ("wasted", "compute_tensor") not in kinds
    assert kinds.index(("wasted", "idle_allocated")) < kinds.index(("headroom", "compute_tensor"))
    t = page.totals
    assert sum(t[f"{p}_gpu_hours"] or 0.0 for p in PARTS) == pytest.approx(
        t["allocated_gpu_hours"], rel=REL
    )
    assert t["headroom_gpu_hours"] > 0


def test_demo_web_fleet_page_and_api_show_kinds(demo: Any) -> None:
    import warnings

    from gpulens.app.agent import AgentContext
    from gpulens.present.web.app import create_app

    with warnings.catch_warnings():  # starlette asks for httpx2, not a dependency here
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    app = create_app(AgentContext(live=None, data_dir=demo.data_dir))
    client = TestClient(app, base_url="http://127.0.0.1")  # a loopback Host, as a browser here
    response = client.get("/api/fleet?range=1h")
    api = response.json()
    assert "waste_by_cause" in api, (response.status_code, response.text[:500])
    kinds = [(c["kind"], c["cause"]) for c in api["waste_by_cause"]]
    assert kinds.index(("wasted", "idle_allocated")) < kinds.index(("headroom", "compute_tensor"))
    assert "compute_tensor" not in {c for k, c in kinds if k == "wasted"}
    assert api["totals"]["headroom_gpu_hours"] > 0
    page = client.get("/?range=1h", headers={"accept": "text/html"}).text
    table = page[page.index("<h2>Waste by cause</h2>") :]
    assert "<td>compute_tensor</td><td>headroom</td>" in table
    assert table.index("<td>idle_allocated</td><td>wasted</td>") < table.index(
        "<td>compute_tensor</td><td>headroom</td>"
    )
    assert "already efficient; the next gains come from kernel-level tuning" in table


@pytest.mark.parametrize("scenario", EXTRA_SCENARIOS)
def test_scenarios_outside_the_demo_add_up(
    scenario: str, tmp_path: Path, simulated_store: Simulate
) -> None:
    sim = simulated_store(tmp_path, START, 1200, scenarios=[scenario], workers=2)
    with Store(sim.data_dir) as store:
        assert_adds_up(json.loads(RENDERERS["json"](analyse(store))), scenario)


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_ingests_add_up(name: str, shared: Path, tmp_path: Path) -> None:
    rel, preset = REAL[name]
    cfg = load_config(None, env={}, overrides={"data_dir": str(tmp_path)})
    result = ingest(cfg, [shared / rel], None, "capture", START, preset=preset)
    assert result.readings > 0
    with Store(tmp_path) as store:
        view = analyse(store)
    doc = json.loads(RENDERERS["json"](view))
    if name in SNAPSHOTS:  # one capture covers no time (issue 16): no GPU-hours, no cost
        assert doc["totals"]["gpu_hours"] == 0.0 and doc["totals"]["total_cost"] == 0.0
        assert SNAPSHOT_NOTE in doc["notes"]
    else:
        assert doc["totals"]["gpu_hours"] > 0
    assert_adds_up(doc, name)
    if name == "acme-seren":  # profiling tier, tensor pipes busy: headroom, not waste
        assert doc["totals"]["headroom_gpu_hours"] > 0
