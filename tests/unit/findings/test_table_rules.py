"""Rules built on analyze tables: leaks, over-provisioning, engines, baselines, fairness."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from gpulens.findings.model import Severity

from .helpers import NS, STEP, T0, findings, series


def _ev(f: Any) -> dict[str, float]:
    return {e.metric: e.value for e in f.evidence}


def test_memory_leak_projects_out_of_memory() -> None:
    rate = 2e6  # bytes per second
    rows = series(120)
    for m, r in enumerate(rows):
        used = 20e9 + rate * (m * STEP + STEP / 2)
        r.update(memory_used_bytes=used, memory_used_first=used, memory_used_last=used)
    (f,), _ = findings(rows, "memory_leak")
    ev = _ev(f)
    assert ev["rate_bytes_per_second"] == pytest.approx(rate, rel=1e-6)
    last = 20e9 + rate * (119 * STEP + STEP / 2)
    assert ev["time_to_oom_s"] == pytest.approx((80e9 - last) / rate, rel=1e-6)
    assert ev["oom_at_ns"] == pytest.approx(T0 + 120 * STEP * NS + (80e9 - last) / rate * NS)
    assert f.severity is Severity.WARNING  # about 7.4 hours away
    assert "_dump_snapshot" in f.recommendation
    assert findings(series(120), "memory_leak")[0] == []


def test_overprovisioned_suggests_a_mig_profile() -> None:
    rows = series(120, gpu_model="NVIDIA A100-SXM4-80GB", duty=0.05, sm_active=0.04,
                  tensor_active=0.01, fp32_active=0.02, memory_used_bytes=5e9,
                  process_memory_bytes=5e9, sm_clock_max_hz=1.41e9, sm_clock_hz=1.41e9)  # fmt: skip
    (f,), _ = findings(rows, "overprovisioned")
    assert "1g.10gb" in f.recommendation and "nvidia.com/mig-1g.10gb" in f.recommendation
    assert _ev(f)["peak_memory_bytes"] == 5e9
    # the six sevenths a 1g slice would free, of two hours
    assert f.impact.wasted_gpu_hours == pytest.approx(2 * 6 / 7)


def test_engine_migration_from_the_activity_gap() -> None:
    rows = series(30, duty=0.95, sm_active=0.25, tensor_active=0.05, engine="pytorch",
                  process_name="python serve.py")  # fmt: skip
    (f,), _ = findings(rows, "engine_migration")
    gain = 0.75 / 0.25
    assert _ev(f)["expected_gain"] == pytest.approx(gain)
    assert "TensorRT" in f.recommendation and "estimate" in f.recommendation
    assert f.impact.wasted_gpu_hours == pytest.approx(0.5 * (1 - 1 / gain))


def _events(ts: int) -> pa.Table:
    return pa.table(
        {
            "ts": pa.array([T0, ts], pa.int64()),
            "host": ["node1", "node1"],
            "gpu_uuid": pa.array([None, None], pa.string()),
            "job_id": pa.array([None, None], pa.string()),
            "event": ["driver_version", "driver_version"],
            "message": ["NVIDIA driver 550.90", "NVIDIA driver 560.10"],
        }
    )


def test_baseline_regression_after_a_driver_change() -> None:
    rows = series(60) + series(60, first=60, tensor_active=0.35)
    change = T0 + 60 * int(STEP * NS)
    (f,), _ = findings(rows, "baseline_regression", events=_events(change))
    assert f.window[0] == change
    assert "550.90" in f.recommendation and f.severity is Severity.CRITICAL  # 0.55 → 0.35
    assert _ev(f)["relative_change"] == pytest.approx(0.35 / 0.55 - 1)
    assert findings(rows, "baseline_regression")[0] == []  # no events, no finding


def test_unfair_share_against_quotas() -> None:
    rows = []
    for g, user in enumerate(["alice", "alice", "alice", "bob"]):
        rows += series(60, gpu_uuid=f"GPU-{g}", gpu_index=str(g), user=user, job_id=f"j{g}")
    (f,), _ = findings(rows, "unfair_share", quotas={"alice": 1.0, "bob": 1.0})
    assert f.subject == {"user": "alice"}
    assert _ev(f)["allocation_over_quota"] == pytest.approx(0.75 / 0.5)
    assert "GrpTRES" in f.recommendation
    assert findings(rows, "unfair_share")[0] == []  # no quotas, no day-long monopoly
