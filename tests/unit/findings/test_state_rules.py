"""The state-based rules on small hand-built frames; expected numbers computed here."""

from __future__ import annotations

from typing import Any

import pytest

from gpulens.findings.context import FindingThresholds
from gpulens.findings.model import Severity

from .helpers import BASE, IDLE, NS, STEP, T0, ddp_rows, findings, series


def _ev(f: Any) -> dict[str, float]:
    return {e.metric: e.value for e in f.evidence}


def test_idle_allocated_after_an_hour_warns_and_after_two_is_critical() -> None:
    busy = series(10)
    (f,), ctx = findings(busy + series(130, first=10, **IDLE), "idle_allocated")
    assert f.severity is Severity.CRITICAL
    assert f.window == (T0 + 10 * 60 * NS, T0 + 140 * 60 * NS)
    assert f.impact.wasted_gpu_hours == pytest.approx(130 / 60)
    # cost: the GPU-hour price share of those rows, all of it wasted
    price = ctx.frame.column("price_per_gpu_hour")[0].as_py()
    assert f.impact.cost == pytest.approx(price * 130 / 60)
    assert f.impact.energy_kwh == pytest.approx(130 * 600 * STEP / 3.6e6)
    assert f.subject["job_id"] == "job-1" and f.subject["gpu_index"] == "0"
    assert "50.0 GB" in f.recommendation and "cull_idle_timeout" in f.recommendation
    (f,), _ = findings(busy + series(70, first=10, **IDLE), "idle_allocated")
    assert f.severity is Severity.WARNING
    # under an hour is info now (the ladder starts at 10 min), not dropped
    (f,), _ = findings(busy + series(50, first=10, **IDLE) + series(5, first=60), "idle_allocated")
    assert f.severity is Severity.INFO


@pytest.mark.parametrize(
    ("idle_min", "expected"),
    [
        (9, None),
        (10, Severity.INFO),
        (56, Severity.INFO),
        (59, Severity.INFO),
        (60, Severity.WARNING),
        (119, Severity.WARNING),
        (120, Severity.CRITICAL),
    ],
)
def test_idle_ladder_is_info_warning_critical_at_10_60_120_min(
    idle_min: int, expected: Severity | None
) -> None:
    rows = series(10) + series(idle_min, first=10, **IDLE) + series(5, first=10 + idle_min)
    out, _ = findings(rows, "idle_allocated")
    assert [f.severity for f in out] == ([] if expected is None else [expected])


def test_idle_ladder_follows_the_configured_thresholds() -> None:
    rows = series(10) + series(40, first=10, **IDLE) + series(5, first=50)
    short = FindingThresholds(idle_info_s=5 * 60, idle_warn_s=30 * 60, idle_critical_s=45 * 60)
    (f,), _ = findings(rows, "idle_allocated", thresholds=short)
    assert f.severity is Severity.WARNING


def test_a_partly_sampled_interval_counts_for_its_share() -> None:
    # 10 idle minutes, the last interval holding a sixth of the samples of the others: the run
    # covers 9 min 10 s, under the 10-minute minimum, so it is not (yet) a finding
    idle = series(10, first=10, samples=60, **IDLE)
    idle[-1] = {**idle[-1], "samples": 10}
    out, _ = findings(
        series(10, samples=60) + idle + series(5, first=20, samples=60), "idle_allocated"
    )
    assert out == []
    idle[-1] = {**idle[-1], "samples": 60}
    (f,), _ = findings(
        series(10, samples=60) + idle + series(5, first=20, samples=60), "idle_allocated"
    )
    assert _ev(f)["idle_seconds"] == pytest.approx(600.0)


def test_hollow_busy_quotes_duty_sm_and_memory_headroom() -> None:
    rows = series(20, duty=0.95, sm_active=0.3, tensor_active=0.05, memory_used_bytes=20e9)
    (f,), _ = findings(rows, "hollow_busy")
    ev = _ev(f)
    assert ev["duty"] == pytest.approx(0.95) and ev["sm_active"] == pytest.approx(0.3)
    assert "60.0 GB free" in f.recommendation and "CUDA graphs" in f.recommendation
    # 1 − useful ratio (the busiest pipe, 0.08 FP32) of 20 minutes
    assert f.impact.wasted_gpu_hours == pytest.approx(20 / 60 * (1 - 0.08))


def test_memory_bound_is_info_on_an_optimised_engine() -> None:
    rows = series(20, dram_active=0.8, tensor_active=0.2, sm_active=0.7)
    (eager,), _ = findings(rows, "memory_bound")
    assert eager.severity is Severity.INFO  # 20 min, 0.27 GPU-hours: below the warning line
    (eager,), _ = findings(series(70, dram_active=0.8, tensor_active=0.2), "memory_bound")
    assert eager.severity is Severity.WARNING and "torch.autocast" in eager.recommendation
    (trt,), _ = findings(series(20, dram_active=0.8, tensor_active=0.2, sm_active=0.7,
                                engine="tensorrt"), "memory_bound")  # fmt: skip
    assert trt.severity is Severity.INFO and "FP8" in trt.recommendation


