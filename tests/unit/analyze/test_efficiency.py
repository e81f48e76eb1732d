"""Each classification rule, its precedence, the tiers, useful work and MFU."""

from __future__ import annotations

from typing import Any

import pytest

from gpulens.analyze.efficiency import Thresholds, classify, mfu, useful_work
from gpulens.analyze.schema import STATES

from .helpers import STEP_NS, T0, frame, row


def _one(**changes: Any) -> dict[str, Any]:
    out: dict[str, Any] = classify(frame(row(**changes))).to_pylist()[0]
    return out


def test_healthy_interval_is_compute_tensor() -> None:
    r = _one()
    assert r["state"] == "compute_tensor"
    assert r["tier"] == "profiling"
    assert r["state_reason"] == "tensor active 0.55, SM active 0.9"


def test_idle_unallocated_needs_no_process_and_no_memory() -> None:
    idle = {"duty": 0.0, "sm_active": 0.0, "graphics_active": 0.0, "tensor_active": 0.0}
    assert _one(**idle, processes=0, pid=None, job_id=None, memory_used_bytes=0.0,
                process_memory_bytes=None)["state"] == "idle_unallocated"  # fmt: skip
    # memory held without a visible process is still allocated
    r = _one(**idle, processes=0, pid=None, job_id=None, memory_used_bytes=5e9,
             process_memory_bytes=None)  # fmt: skip
    assert r["state"] == "idle_allocated"
    assert "holding 4.7 GiB" in r["state_reason"]


def test_idle_allocated_with_a_process() -> None:
    r = _one(duty=0.0, sm_active=0.0, tensor_active=0.0, graphics_active=0.0)
    assert r["state"] == "idle_allocated"


def test_throttled_needs_flags_and_a_slow_clock() -> None:
    slow = {"sm_clock_hz": 1.6e9}
    assert _one(**slow, throttle_thermal=1.0)["state"] == "throttled"
    assert _one(**slow, throttle_power=0.6)["state"] == "throttled"
    assert _one(**slow, throttle_power=0.2)["state"] == "compute_tensor"  # flags too rare
    assert _one(throttle_thermal=1.0)["state"] == "compute_tensor"  # clock at max
    r = _one(**slow, throttle_thermal=1.0)
    assert r["state_reason"] == "SM clock at 0.81 of max with power/thermal flags in 1 of samples"


def test_power_capped_without_flags_from_the_datasheet() -> None:
    # no flags, no limit or max clock in the frame: the T4 datasheet gives 70 W and 1590 MHz
    r = _one(gpu_model="Tesla T4", power_w=68.2, power_limit_w=None, sm_clock_hz=660e6,
             sm_clock_max_hz=None, throttle_power=None, throttle_thermal=None)  # fmt: skip
    assert r["power_capped"] is True
    assert r["state"] == "compute_tensor"  # the cap is evidence, not a state, without flags
    assert r["state_reason"].endswith("power-capped: 68.2 W of 70 W, SM clock 660 of 1590 MHz")
    unknown = _one(gpu_model="Mystery GPU", power_limit_w=None, sm_clock_max_hz=None)
    assert unknown["power_capped"] is None
    assert _one()["power_capped"] is False


def _job(sm: list[float], job: str = "job-1") -> list[dict[str, Any]]:
    return [row(gpu_uuid=f"GPU-{i}", gpu_index=str(i), pid=str(100 + i), job_id=job,
                sm_active=s, tensor_active=s * 0.6) for i, s in enumerate(sm)]  # fmt: skip


