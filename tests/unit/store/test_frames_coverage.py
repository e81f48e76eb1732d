"""The coverage rule in the frame builder (store/coverage.py), on real dcgm-exporter pages
replayed as scrapes: each reading covers the time to the next reading of its GPU, capped at
twice the sampling interval; the rest of a gap is no data; a lone page covers nothing. Raw
rows and the frames cache agree, at every step, across a day boundary."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from itertools import pairwise
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gpulens.collect.dcgm.parse import parse_exposition
from gpulens.model import Kind, Reading
from gpulens.store import SegmentWriter, Store
from gpulens.store.frame_cache import CacheStats
from gpulens.store.frames import gpu_intervals, materialize_day

NS = 1_000_000_000
MIDNIGHT = 1_764_460_800 * NS  # 2025-11-30 00:00 UTC
PAGES = "data/telemetry/cncf_k8s-ai-conformance/v1.35"
IDLE_T4 = f"{PAGES}/rafay/accelator_metrics.prom"
L4 = f"{PAGES}/kops/tests/TestObservability_AcceleratorMetrics_ViaDCGM/output.prom"
# 15 s scrapes from 23:00 on 2025-11-29 to 01:00 on 2025-11-30, two missed scrapes at 23:30
# (a 45 s gap: 30 s covered, 15 s no data) and an outage from 00:20 to 00:40 (20 min gap)
SCRAPES = [
    MIDNIGHT + s * NS
    for s in range(-3600, 3600, 15)
    if s not in (-1800 + 15, -1800 + 30) and not 1200 < s < 2400
]


def _page(shared: Path, rel: str) -> list[Reading]:
    text = (shared / rel).read_text(encoding="utf-8")
    return [r for r in parse_exposition(text, rel, 0, "node").readings if r.kind is Kind.GPU]


def _expected(times: list[int], cap: int) -> tuple[float, float]:
    """(covered, no data) seconds by the rule, from the times one by one."""
    covered = no_data = 0
    for a, b in pairwise(times):
        covered += min(b - a, cap)
        no_data += max(b - a - cap, 0)
    covered += cap // 2  # the last reading: one sampling interval
    return covered / NS, no_data / NS


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> Path:
    path: Path = tmp_path_factory.mktemp("coverage")
    t4 = _page(shared, IDLE_T4)
    readings = [replace(r, ts=ts) for ts in SCRAPES for r in t4]
    readings += [replace(r, ts=MIDNIGHT + 600 * NS) for r in _page(shared, L4)[:1]]  # once
    with SegmentWriter(path, "node") as writer:
        writer.append(readings)
    return path


def _totals(frame: pa.Table, uuid: str) -> tuple[float, float]:
    mine = frame.filter(pc.equal(frame["gpu_uuid"], uuid))
    return float(pc.sum(mine["covered_s"]).as_py()), float(pc.sum(mine["no_data_s"]).as_py())


@pytest.mark.parametrize("step", [15.0, 60.0, 300.0, 900.0, 3600.0])
def test_scrapes_with_misses_and_an_outage(root: Path, step: float) -> None:
    covered, no_data = _expected(SCRAPES, 30 * NS)
    assert no_data == 15 + (1200 - 30)  # the missed scrapes, the outage (beyond the 30 s cap)
    with Store(root) as store:
        frame = gpu_intervals(store, step, use_cache=False)
    t4 = _page_uuid(frame, "Tesla T4")
    assert _totals(frame, t4) == pytest.approx((covered, no_data))


def _page_uuid(frame: pa.Table, model: str) -> str:
    rows = frame.filter(pc.equal(frame["gpu_model"], model))
    return str(rows["gpu_uuid"][0])


def test_a_lone_page_covers_nothing(root: Path) -> None:
    with Store(root) as store:
        frame = gpu_intervals(store, 60.0, use_cache=False)
    l4 = frame.filter(pc.equal(frame["gpu_model"], "NVIDIA L4"))
    assert l4.num_rows == 1
    assert l4["covered_s"].to_pylist() == [0.0] and l4["no_data_s"].to_pylist() == [0.0]


@pytest.mark.parametrize("step", [60.0, 300.0, 900.0, 3600.0, 7200.0])
def test_cache_and_raw_rows_agree(root: Path, step: float) -> None:
    materialize_day(root, date(2025, 11, 29))
    materialize_day(root, date(2025, 11, 30))
    with Store(root) as store:
        stats = CacheStats()
        cached = gpu_intervals(store, step, cache_stats=stats)
        raw = gpu_intervals(store, step, use_cache=False)
    assert stats.days_cached == 2
    for col in ("start_ns", "gpu_uuid", "samples"):
        assert cached[col].to_pylist() == raw[col].to_pylist()
    for col in ("covered_s", "no_data_s", "energy_power_j"):
        assert cached[col].to_pylist() == pytest.approx(raw[col].to_pylist(), nan_ok=True)


def test_a_configured_cap(root: Path) -> None:
    with Store(root) as store:
        frame = gpu_intervals(store, 300.0, max_gap_s=3600.0)
    t4 = _page_uuid(frame, "Tesla T4")
    covered, no_data = _totals(frame, t4)
    assert no_data == 0.0  # every gap is within an hour
    assert covered == pytest.approx((SCRAPES[-1] - SCRAPES[0]) / NS + 15)  # last: 15 s


def test_the_dashboard_and_the_agent_take_the_configured_cap(root: Path) -> None:
    """`analysis.max_gap_seconds` reaches every reader of the frame: the report, the agent's
    findings pass (its context's analysis settings) and the dashboard's pages."""
    from gpulens.app.agent import context_from_config
    from gpulens.config import load_config
    from gpulens.present.dashboard.common import Settings, analyse_window
    from gpulens.present.dashboard.window import Window

    cfg = load_config(env={}, overrides={"data_dir": str(root), "analysis.max_gap_seconds": 3600})
    ctx = context_from_config(cfg)
    assert ctx.analysis["max_gap_s"] == 3600.0
    settings = Settings.of(ctx.prices, ctx.region, ctx.quotas, ctx.analysis)
    window = Window(MIDNIGHT - 3600 * NS, MIDNIGHT + 3600 * NS, 300)
    with Store(root) as store:
        capped = analyse_window(store, window, settings)
        default = analyse_window(store, window, Settings())
    assert capped.context is not None and default.context is not None
    assert _totals(capped.context.frame, _page_uuid(capped.context.frame, "Tesla T4"))[1] == 0.0
    assert _totals(default.context.frame, _page_uuid(default.context.frame, "Tesla T4"))[1] > 0.0
