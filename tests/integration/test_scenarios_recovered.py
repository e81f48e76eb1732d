"""End to end: simulated scenarios and real dcgm-exporter pages → store → frames → states.

Each simulated scenario fills a 1 × 4 GPU fleet for 40 minutes, generated through the real
collector path into a temporary store; the interval frame (60 s) is classified and every GPU's
dominant state after its warm-up must equal the simulation's ground truth, and the warm-up
must be found where the truth says it ends. The real pages are dcgm-exporter captures from
the CNCF Kubernetes AI conformance submissions, read in place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from gpulens.analyze.efficiency import classify
from gpulens.analyze.schema import ALL_COLUMNS, STATES
from gpulens.collect.dcgm.parse import parse_exposition
from gpulens.collect.simulated.scenarios import EXTRA_SCENARIOS, SCENARIOS
from gpulens.store import SegmentWriter, Store
from gpulens.store.frames import gpu_intervals

START = 1_764_374_400 * 1_000_000_000
SPAN_S = 40 * 60
STEP_S = 60.0
NS = 1_000_000_000
Simulate = Callable[..., Any]  # the `simulated_store` fixture (tests/conftest.py)


@pytest.fixture(scope="module", params=(*SCENARIOS, *EXTRA_SCENARIOS))
def scenario(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    simulated_store: Simulate,
) -> tuple[str, pa.Table, list[dict[str, Any]]]:
    name: str = request.param
    sim = simulated_store(tmp_path_factory.mktemp(name), START, SPAN_S, scenarios=[name], workers=2)
    with Store(sim.data_dir) as store:
        frame = classify(gpu_intervals(store, STEP_S))
    return name, frame, sim.ground_truth()


def _rows_of(frame: pa.Table, uuid: str) -> list[dict[str, Any]]:
    rows = [r for r in frame.to_pylist() if r["gpu_uuid"] == uuid]
    return sorted(rows, key=lambda r: r["start_ns"])


def test_frame_has_the_schema_columns(scenario: tuple[str, pa.Table, list[dict[str, Any]]]) -> None:
    _, frame, _ = scenario
    assert frame.column_names[: len(ALL_COLUMNS)] == list(ALL_COLUMNS)
    assert frame.num_rows == 4 * SPAN_S / STEP_S
    assert set(frame.column("state").to_pylist()) <= set(STATES)


def test_dominant_steady_state_is_the_ground_truth(
    scenario: tuple[str, pa.Table, list[dict[str, Any]]],
) -> None:
    name, frame, truth = scenario
    checked = 0
    for job in truth:
        per_gpu = job.get("gpus") or [{"uuid": job["gpu_uuids"][0], "expected_state": None}]
        steady_from = job["steady"][0] if job["job_id"] else START
        for gpu in per_gpu:
            expected = gpu["expected_state"] or job["expected_state"]
            rows = _rows_of(frame, gpu["uuid"])
            # intervals wholly inside the steady window
            steady = [
                r for r in rows if r["start_ns"] >= steady_from + (NS if job["job_id"] else 0)
            ]
            assert len(steady) >= 20, (name, gpu["uuid"])
            counts = Counter(r["state"] for r in steady)
            state, n = counts.most_common(1)[0]
            assert state == expected, (name, gpu["uuid"], counts, steady[-1]["state_reason"])
            assert n >= 0.9 * len(steady), (name, gpu["uuid"], counts)
            checked += 1
    assert checked == 4


def test_warmup_is_detected_where_it_ends(
    scenario: tuple[str, pa.Table, list[dict[str, Any]]],
) -> None:
    name, frame, truth = scenario
    for job in truth:
        if job["job_id"] is None:
            continue
        warm_start, warm_end = job["warmup"]
        for uuid in job["gpu_uuids"]:
            rows = _rows_of(frame, uuid)
            warm = [r["start_ns"] for r in rows if r["state"] == "warmup"]
            assert warm, (name, uuid, "no warm-up interval found")
            first, last_end = min(warm), max(warm) + int(STEP_S * NS)
            assert first <= warm_start < first + STEP_S * NS, (name, uuid)
            # the detected end is the first settled interval boundary after the true end
            assert warm_end - STEP_S * NS <= last_end <= warm_end + 2 * STEP_S * NS, (
                name,
                uuid,
                (last_end - START) / NS,
                (warm_end - START) / NS,
            )


# -- real dcgm-exporter pages --------------------------------------------------------------------

PAGES = "data/telemetry/cncf_k8s-ai-conformance/v1.35"
LOADED_T4 = "ericsson-ccd/accelerator_metrics.prom"
IDLE_PAGES = (
    "kops/tests/TestObservability_AcceleratorMetrics_ViaDCGM/output.prom",  # L4
    "rafay/accelator_metrics.prom",  # T4
)


def _page_frame(shared: Path, rel: str, tmp_path: Path) -> dict[str, Any]:
    text = (shared / PAGES / rel).read_text(encoding="utf-8")
    ts = START + 30 * NS
    result = parse_exposition(text, rel, ts, default_host="capture")
    with SegmentWriter(tmp_path, "capture") as writer:
        writer.append(result.readings)
    with Store(tmp_path) as store:
        frame = classify(gpu_intervals(store, STEP_S))
    assert frame.num_rows == 1
    row: dict[str, Any] = frame.to_pylist()[0]
    return row


def test_loaded_t4_is_hollow_busy_and_power_capped(shared: Path, tmp_path: Path) -> None:
    row = _page_frame(shared, LOADED_T4, tmp_path)
    assert row["gpu_model"] == "Tesla T4"
    assert row["tier"] == "profiling"
    assert row["state"] == "hollow_busy", row["state_reason"]
    assert row["duty"] == pytest.approx(0.91)
    assert row["graphics_active"] == pytest.approx(0.156205, abs=1e-4)  # stored at 1e-4
    # No throttle flags on this page: the cap is derived from power/limit and clock/max, with
    # the limit (70 W) and the maximum clock (1590 MHz) from the T4 datasheet.
    assert row["throttle_power"] is None and row["sm_clock_max_hz"] is None
    assert row["power_capped"] is True
    assert "power-capped: 68.2 W of 70 W, SM clock 660 of 1590 MHz" in row["state_reason"]


@pytest.mark.parametrize("rel", IDLE_PAGES)
def test_idle_pages_are_idle_unallocated(shared: Path, tmp_path: Path, rel: str) -> None:
    row = _page_frame(shared, rel, tmp_path)
    assert row["state"] == "idle_unallocated", row["state_reason"]
    assert row["power_capped"] is not True