def test_comm_bound_ranks_wait_for_the_busiest_peer() -> None:
    out = classify(frame(*_job([0.72, 0.73, 0.9, 0.72]))).column("state").to_pylist()
    assert out == ["comm_bound", "comm_bound", "compute_tensor", "comm_bound"]
    # ranks that move together are not comm-bound
    same = classify(frame(*_job([0.9, 0.9, 0.9, 0.9]))).column("state").to_pylist()
    assert set(same) == {"compute_tensor"}
    # one GPU alone cannot be judged against peers
    alone = classify(frame(*_job([0.72]))).column("state").to_pylist()
    assert alone == ["compute_tensor"]
    # different jobs are not peers
    mixed = frame(*_job([0.72], "a"), *[dict(r, gpu_uuid="GPU-9") for r in _job([0.9], "b")])
    assert classify(mixed).column("state").to_pylist() == ["compute_tensor", "compute_tensor"]


@pytest.mark.parametrize(
    "signal",
    [
        {"data_wait": 0.5},
        {"data_wait": None, "host_cpu": 0.97},
        {
            "data_wait": None,
            "host_cpu": 0.97,
            "duty": 0.9,
            "sm_active_min": 0.1,
            "sm_active_max": 0.6,
        },
    ],
)
def test_input_bound_signals(signal: dict[str, float]) -> None:
    base: dict[str, Any] = {"duty": 0.45, "sm_active": 0.35, "tensor_active": 0.15}
    r = _one(**{**base, **signal})
    assert r["state"] == "input_bound", r["state_reason"]


def test_a_busy_host_is_not_the_cause_when_the_job_says_it_does_not_wait() -> None:
    # A neighbour's data loader saturates the host CPU; this job reports 1 % data wait.
    r = _one(duty=0.9, sm_active=0.3, tensor_active=0.03, host_cpu=0.99, data_wait=0.01)
    assert r["state"] == "hollow_busy", r["state_reason"]


def test_gaps_without_saturation_are_not_input_bound() -> None:
    r = _one(
        duty=0.9,
        sm_active=0.6,
        tensor_active=0.3,
        data_wait=None,
        host_cpu=0.3,
        sm_active_min=0.1,
        sm_active_max=0.9,
    )
    assert r["state"] != "input_bound", r["state_reason"]


def test_input_bound_needs_a_process_and_low_activity() -> None:
    assert _one(host_cpu=0.97)["state"] == "compute_tensor"  # busy GPU: the CPU is not the cause
    r = _one(duty=0.45, sm_active=0.35, processes=0, pid=None, host_cpu=0.97)
    assert r["state"] != "input_bound"


def test_input_bound_works_on_duty_cycle_alone() -> None:
    r = _one(duty=0.4, sm_active=None, graphics_active=None, tensor_active=None, data_wait=0.5)
    assert (r["state"], r["tier"]) == ("input_bound", "basic")


def test_hollow_busy() -> None:
    r = _one(duty=0.94, sm_active=0.3, tensor_active=0.04, dram_active=0.67)
    assert r["state"] == "hollow_busy"
    assert r["state_reason"] == "duty 0.94 but SM active 0.3 < 0.5"
    # graphics-engine activity stands in when SM activity is missing (dcgm-exporter defaults)
    r = _one(duty=0.91, sm_active=None, graphics_active=0.16, tensor_active=0.01)
    assert r["state"] == "hollow_busy"
    assert "graphics-engine active 0.16" in r["state_reason"]
    assert _one(duty=0.6, sm_active=0.3, host_cpu=0.1)["state"] != "hollow_busy"


def test_memory_bound() -> None:
    r = _one(sm_active=0.78, tensor_active=0.35, dram_active=0.69)
    assert r["state"] == "memory_bound"
    assert _one(sm_active=0.78, tensor_active=0.6, dram_active=0.69)["state"] == "compute_tensor"
    # memory-copy utilisation stands in when DRAM activity is absent
    assert _one(tensor_active=0.2, dram_active=None, mem_copy=0.8)["state"] == "memory_bound"


def test_compute_fp32_and_busy() -> None:
    assert _one(tensor_active=0.01, fp32_active=0.69)["state"] == "compute_fp32"
    r = _one(tensor_active=0.02, fp32_active=0.1, dram_active=0.2)
    assert r["state"] == "busy"
    assert r["state_reason"].startswith("kernels ran; no pipe stands out")


