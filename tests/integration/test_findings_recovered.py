"""End to end: every simulated scenario's expected findings, and the real dcgm-exporter pages.

One 4 × 4 simulated fleet runs all nine scenarios and the extra light-inference one for two
hours (long enough to fit the leak's slope), generated once for the module through the real
collector path into a temporary store; the 60 s interval frame goes through `build_context`
and `run_rules`. The
scenarios are placed so that the input-bound job, whose data pipeline saturates its host's
CPU, shares its host only with jobs whose state outranks input_bound (throttled, idle): the
host CPU is a host-wide signal. The real pages are dcgm-exporter captures from the CNCF
Kubernetes AI conformance submissions, read in place.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from gpulens.collect.dcgm.parse import parse_exposition
from gpulens.findings.engine import build_context, run_rules
from gpulens.findings.model import Finding, Severity
from gpulens.store import SegmentWriter, Store
from gpulens.store.frames import gpu_intervals

START = 1_764_374_400 * 1_000_000_000
SPAN_S = 2 * 3600
STEP_S = 60.0
NS = 1_000_000_000
# First-fit placement: 4-GPU jobs on hosts 0 and 1, then four singles on host 2 and the rest
# (input-bound with throttled and idle, which outrank it, and the light inference) on host 3.
ORDER = [
    "healthy_training",
    "straggler_ddp",
    "eager_inference",
    "tensorrt_inference",
    "memory_leak",
    "fp32_training",
    "input_bound_training",
    "throttled",
    "idle_allocated",
    "light_inference",  # not in the default mix: the over-provisioned ("GPU too powerful") job
]
# The simulation's name for a finding → the rule that reports it.
ALIASES = {"move_to_tensorrt": "engine_migration"}
EFFICIENCY = {
    "idle_allocated", "hollow_busy", "memory_bound", "input_bound", "comm_bound", "straggler",
    "low_tensor_use", "throttled", "engine_migration", "overprovisioned",
}  # fmt: skip

Fleet = tuple[list[Finding], list[dict[str, Any]]]
Simulate = Callable[..., Any]  # the `simulated_store` fixture (tests/conftest.py)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, simulated_store: Simulate) -> Fleet:
    data_dir = tmp_path_factory.mktemp("findings")
    sim = simulated_store(data_dir, START, SPAN_S, hosts=4, scenarios=ORDER, workers=2)
    with Store(data_dir) as store:
        frame = gpu_intervals(store, STEP_S)
        events = store.query("SELECT * FROM event")
    ctx = build_context(frame, events)
    found = run_rules(ctx)
    assert ctx.errors == []
    return found, sim.ground_truth()


def _job(truth: list[dict[str, Any]], scenario: str) -> dict[str, Any]:
    return next(j for j in truth if j["scenario"] == scenario)


def _of_job(found: list[Finding], job_id: str) -> list[Finding]:
    return [f for f in found if job_id in f.subject.get("job_id", "").split(",")]


@pytest.mark.parametrize("scenario", ORDER)
def test_expected_findings_are_produced(fleet: Fleet, scenario: str) -> None:
    found, truth = fleet
    job = _job(truth, scenario)
    mine = _of_job(found, job["job_id"])
    rules = {f.rule_id for f in mine}
    for expected in job["expected_findings"]:
        rule = ALIASES.get(expected["rule_id"], expected["rule_id"])
        assert rule in rules, (scenario, rule, [(f.rule_id, f.summary) for f in mine])
    for f in mine:
        assert f.docs == f"docs/findings/{f.rule_id}.md"
        assert f.recommendation and f.evidence
        assert f.window[0] >= job["start_ns"] - int(STEP_S * NS)


def test_healthy_training_yields_no_efficiency_finding(fleet: Fleet) -> None:
    found, truth = fleet
    job = _job(truth, "healthy_training")
    assert _of_job(found, job["job_id"]) == []


def test_straggler_names_the_slow_gpu(fleet: Fleet) -> None:
    found, truth = fleet
    job = _job(truth, "straggler_ddp")
    slow = next(f for f in job["expected_findings"] if f["rule_id"] == "straggler")["gpu_uuid"]
    (straggler,) = [f for f in _of_job(found, job["job_id"]) if f.rule_id == "straggler"]
    assert straggler.subject["gpu_uuid"] == slow
    index = next(g["index"] for g in job["gpus"] if g["uuid"] == slow)
    assert straggler.subject["gpu_index"] == str(index)
    # its peers' waiting is the straggler's cost; comm_bound does not count it again
    assert straggler.impact.wasted_gpu_hours > 0
    assert "comm_bound" not in {f.rule_id for f in _of_job(found, job["job_id"])}


def test_memory_leak_projects_the_out_of_memory_time(fleet: Fleet) -> None:
    found, truth = fleet
    job = _job(truth, "memory_leak")
    expected = next(f for f in job["expected_findings"] if f["rule_id"] == "memory_leak")
    (leak,) = [f for f in _of_job(found, job["job_id"]) if f.rule_id == "memory_leak"]
    values = {e.metric: e.value for e in leak.evidence}
    assert values["rate_bytes_per_second"] == pytest.approx(
        expected["rate_bytes_per_second"], rel=0.05
    )
    horizon = expected["oom_at_ns"] - leak.window[1]
    assert values["oom_at_ns"] == pytest.approx(expected["oom_at_ns"], abs=0.05 * horizon)
    assert leak.severity is Severity.WARNING  # hours away: not yet critical


def test_light_inference_is_only_overprovisioned(fleet: Fleet) -> None:
    found, truth = fleet
    job = _job(truth, "light_inference")
    mine = _of_job(found, job["job_id"])
    assert {f.rule_id for f in mine} & EFFICIENCY == {"overprovisioned"}
    (over,) = [f for f in mine if f.rule_id == "overprovisioned"]
    # 3 GiB (plus margin) and a tenth of the SMs fit the smallest H100 80GB slice
    assert "1g.10gb" in over.recommendation


def test_tensorrt_inference_has_no_warning(fleet: Fleet) -> None:
    found, truth = fleet
    job = _job(truth, "tensorrt_inference")
    assert all(f.severity is Severity.INFO for f in _of_job(found, job["job_id"]))


# -- real dcgm-exporter pages --------------------------------------------------------------------

PAGES = "data/telemetry/cncf_k8s-ai-conformance/v1.35"
LOADED_T4 = "ericsson-ccd/accelerator_metrics.prom"
IDLE_PAGES = (
    "kops/tests/TestObservability_AcceleratorMetrics_ViaDCGM/output.prom",  # L4
    "rafay/accelator_metrics.prom",  # T4
)


def _page_findings(shared: Path, rel: str, tmp_path: Path) -> list[Finding]:
    text = (shared / PAGES / rel).read_text(encoding="utf-8")
    result = parse_exposition(text, rel, START + 30 * NS, default_host="capture")
    with SegmentWriter(tmp_path, "capture") as writer:
        writer.append(result.readings)
    with Store(tmp_path) as store:
        frame: pa.Table = gpu_intervals(store, STEP_S)
    assert frame.num_rows == 1  # a single scrape: its interval is all the frame shows
    ctx = build_context(frame)
    found = run_rules(ctx)
    assert ctx.errors == []
    return found


def test_loaded_t4_page_is_a_throttled_snapshot(shared: Path, tmp_path: Path) -> None:
    # one page covers no time (issue 16): no duration-based finding, the instant's state only
    found = _page_findings(shared, LOADED_T4, tmp_path)
    assert [f.rule_id for f in found] == ["snapshot_state"]
    shot = found[0]
    assert shot.severity.value == "info" and shot.subject["snapshot"] == "true"
    assert "clocks held down now: 660 MHz at 68.2 W of its 70.0 W limit" in shot.summary
    assert shot.subject["gpu_model"] == "Tesla T4"
    assert shot.impact.wasted_gpu_hours == 0.0


@pytest.mark.parametrize("rel", IDLE_PAGES)
def test_idle_pages_yield_no_efficiency_finding(shared: Path, tmp_path: Path, rel: str) -> None:
    found = _page_findings(shared, rel, tmp_path)
    assert [f.rule_id for f in found if f.rule_id in EFFICIENCY] == []