def test_input_bound_recommends_dataloader_settings() -> None:
    rows = series(15, sm_active=0.4, tensor_active=0.2, data_wait=0.5, host_cpu=0.5)
    (f,), _ = findings(rows, "input_bound")
    assert _ev(f)["data_wait"] == pytest.approx(0.5)
    for knob in ("num_workers", "pin_memory=True", "persistent_workers=True", "prefetch_factor"):
        assert knob in f.recommendation
    assert "raising `num_workers` is the first step" in f.recommendation


def test_straggler_names_the_slow_gpu_and_comm_bound_defers() -> None:
    rows = ddp_rows([[0.6] * 15, [0.92] * 15, [0.6] * 15], [1.98e9, 1.5e9, 1.98e9])
    (f,), ctx = findings(rows, "straggler")
    assert f.subject["gpu_uuid"] == "GPU-1" and f.subject["gpu_index"] == "1"
    ev = _ev(f)
    assert ev["share_slowest"] == 1.0
    assert ev["sm_clock_hz"] == pytest.approx(1.5e9)
    assert "1500 MHz against 1980 MHz" in f.recommendation
    # the impact is the two peers' waiting
    rows_ = ctx.frame.to_pylist()
    waiting = sum(r["wasted_s"] for r in rows_ if r["gpu_uuid"] != "GPU-1")
    assert f.impact.wasted_gpu_hours == pytest.approx(waiting / 3600)
    out, _ = findings(rows, "comm_bound")
    assert out == []


def test_comm_bound_when_no_single_gpu_is_slow() -> None:
    a = [0.92 if m % 2 else 0.6 for m in range(16)]
    b = [0.6 if m % 2 else 0.92 for m in range(16)]
    rows = ddp_rows([a, b], [1.98e9, 1.98e9])
    assert findings(rows, "straggler")[0] == []
    (f,), _ = findings(rows, "comm_bound")
    assert "bucket_cap_mb" in f.recommendation and "no_sync" in f.recommendation


def test_low_tensor_use_quotes_the_peaks() -> None:
    rows = series(15, tensor_active=0.01, fp32_active=0.7, sm_active=0.9)
    (f,), _ = findings(rows, "low_tensor_use")
    assert "torch.bfloat16" in f.recommendation and "989" in f.recommendation
    assert "allow_tf32" in f.recommendation
    # a T4 has FP16 tensor cores and no BF16: FP16 with a GradScaler
    t4_rows = series(15, tensor_active=0.01, fp32_active=0.7, gpu_model="Tesla T4",
                     sm_clock_max_hz=1.59e9, sm_clock_hz=1.59e9)  # fmt: skip
    (t4,), _ = findings(t4_rows, "low_tensor_use")
    assert "torch.float16" in t4.recommendation and "GradScaler" in t4.recommendation


def test_throttled_names_thermal_and_power_causes() -> None:
    hot = series(15, sm_clock_hz=1.5e9, throttle_thermal=1.0, temperature_c=88.0)
    (f,), _ = findings(hot, "throttled")
    assert f.summary.startswith("thermal throttling") and "88 °C" in f.recommendation
    assert f.impact.wasted_gpu_hours == pytest.approx(15 / 60 * (1 - 1.5 / 1.98))
    capped = series(15, sm_clock_hz=1.2e9, power_w=690.0)  # no flags: capped by power and clock
    (f,), _ = findings(capped, "throttled")
    assert f.summary.startswith("power throttling")
    assert "690.0 W of its 700.0 W limit" in f.recommendation


def _mix(busy: float) -> dict[str, Any]:
    """An interval busy for `busy` of its time (BASE's activity) and idle for the rest."""
    keys = ("duty", "graphics_active", "sm_active", "sm_active_min", "sm_active_max")
    return {k: busy * float(BASE[k]) for k in keys}


def test_the_state_change_interval_adds_its_idle_share() -> None:
    rows = series(10) + series(1, first=10, **_mix(0.5)) + series(20, first=11, **IDLE)
    rows += series(5, first=31)
    (f,), _ = findings(rows, "idle_allocated")
    assert _ev(f)["idle_seconds"] == pytest.approx(20 * 60 + 30)  # half of the mixed minute


@pytest.mark.parametrize("phase_s", [0, 7, 19, 30, 44, 59])
def test_a_56_minute_idle_spell_measures_the_same_at_any_grid_phase(phase_s: int) -> None:
    # busy, then idle from minute 10 + phase for 56 min, then busy: the intervals where the
    # state changes hold a mix, as the store's 60 s aggregates do
    begin, end = 600 + phase_s, 600 + phase_s + 56 * 60
    rows = []
    for m in range(75):
        a, b = m * 60, m * 60 + 60
        idle = max(0, min(b, end) - max(a, begin)) / 60
        rows += series(1, first=m, **(IDLE if idle == 1 else _mix(1 - idle)))
    (f,), _ = findings(rows, "idle_allocated")
    assert _ev(f)["idle_seconds"] == pytest.approx(56 * 60, rel=0.01)
    assert f.severity is Severity.INFO