def test_duty_cycle_only_says_less_and_says_so() -> None:
    r = _one(duty=0.95, sm_active=None, graphics_active=None, tensor_active=None,
             fp32_active=None, dram_active=None)  # fmt: skip
    assert (r["state"], r["tier"]) == ("busy", "basic")
    assert "no profiling metrics" in r["state_reason"]
    nothing = _one(duty=None, sm_active=None, graphics_active=None, tensor_active=None)
    assert (nothing["state"], nothing["tier"]) == ("unknown", "none")


def test_warmup_comes_first() -> None:
    rows = [row(start_ns=T0 + i * STEP_NS, sm_active=0.2 if i < 2 else 0.9,
                memory_used_first=0.0 if i == 0 else 50e9) for i in range(8)]  # fmt: skip
    states = classify(frame(*rows)).column("state").to_pylist()
    assert states[:2] == ["warmup", "warmup"]
    assert set(states[2:]) == {"compute_tensor"}


def test_precedence_idle_before_everything_else() -> None:
    # idle and slow-clocked with flags: idle wins (throttling of an idle GPU is not a problem)
    r = _one(duty=0.0, sm_active=0.0, tensor_active=0.0, graphics_active=0.0,
             sm_clock_hz=0.3e9, throttle_power=1.0)  # fmt: skip
    assert r["state"] == "idle_allocated"


def test_thresholds_are_overridable() -> None:
    f = frame(row(sm_active=0.45, duty=0.95, tensor_active=0.3, dram_active=0.3))
    assert classify(f).column("state")[0].as_py() == "hollow_busy"
    relaxed = Thresholds(sm_low=0.4)
    assert classify(f, relaxed).column("state")[0].as_py() == "compute_tensor"


def test_states_are_in_the_schema() -> None:
    f = frame(row(), row(duty=0.0, sm_active=0.0, tensor_active=0.0), row(duty=None,
              sm_active=None, graphics_active=None, tensor_active=None))  # fmt: skip
    assert set(classify(f).column("state").to_pylist()) <= set(STATES)


def test_useful_work() -> None:
    out = useful_work(frame(row(), row(sm_clock_hz=0.99e9), row(gpu_model="Mystery"),
                            row(tensor_active=None, fp32_active=None, fp16_active=None,
                                fp64_active=None)))  # fmt: skip
    a, half, unknown, none = out.to_pylist()
    assert a["achieved_tflops"] == pytest.approx(0.55 * 989.4)
    assert a["useful_ratio"] == pytest.approx(0.55)
    assert half["achieved_tflops"] == pytest.approx(0.55 * 989.4 / 2)
    assert half["useful_ratio"] == pytest.approx(0.275)
    assert unknown["achieved_tflops"] is None and unknown["useful_ratio"] == pytest.approx(0.55)
    assert none["useful_ratio"] is None and none["achieved_tflops"] is None
    fp32 = useful_work(frame(row(tensor_active=0.01, fp32_active=0.7))).to_pylist()[0]
    assert fp32["useful_ratio"] == pytest.approx(0.7)
    assert 0.0 <= fp32["useful_ratio"] <= 1.0


def test_mfu_palm() -> None:
    # 6N only: 1e5 tokens/s x 6 x 1.3e9 / (4 x 989.4e12)
    assert mfu(1e5, 1.3e9, 4, 989.4) == pytest.approx(1e5 * 6 * 1.3e9 / (4 * 989.4e12))
    full = mfu(1e5, 1.3e9, 4, 989.4, layers=24, hidden=2048, seq=2048)
    assert full == pytest.approx(1e5 * (6 * 1.3e9 + 12 * 24 * 2048 * 2048) / (4 * 989.4e12))
    with pytest.raises(ValueError, match="n_gpus"):
        mfu(1e5, 1.3e9, 0, 989.4)
