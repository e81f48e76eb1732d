"""recent_intervals (numpy over the window's Arrow tables) equals gpu_intervals (DuckDB SQL over
the same window's views): every column, type, row and value, on the simulated fleet with the
cases the SQL handles specially added, and on real dcgm-exporter pages."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from present.sim import NS, START, fleet, ticks

from gpulens import catalog
from gpulens.collect.dcgm.parse import parse_exposition
from gpulens.model import Kind, Reading
from gpulens.store.frames import COLUMNS, gpu_intervals
from gpulens.store.recent import RecentWindow
from gpulens.store.recent_frame import recent_intervals

SECONDS = 420  # 7 minutes of 1 s ticks
MIG = {"host": "sim-node-0", "gpu_uuid": "MIG-7c1e", "gpu_index": "0", "mig_instance": "1",
       "mig_profile": "1g.10gb", "parent_uuid": "GPU-a100", "gpu_model": "NVIDIA A100"}  # fmt: skip
MIG2 = {**MIG, "gpu_uuid": "MIG-7c1f", "mig_instance": "2"}
LONE = {"host": "sim-node-1", "gpu_uuid": "GPU-lone", "gpu_index": "7"}
GAP = (250, 300)  # seconds without readings of one simulated GPU (the cap is 2 s)
RESET_S = 200  # the MIG instance's energy counter restarts from zero (driver reload)
BUSY = catalog.POWER_REASON_BITS & -catalog.POWER_REASON_BITS  # one power-capping bit


def _extra(s: int, ts: int) -> list[Reading]:
    """What the simulated fleet does not produce: MIG instances reporting the clocks event
    mask only (no throttle ratios) and an energy counter that resets; processes of equal
    peak memory on one instance (ties go to the lowest pid: 999, not '1000' < '999'); app
    readings for that GPU and job-wide ones; a GPU with a single reading."""
    out: list[Reading] = []
    energy = (s - RESET_S if s >= RESET_S else s + 5000) * 40.0
    mask = float(BUSY if s % 6 == 0 else 0) + float(s % 10 == 0)  # some power, some idle
    # the first instance reports every 2 s; the second every 2 s, then every 7 s (its sampling
    # interval, the median of its buckets' spacings, differs from their mean)
    for labels, util, every in (
        (MIG, 0.3 + (s % 7) / 20, 2),
        (MIG2, (s % 5) / 5, 2 if s < 200 else 7),
    ):
        if s % every == 0:
            values = {"gpu_util_ratio": util, "sm_active_ratio": util / 2,
                      "clocks_event_reasons": mask, "energy_joules": energy,
                      "power_watts": 40.0 + s % 3, "memory_used_bytes": 1e9 + s * 1e6}  # fmt: skip
            out.append(Reading(Kind.GPU, ts, labels, values))
    if s % 2 == 0:
        for pid, job, mem in (("999", "job-a", 3e9), ("1000", "job-b", 3e9), ("5", "job-c", 1e9)):
            labels = {**MIG, "pid": pid, "job_id": job, "user": f"u{pid}"}
            out.append(Reading(Kind.PROCESS, ts, labels, {"process_memory_used_bytes": mem}))
        out.append(
            Reading(
                Kind.APP,
                ts,
                {"job_id": "job-a", "gpu_uuid": MIG["gpu_uuid"]},
                {"app_tokens_per_second": 100.0 + s},
            )
        )
        out.append(
            Reading(
                Kind.APP,
                ts,
                {"job_id": "job-a"},
                {"app_tokens_per_second": 1.0, "app_data_wait_ratio": (s % 4) / 4},
            )
        )
    if s == 130:
        out.append(Reading(Kind.GPU, ts, LONE, {"gpu_util_ratio": 0.5, "power_watts": 70.0}))
    return out


def _edit(r: Reading, s: int, gapped: str, mask_only: str) -> Reading | None:
    """Drop one GPU's readings inside GAP; strip the throttle ratios of another (only
    `clocks_event_reasons` is left)."""
    if r.kind is not Kind.GPU:
        return r
    uuid = r.labels.get("gpu_uuid")
    if uuid == gapped and GAP[0] <= s < GAP[1]:
        return None
    if uuid == mask_only:
        values = {k: v for k, v in r.values.items() if not k.startswith("throttle_")}
        return Reading(r.kind, r.ts, dict(r.labels), values)
    return r


@pytest.fixture(scope="module")
def window() -> RecentWindow:
    sim = fleet(hosts=2, gpus_per_host=4, seed=5,
                scenarios=["input_bound_training", "eager_inference", "idle_allocated",
                           "throttled"])  # fmt: skip
    win = RecentWindow(keep_s=SECONDS)
    uuids: list[str] = []
    for s, tick in enumerate(ticks(sim, 0, SECONDS)):
        if not uuids:
            uuids = sorted(str(r.labels["gpu_uuid"]) for r in tick.readings if r.kind is Kind.GPU)
        kept = [e for r in tick.readings if (e := _edit(r, s, uuids[0], uuids[1])) is not None]
        win.append(tick.ts, kept + _extra(s, tick.ts))
    return win


def _same(got: pa.Table, want: pa.Table) -> None:
    assert got.schema.equals(want.schema), (got.schema, want.schema)
    assert got.column_names == list(COLUMNS)
    assert got.num_rows == want.num_rows
    for name in want.column_names:
        for i, (a, b) in enumerate(
            zip(got.column(name).to_pylist(), want.column(name).to_pylist(), strict=True)
        ):
            if isinstance(a, float) and isinstance(b, float):
                assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (name, i, a, b)
            else:
                assert a == b, (name, i, a, b)


def _live_span(win: RecentWindow, step_s: float) -> tuple[int, int]:
    """The span LiveState refreshes: the interval still filling and the two before it."""
    assert win.latest_ns is not None
    step_ns = round(step_s * NS)
    end = (win.latest_ns // step_ns + 1) * step_ns
    return end - 3 * step_ns, end


@pytest.mark.parametrize("step_s", [60.0, 30.0, 20.0, 10.0, 1.0, 0.5])
def test_the_live_span_equals_the_sql_frame(window: RecentWindow, step_s: float) -> None:
    start, end = _live_span(window, step_s)
    want = gpu_intervals(window, step_s, start, end, use_cache=False)
    _same(recent_intervals(window, step_s, start, end), want)
    assert want.num_rows >= 8  # every simulated GPU has a row


@pytest.mark.parametrize("step_s", [60.0, 15.0])
def test_the_whole_window_equals_the_sql_frame(window: RecentWindow, step_s: float) -> None:
    want = gpu_intervals(window, step_s, use_cache=False)
    got = recent_intervals(window, step_s)
    _same(got, want)
    rows = want.to_pylist()
    mig = [r for r in rows if r["gpu_uuid"] == MIG["gpu_uuid"]]
    # the cases the fixture adds are in the frame, so they were compared above
    assert mig and all(r["mig_instance"] == "1" and r["parent_uuid"] == "GPU-a100" for r in mig)
    assert all(r["pid"] == "999" and r["job_id"] == "job-a" and r["processes"] == 3 for r in mig)
    assert all(r["process_memory_bytes"] == 7e9 for r in mig)
    assert all(r["tokens_per_s"] > 100 and r["data_wait"] is not None for r in mig)
    assert all(r["throttle_power"] is not None and r["clock_idle"] is not None for r in mig)
    assert {r["energy_j"] is None or r["energy_j"] >= 0 for r in mig} == {True}
    lone = [r for r in rows if r["gpu_uuid"] == LONE["gpu_uuid"]]
    assert len(lone) == 1 and lone[0]["samples"] == 1 and lone[0]["covered_s"] == 0.0
    assert any(r["no_data_s"] > 20 for r in rows)  # the gap
    assert any(r["host_cpu"] is not None for r in rows)
    assert any(r["job_id"] is not None and r["gpu_uuid"] != MIG["gpu_uuid"] for r in rows)


def test_a_step_finer_than_its_buckets_goes_to_sql(window: RecentWindow) -> None:
    start, end = _live_span(window, 45.0)  # coverage on 15 s buckets: the SQL path
    _same(recent_intervals(window, 45.0, start, end), gpu_intervals(window, 45.0, start, end,
                                                                     use_cache=False))  # fmt: skip


def test_an_empty_span_has_the_frame_columns(window: RecentWindow) -> None:
    got = recent_intervals(window, 60.0, START - 600 * NS, START)
    _same(got, gpu_intervals(window, 60.0, START - 600 * NS, START, use_cache=False))
    assert got.num_rows == 0
    with pytest.raises(ValueError, match="step_s"):
        recent_intervals(window, 0.0)


def test_window_tables_have_the_view_columns(window: RecentWindow) -> None:
    for kind in Kind:
        table = window.table(kind)
        view = window.query(f"SELECT * FROM {kind.value}")
        assert sorted(table.column_names) == sorted(view.column_names)
        assert table.num_rows == view.num_rows


CNCF = "data/telemetry/cncf_k8s-ai-conformance/v1.35"
PAGES = (
    "ericsson-ccd/accelerator_metrics.prom",
    "rafay/accelator_metrics.prom",
    "kops/tests/TestObservability_AcceleratorMetrics_ViaDCGM/output.prom",
    "vks/accelerator_metrics.prom",
)


def test_real_dcgm_exporter_pages(shared: Path) -> None:
    """Captured dcgm-exporter pages scraped every 5 s for 4 minutes (each page its own host),
    one page missing for a minute and one scraped only once."""
    texts = [(p, (shared / CNCF / p).read_text()) for p in PAGES]
    win = RecentWindow(keep_s=600)
    for s in range(0, 240, 5):
        ts = START + s * NS
        readings: list[Reading] = []
        for i, (name, text) in enumerate(texts):
            if (i == 1 and 60 <= s < 120) or (i == 3 and s != 100):
                continue
            readings += parse_exposition(text, name, ts, default_host=f"node-{i}").readings
        win.append(ts, readings)
    for step_s in (60.0, 10.0):
        want = gpu_intervals(win, step_s, use_cache=False)
        assert want.num_rows > 0
        _same(recent_intervals(win, step_s), want)
        start, end = _live_span(win, step_s)
        _same(recent_intervals(win, step_s, start, end),
              gpu_intervals(win, step_s, start, end, use_cache=False))  # fmt: skip


def test_importing_the_live_state_does_not_load_duckdb() -> None:
    code = "import sys, gpulens.app.live; print('duckdb' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
