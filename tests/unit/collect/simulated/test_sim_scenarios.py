"""Every scenario shows its physical signature in what the binding answers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from conftest import Bind, S, gpm_window
from gpulens.collect.nvml.binding import (
    CLOCK_SM,
    PCIE_RX,
    PERF_POLICY_POWER,
    PERF_POLICY_THERMAL,
)
from gpulens.collect.simulated import SCENARIOS, SimulatedFleet

SM, TENSOR, FP32, DRAM, NVLINK_RX = 2, 5, 12, 10, 60


def _steady(
    fleet: SimulatedFleet, bind: Bind, job: dict, rank: int = 0, seconds: int = 120
) -> tuple[dict[int, float], float]:
    """(GPM % over `seconds` of steady state, mean duty cycle % sampled each second)."""
    b, clock = bind(fleet, job["host"], job["steady"][0] + 300 * S)
    uuid = job["gpu_uuids"][rank]
    duty = []
    for _ in range(seconds):
        clock.advance(S)
        duty.append(b.utilization(uuid).gpu)
    clock.set(job["steady"][0] + 300 * S)
    return gpm_window(b, clock, uuid, seconds), float(np.mean(duty))


def test_healthy_training_is_tensor_heavy_and_busy(fleet, bind: Bind, truth) -> None:
    for rank in range(4):
        gpm, duty = _steady(fleet, bind, truth["healthy_training"], rank)
        assert duty >= 97
        assert gpm[SM] >= 85
        assert 50 <= gpm[TENSOR] <= 62
    assert truth["healthy_training"]["expected_findings"] == []


def test_input_bound_training_starves(fleet, bind: Bind, truth) -> None:
    job = truth["input_bound_training"]
    gpm, duty = _steady(fleet, bind, job)
    assert gpm[SM] < 45 and duty < 50
    b, clock = bind(fleet, job["host"], job["steady"][0] + 100 * S)
    # SM activity collapses in the data-wait gaps: fine-grained windows swing from ~0 to high.
    sms = []
    for _ in range(60):
        first = b.gpm_sample(job["gpu_uuids"][0])
        clock.advance(S // 10)
        sms.append(b.gpm_metrics(first, b.gpm_sample(job["gpu_uuids"][0]), [SM])[SM])
    assert min(sms) < 5 and max(sms) > 70
    host = fleet.host_collector(job["host"]).collect(clock.now_ns())
    host_values = next(r.values for r in host if r.kind == "host")
    assert host_values["host_cpu_util_ratio"] >= 0.95
    app = next(
        r.values
        for r in host
        if r.kind == "app" and r.labels["job_id"] == job["job_id"] and "gpu_uuid" not in r.labels
    )
    assert 0.5 <= app["app_data_wait_ratio"] <= 0.6


def test_eager_inference_looks_busy_but_is_hollow(fleet, bind: Bind, truth) -> None:
    eager, trt = truth["eager_inference"], truth["tensorrt_inference"]
    gpm_e, duty_e = _steady(fleet, bind, eager)
    gpm_t, _ = _steady(fleet, bind, trt)
    assert duty_e >= 90 and gpm_e[SM] <= 40
    assert gpm_e[DRAM] >= 50 and gpm_e[TENSOR] < 10
    assert gpm_t[SM] >= 65
    b, clock = bind(fleet, eager["host"], max(eager["steady"][0], trt["steady"][0]) + 60 * S)
    readings = [
        r
        for host in {eager["host"], trt["host"]}
        for r in fleet.host_collector(host).collect(clock.now_ns())
    ]

    def app(job: dict, metric: str) -> float:
        return next(
            r.values[metric]
            for r in readings
            if r.kind == "app" and r.labels["job_id"] == job["job_id"] and metric in r.values
        )

    assert app(eager, "app_kernel_launches_per_second") > 5 * app(
        trt, "app_kernel_launches_per_second"
    )
    assert app(trt, "app_latency_p99_seconds") < app(eager, "app_latency_p50_seconds")
    assert app(trt, "app_samples_per_second") > 2 * app(eager, "app_samples_per_second")
    assert b.utilization(eager["gpu_uuids"][0]).memory >= 50


def test_idle_allocated_holds_memory_and_does_nothing(fleet, bind: Bind, truth) -> None:
    job = truth["idle_allocated"]
    b, clock = bind(fleet, job["host"], job["steady"][0] + 3600 * S)
    uuid = job["gpu_uuids"][0]
    gpm = gpm_window(b, clock, uuid, 600)
    assert b.memory_info(uuid).used >= 60e9
    assert b.utilization(uuid).gpu == 0 and gpm[SM] == 0
    assert b.power_usage_mw(uuid) < 90_000
    assert b.clocks_event_reasons(uuid) & 0x1
    assert b.clock_mhz(uuid, CLOCK_SM) < 500
    assert len(b.compute_processes(uuid)) == 1


def test_straggler_dips_coincide_on_the_fast_gpus(fleet, bind: Bind, truth) -> None:
    job = truth["straggler_ddp"]
    slow = next(f["gpu_uuid"] for f in job["expected_findings"] if f["rule_id"] == "straggler")
    b, clock = bind(fleet, job["host"], job["steady"][0] + 200 * S)
    series: dict[str, list[float]] = {u: [] for u in job["gpu_uuids"]}
    for _ in range(80):  # 4 s in 50 ms windows
        firsts = {u: b.gpm_sample(u) for u in series}
        clock.advance(S // 20)
        for u in series:
            series[u].append(b.gpm_metrics(firsts[u], b.gpm_sample(u), [SM])[SM])
    fast = [np.array(v) for u, v in series.items() if u != slow]
    assert len(fast) >= 2
    dips = [set(np.flatnonzero(s < 40)) for s in fast]
    assert dips[0] and all(len(d ^ dips[0]) <= 2 for d in dips)  # same windows, bar jitter
    assert float(np.mean(series[slow])) > max(float(np.mean(s)) for s in fast) + 10
    assert np.mean(series[slow][min(dips[0])]) > 50  # the slow GPU computes while others wait
    gpm_fast, _ = _steady(
        fleet,
        bind,
        job,
        rank=job["gpu_uuids"].index(next(u for u in job["gpu_uuids"] if u != slow)),
    )
    assert gpm_fast[NVLINK_RX] > 0


def test_memory_leak_grows_until_oom(fleet, bind: Bind, truth) -> None:
    job = truth["memory_leak"]
    b, clock = bind(fleet, job["host"], job["steady"][0] + 600 * S)
    uuid = job["gpu_uuids"][0]
    used = []
    for _ in range(60):
        used.append(b.memory_info(uuid).used)
        clock.advance(60 * S)
    assert all(later > earlier for earlier, later in itertools.pairwise(used))
    finding = next(f for f in job["expected_findings"] if f["rule_id"] == "memory_leak")
    rate = (used[-1] - used[0]) / (59 * 60)
    assert rate == pytest.approx(finding["rate_bytes_per_second"], rel=0.01)
    oom = finding["oom_at_ns"]
    clock.set(oom - S)
    total = b.memory_info(uuid).total
    assert b.memory_info(uuid).used > 0.98 * total - 600e6
    clock.set(oom + 5 * S)
    assert b.compute_processes(uuid) == []  # the process died
    clock.set(oom + int(finding["restart_delay_s"] * S) + 10 * S)
    restarted = b.compute_processes(uuid)
    assert restarted and restarted[0].pid != job["pids"][0]
    assert b.memory_info(uuid).used < used[0]


def test_throttled_gpu_hits_the_caps(fleet, bind: Bind, truth) -> None:
    job = truth["throttled"]
    uuid = job["gpu_uuids"][0]
    b, clock = bind(fleet, job["host"], job["steady"][0] + 30 * S)
    assert b.clocks_event_reasons(uuid) & 0x4  # power cap first, while still cool
    assert b.power_usage_mw(uuid) >= 680_000
    power_before = b.violation_time_ns(uuid, PERF_POLICY_POWER)
    clock.set(job["steady"][0] + 1800 * S)
    assert b.clocks_event_reasons(uuid) & 0x20  # then the thermal slowdown
    assert b.clock_mhz(uuid, CLOCK_SM) < 1980 * 0.9
    assert b.temperature_c(uuid) >= 85
    thermal = b.violation_time_ns(uuid, PERF_POLICY_THERMAL)
    clock.advance(60 * S)
    assert b.violation_time_ns(uuid, PERF_POLICY_THERMAL) - thermal == pytest.approx(60e9, rel=0.01)
    assert b.violation_time_ns(uuid, PERF_POLICY_POWER) > power_before
    healthy = truth["healthy_training"]
    hb, _ = bind(fleet, healthy["host"], healthy["steady"][0] + 1800 * S)
    assert hb.clocks_event_reasons(healthy["gpu_uuids"][0]) & (0x4 | 0x20) == 0
    assert hb.clock_mhz(healthy["gpu_uuids"][0], CLOCK_SM) == 1980


def test_fp32_training_leaves_tensor_cores_idle(fleet, bind: Bind, truth) -> None:
    gpm, _ = _steady(fleet, bind, truth["fp32_training"])
    assert gpm[FP32] >= 60 and gpm[SM] >= 85
    assert gpm[TENSOR] <= 2
    assert gpm[FP32] > 20 * gpm[TENSOR]


def test_pcie_shows_input_copies(fleet, bind: Bind, truth) -> None:
    job = truth["input_bound_training"]
    b, clock = bind(fleet, job["host"], job["steady"][0] + 10 * S)
    rx = []
    for _ in range(30):
        clock.advance(S)
        rx.append(b.pcie_throughput_kbps(job["gpu_uuids"][0], PCIE_RX))
    assert max(rx) > 50_000  # KB/s: bursts of host-to-device copies


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_warmup_precedes_steady_state(fleet, bind: Bind, truth, scenario: str) -> None:
    job = truth[scenario]
    start, warm_end = job["warmup"]
    assert 60 * S <= warm_end - start <= 300 * S
    b, clock = bind(fleet, job["host"], start + 5 * S)
    uuid = job["gpu_uuids"][0]
    early = b.memory_info(uuid).used
    warm = gpm_window(b, clock, uuid, int((warm_end - start) / S) - 10)
    clock.set(warm_end + 60 * S)
    steady_mem = b.memory_info(uuid).used
    assert early < 0.5 * steady_mem  # memory ramps up during the warm-up
    steady = gpm_window(b, clock, uuid, 120)
    if scenario != "idle_allocated":
        assert warm[SM] < steady[SM] or warm[DRAM] < steady[DRAM]
    else:
        assert warm[SM] > 0 == steady[SM]
