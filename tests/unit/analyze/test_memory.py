"""Memory peaks, leaks and over-provisioning on hand-built frames, and on the simulated leak."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from gpulens.analyze.leaks import detect_leaks
from gpulens.analyze.memory import (
    GB,
    MemorySettings,
    job_memory_peaks,
    memory_peaks,
    overprovisioned,
)
from gpulens.analyze.mig import MIG_PROFILES, mig_family

T0 = 1_764_374_400 * 1_000_000_000
NS = 1_000_000_000
STEP = 60.0
H100 = "NVIDIA H100 80GB HBM3"


def _frame(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows)


def _series(
    used: np.ndarray, job: str = "j1", gpu: str = "g0", **extra: Any
) -> list[dict[str, Any]]:
    out = []
    for i, u in enumerate(used.tolist()):
        out.append(
            {
                "start_ns": T0 + i * int(STEP * NS),
                "step_s": STEP,
                "host": "h1",
                "gpu_uuid": gpu,
                "gpu_model": H100,
                "job_id": job,
                "pid": "100",
                "memory_used_bytes": u,
                "memory_total_bytes": 80 * GB,
                **{k: (v[i] if isinstance(v, list) else v) for k, v in extra.items()},
            }
        )
    return out


def test_peaks_and_headroom_per_gpu_and_job() -> None:
    a = np.array([10, 30, 20], dtype=float) * GB
    b = np.array([5, 6, 70], dtype=float) * GB
    frame = _frame(_series(a, gpu="g0") + _series(b, gpu="g1"))
    peaks = {r["gpu_uuid"]: r for r in memory_peaks(frame).to_pylist()}
    assert peaks["g0"]["peak_used_bytes"] == a.max()
    assert peaks["g0"]["headroom_bytes"] == 80 * GB - a.max()
    assert peaks["g1"]["headroom_ratio"] == pytest.approx((80 * GB - b.max()) / (80 * GB))
    assert peaks["g0"]["end_ns"] == T0 + 3 * int(STEP * NS)
    job = job_memory_peaks(memory_peaks(frame)).to_pylist()
    assert job == [
        {
            "job_id": "j1",
            "gpus": 2,
            "peak_used_bytes": 70 * GB,
            "peak_process_bytes": None,
            "memory_total_bytes": 80 * GB,
            "headroom_bytes": 10 * GB,
            "headroom_ratio": pytest.approx(10 / 80),
        }
    ]


def _leaky(rate: float, n: int = 180, warm: int = 5, seed: int = 1) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    t = (np.arange(n) * STEP) + STEP / 2
    used = 20 * GB + rate * t + rng.normal(0, 20e6, n)
    used[:warm] = np.linspace(1 * GB, 19 * GB, warm)  # the warm-up ramp
    return used, ["warmup"] * warm + ["compute_tensor"] * (n - warm)


def test_leak_rate_and_projected_oom() -> None:
    rate = 1.0e6
    used, states = _leaky(rate)
    leaks = detect_leaks(_frame(_series(used, state=states))).to_pylist()
    assert len(leaks) == 1
    leak = leaks[0]
    t = np.arange(5, 180) * STEP
    slope = np.polyfit(t, used[5:], 1)[0]  # independent least-squares slope
    assert leak["leak"] is True
    assert leak["rate_bytes_per_second"] == pytest.approx(slope, rel=0.01)
    assert leak["window_start_ns"] == T0 + 5 * int(STEP * NS)
    end = T0 + 180 * int(STEP * NS)
    assert leak["window_end_ns"] == end
    expected_oom = end + (80 * GB - used[-1]) / rate * NS
    assert leak["oom_at_ns"] == pytest.approx(expected_oom, rel=0, abs=0.02 * (expected_oom - end))
    assert leak["r2"] > 0.99 and leak["confidence"] > 0.9


def test_unknown_total_memory_leaves_the_time_to_oom_unknown() -> None:
    used, states = _leaky(1.0e6)
    rows = _series(used, state=states, memory_total_bytes=None)
    (leak,) = detect_leaks(_frame(rows)).to_pylist()
    assert leak["leak"] is True
    assert leak["time_to_oom_s"] is None and leak["oom_at_ns"] is None  # never 0: "now"


def test_without_state_the_warmup_seconds_are_skipped() -> None:
    used, _ = _leaky(1.0e6)
    leak = detect_leaks(_frame(_series(used)), MemorySettings(warmup_s=300.0)).to_pylist()[0]
    assert leak["window_start_ns"] == T0 + 5 * int(STEP * NS)
    assert leak["leak"] is True


def _recorded_at_phase(phase_s: int, warmup_s: float = 200.0) -> list[dict[str, Any]]:
    """An hour recorded from `phase_s` seconds into a 60 s interval (one sample a second):
    a warm-up at activity 0.2 for `warmup_s`, then a steady 0.9 leaking 1 MB/s. An interval
    is warm-up until it is nine tenths steady (the warm-up's end falls inside one)."""
    rows = []
    for k in range(61):
        lo, hi = max(0.0, k * STEP - phase_s), min(3600.0, (k + 1) * STEP - phase_s)
        if hi <= lo:
            continue
        steady = max(0.0, hi - max(lo, warmup_s)) / (hi - lo)
        rows.append(
            {
                **_series(np.array([20 * GB + 1.0e6 * max(0.0, hi - warmup_s)]))[0],
                "start_ns": T0 + round((k * STEP - phase_s) * NS),
                "samples": round(hi - lo),
                "sm_active": 0.2 + 0.7 * steady,
                "state": "compute_tensor" if steady >= 0.9 else "warmup",
            }
        )
    return rows


@pytest.mark.parametrize("phase_s", [0, 8, 17, 31, 45, 53])
def test_the_leak_lasts_the_same_at_any_phase_of_the_grid(phase_s: int) -> None:
    # 3400 s of steady state: the interval where the warm-up ends counts for its steady share
    # and the last one for its samples (whole intervals gave 3360 or 3420 s with the phase)
    (leak,) = detect_leaks(_frame(_recorded_at_phase(phase_s))).to_pylist()
    assert leak["leak"] is True
    assert leak["duration_s"] == pytest.approx(3400.0, abs=1.0)
    assert leak["growth_bytes"] == pytest.approx(leak["rate_bytes_per_second"] * 3400.0, rel=1e-3)


def test_caching_allocator_sawtooth_is_not_a_leak() -> None:
    n = 180
    t = np.arange(n) * STEP
    tooth = (t % 1800.0) / 1800.0  # fills for 30 min, then releases back to the base
    used = 20 * GB + 10 * GB * tooth
    leak = detect_leaks(_frame(_series(used))).to_pylist()[0]
    assert leak["leak"] is False
    assert leak["floor_ratio"] < 0.5


def test_flat_noise_and_short_windows_are_not_leaks() -> None:
    rng = np.random.default_rng(3)
    flat = 30 * GB + rng.normal(0, 50e6, 180)
    assert detect_leaks(_frame(_series(flat))).column("leak").to_pylist() == [False]
    short, _ = _leaky(1.0e6, n=20, warm=0)
    assert detect_leaks(_frame(_series(short)), MemorySettings(warmup_s=0)).column(
        "leak"
    ).to_pylist() == [False]


def test_restarts_split_runs() -> None:
    used, _ = _leaky(1.0e6, n=120, warm=0)
    rows = _series(used[:60]) + [
        {**r, "start_ns": r["start_ns"] + 70 * int(STEP * NS)} for r in _series(used[:60])
    ]
    leaks = detect_leaks(_frame(rows), MemorySettings(warmup_s=0, leak_min_duration_s=600))
    assert leaks.column("run").to_pylist() == [0, 1]
    assert leaks.column("intervals").to_pylist() == [60, 60]


def test_mig_family() -> None:
    assert mig_family("NVIDIA A100-SXM4-40GB", 42e9) == "A100-40GB"
    assert mig_family("NVIDIA A100 80GB PCIe", 85e9) == "A100-80GB"
    assert mig_family(H100, 85.5e9) == "H100-80GB"
    assert mig_family("NVIDIA H100 NVL", 100e9) == "H100-94GB"
    assert mig_family("NVIDIA H200", 150e9) == "H200-141GB"
    assert mig_family("Tesla T4", 16e9) is None


def _job(
    job: str, duty: float, mem: float, hours: float, model: str = H100
) -> list[dict[str, Any]]:
    n = int(hours * 3600 / STEP)
    return _series(
        np.full(n, mem), job=job, gpu=f"gpu-{job}", duty=duty, sm_active=duty / 2,
        process_memory_bytes=mem, gpu_model=model,
    )  # fmt: skip


def test_overprovisioned_suggests_the_smallest_fitting_mig_profile() -> None:
    frame = _frame(
        _job("small", 0.10, 6 * GB, 2)
        + _job("busier", 0.14, 9.5 * GB, 2)
        + _job("bigmem", 0.10, 12 * GB, 2)
        + _job("short", 0.10, 6 * GB, 0.5)
        + _job("t4ish", 0.10, 6 * GB, 2, model="NVIDIA A10G")
    )
    s = MemorySettings()
    out = {r["job_id"]: r for r in overprovisioned(frame, s).to_pylist()}
    assert out["small"]["overprovisioned"] and out["busier"]["overprovisioned"]
    assert not out["bigmem"]["overprovisioned"] and not out["short"]["overprovisioned"]

    def smallest(peak: float, activity: float) -> str:  # independent pick
        fits = [
            p for p in MIG_PROFILES["H100-80GB"]
            if p.memory_bytes >= 1.1 * peak and p.compute_fraction >= activity / 0.8
        ]  # fmt: skip
        return str(min(fits, key=lambda p: (p.compute_fraction, p.memory_bytes)).name)

    assert out["small"]["mig_profile"] == smallest(6 * GB, 0.10) == "1g.10gb"
    assert out["busier"]["mig_profile"] == smallest(9.5 * GB, 0.14) == "2g.20gb"
    assert out["small"]["mean_activity"] == pytest.approx(0.10)
    assert out["small"]["activity_basis"] == "duty"
    assert out["small"]["gpu_hours"] == pytest.approx(2.0)
    assert "1g.10gb" in out["small"]["suggestion"]
    assert out["t4ish"]["mig_profile"] is None and out["t4ish"]["smaller_gpu"] == "NVIDIA T4"


def test_simulated_memory_leak_is_recovered(
    tmp_path: Path, simulated_store: Callable[..., Any]
) -> None:
    from gpulens.collect.simulated.scenarios import LEAK_BYTES_PER_SECOND
    from gpulens.store import Store
    from gpulens.store.frames import gpu_intervals

    span_s = 2 * 3600
    sim = simulated_store(tmp_path, T0, span_s, gpus_per_host=1, scenarios=["memory_leak"])
    truth = sim.ground_truth()[0]
    expected = next(f for f in truth["expected_findings"] if f["rule_id"] == "memory_leak")
    with Store(tmp_path) as store:
        frame = gpu_intervals(store, STEP, T0, T0 + span_s * NS)
    leaks = [r for r in detect_leaks(frame).to_pylist() if r["leak"]]
    assert len(leaks) == 1
    leak = leaks[0]
    assert leak["job_id"] == truth["job_id"]
    assert leak["rate_bytes_per_second"] == pytest.approx(LEAK_BYTES_PER_SECOND, rel=0.03)
    # The projection uses the total memory (the driver's reservation is not in the frame).
    horizon = expected["oom_at_ns"] - leak["window_end_ns"]
    assert leak["oom_at_ns"] == pytest.approx(expected["oom_at_ns"], abs=0.05 * horizon)


def test_a_leak_under_a_sawtooth_is_still_a_leak() -> None:
    t = np.arange(360) * STEP
    used = 20 * GB + 2 * GB * ((t % 1800.0) / 1800.0) + 1.0e6 * t  # the floor rises 1 MB/s
    leak = detect_leaks(_frame(_series(used)), MemorySettings(leak_min_r2=0.5)).to_pylist()[0]
    assert leak["leak"] is True and leak["floor_ratio"] > 0.5
    assert leak["rate_bytes_per_second"] == pytest.approx(np.polyfit(t, used, 1)[0], rel=0.1)
