"""Each state rule on its own, with rows on both sides of its thresholds (docs/analysis/states.md).

Rows at a threshold use values that are exact in binary (0.5, 0.25, 0.75 ...) or the
threshold itself, so "at least" and "below" are tested at the edge without rounding noise;
where a default threshold is not exact in binary, the test sets an exact one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from gpulens.analyze import states
from gpulens.analyze.schema import STATES
from gpulens.analyze.states import RULES, Rule, Signals, Thresholds

from .helpers import STEP_NS, T0, frame, row

DEFAULT = Thresholds()
MIB = 2**20


def matches(rule: Rule, *rows: dict[str, Any], th: Thresholds = DEFAULT) -> list[bool]:
    """Per row: does the rule's condition hold?"""
    out: list[bool] = rule(Signals.of(frame(*rows), th), th).rows.tolist()
    return out


def reason(rule: Rule, *rows: dict[str, Any], th: Thresholds = DEFAULT, at: int = 0) -> str:
    """The rule's reason text for row `at`."""
    text = rule(Signals.of(frame(*rows), th), th).reason(np.array([at]))
    value = text.as_py() if isinstance(text, pa.Scalar) else text[0].as_py()
    return str(value)


def test_the_table_lists_every_state_once_in_the_documented_order() -> None:
    assert [name for name, _ in RULES] == [
        "warmup", "unknown", "idle_unallocated", "idle_allocated", "throttled", "comm_bound",
        "input_bound", "hollow_busy", "memory_bound", "compute_fp32", "compute_tensor", "busy",
    ]  # fmt: skip
    assert sorted(name for name, _ in RULES) == sorted(STATES)
    assert all(rule.__name__ == name for name, rule in RULES)


def _run(
    sm: list[float], memory: list[float] | None = None, **changes: Any
) -> list[dict[str, Any]]:
    """One job's run on one GPU, 60 s intervals, starting inside the frame."""
    mem = memory or [50e9] * len(sm)
    return [
        row(start_ns=T0 + i * STEP_NS, sm_active=a, memory_used_bytes=m,
            memory_used_first=0.0 if i == 0 else m, **changes)
        for i, (a, m) in enumerate(zip(sm, mem, strict=True))
    ]  # fmt: skip


def test_warmup_until_activity_settles_within_the_band() -> None:
    # the steady level is 0.75; the second interval is 0.25 away from it
    rows = _run([0.25, 0.5] + [0.75] * 6)
    assert matches(states.warmup, *rows, th=Thresholds(warmup_band=0.25)) == [True] + [False] * 7
    assert matches(states.warmup, *rows) == [True, True] + [False] * 6  # band 0.1
    assert reason(states.warmup, *rows) == "job warm-up: activity 0.25 not yet settled"


def test_warmup_until_memory_reaches_its_ratio_of_the_steady_level() -> None:
    th = Thresholds(warmup_memory_ratio=0.75)  # of the steady 50 GB: 37.5 GB
    at_ratio = _run([0.75] * 8, [20e9, 37.5e9] + [50e9] * 6)
    below = _run([0.75] * 8, [20e9, 37e9] + [50e9] * 6)
    assert matches(states.warmup, *at_ratio, th=th) == [True] + [False] * 7
    assert matches(states.warmup, *below, th=th) == [True, True] + [False] * 6


def test_warmup_needs_a_job() -> None:
    rows = _run([0.25, 0.5] + [0.75] * 6, job_id=None)
    assert not any(matches(states.warmup, *rows))


def test_unknown_when_no_activity_metric_is_reported() -> None:
    none = {"duty": None, "sm_active": None, "graphics_active": None, "tensor_active": None}
    assert matches(
        states.unknown,
        row(**none),
        row(**{**none, "duty": 0.0}),  # a duty cycle of 0 is a reading
        row(**{**none, "graphics_active": 0.0}),
        row(**{**none, "sm_active": 0.0}),
    ) == [True, False, False, False]
    assert reason(states.unknown, row(**none)) == "no duty-cycle or profiling activity reported"


QUIET = {"duty": 0.05, "sm_active": 0.05, "graphics_active": 0.05, "tensor_active": 0.0}
FREE = {"processes": 0, "pid": None, "job_id": None, "memory_used_bytes": 256 * MIB,
        "process_memory_bytes": None}  # fmt: skip


def test_idle_unallocated_at_the_activity_and_memory_edges() -> None:
    assert matches(
        states.idle_unallocated,
        row(**QUIET, **FREE),  # activity 0.05 and 256 MiB: both at the threshold
        row(**QUIET, **{**FREE, "memory_used_bytes": 256 * MIB + 1}),
        row(**QUIET, **{**FREE, "processes": 1}),
        row(**{**QUIET, "duty": 0.06}, **FREE),  # the busier of duty and SM counts
        row(**{**QUIET, "sm_active": 0.06}, **FREE),
    ) == [True, False, False, False, False]
    r = reason(states.idle_unallocated, row(**QUIET, **{**FREE, "memory_used_bytes": 0.0}))
    assert r == "activity 0.05, no process, 0 GiB in use"


def test_idle_allocated_when_a_process_or_memory_is_held() -> None:
    nobody = {"processes": 0, "pid": None, "process_memory_bytes": None}
    assert matches(
        states.idle_allocated,
        row(**QUIET),  # a process holding 50 GB
        row(**QUIET, **nobody, memory_used_bytes=256 * MIB + 1),
        row(**QUIET, **nobody, memory_used_bytes=256 * MIB),  # not held: unallocated
        row(**QUIET, processes=0, pid=None, memory_used_bytes=0.0, process_memory_bytes=1e9),
        row(**{**QUIET, "duty": 0.06}),
    ) == [True, True, False, True, False]


SLOW = {"sm_clock_max_hz": 2e9, "sm_clock_hz": 1.7e9, "throttle_power": 0.5,
        "throttle_thermal": 0.0}  # fmt: skip


def test_throttled_at_the_clock_flag_and_busy_edges() -> None:
    assert matches(
        states.throttled,
        row(**SLOW),  # flags in half the samples: enough
        row(**{**SLOW, "sm_clock_hz": 1.8e9}),  # 0.9 of the maximum is not below it
        row(**{**SLOW, "throttle_power": 0.25}),
        row(**{**SLOW, "throttle_power": 0.0, "throttle_thermal": 0.5}),
        row(**SLOW, duty=0.5, sm_active=0.5),  # busy at 0.5
        row(**SLOW, duty=0.25, sm_active=0.25),
        row(**{**SLOW, "sm_clock_hz": None}),
        # no maximum in the frame: the datasheet's (H100 SXM boost 1980 MHz)
        row(**{**SLOW, "sm_clock_max_hz": None, "sm_clock_hz": 1e9}),
    ) == [True, False, False, True, True, False, False, True]


def _gpu(i: int, sm: float, **changes: Any) -> dict[str, Any]:
    return row(gpu_uuid=f"GPU-{i}", gpu_index=str(i), pid=str(100 + i), sm_active=sm, **changes)


def test_comm_bound_at_the_gap_and_sm_good_edges() -> None:
    th = Thresholds(comm_gap=0.25)
    assert matches(states.comm_bound, _gpu(0, 0.75), _gpu(1, 0.5), th=th) == [False, True]
    assert matches(states.comm_bound, _gpu(0, 0.75), _gpu(1, 0.5625), th=th) == [False, False]
    assert matches(states.comm_bound, _gpu(0, 1.0), _gpu(1, 0.8)) == [False, False]
    assert matches(states.comm_bound, _gpu(0, 1.0), _gpu(1, 0.75)) == [False, True]
    # not busy, another job, another interval, alone: no peer to wait for
    idle_peer = _gpu(1, 0.25, duty=0.25)
    assert matches(states.comm_bound, _gpu(0, 1.0), idle_peer) == [False, False]
    assert matches(states.comm_bound, _gpu(0, 1.0), _gpu(1, 0.5, job_id="b")) == [False, False]
    later = _gpu(1, 0.5, start_ns=T0 + STEP_NS)
    assert matches(states.comm_bound, _gpu(0, 1.0), later) == [False, False]
    assert matches(states.comm_bound, _gpu(1, 0.5)) == [False]
    text = reason(states.comm_bound, _gpu(0, 0.75), _gpu(1, 0.5), at=1)
    assert text == "SM active 0.5 vs 0.75 on the job's busiest GPU"


def test_input_bound_on_the_job_s_data_wait() -> None:
    low = {"sm_active": 0.5}  # activity below sm_good, duty 0.99, SM swing 0.1: no gaps
    assert matches(
        states.input_bound,
        row(**low, data_wait=0.2),
        row(**low, data_wait=0.1875),
        row(sm_active=0.8, data_wait=0.5),  # activity at sm_good
        row(**low, data_wait=0.5, processes=0, pid=None),
        row(**low, data_wait=0.1, host_cpu=1.0, duty=0.5),  # its own wait decides
        row(duty=0.5, sm_active=None, graphics_active=None, tensor_active=None, data_wait=0.5),
    ) == [True, False, False, False, False, True]
    r = reason(states.input_bound, row(**low, data_wait=0.25))
    assert r == "activity 0.5 < 0.8 with host CPU 0.3, data wait 0.25, SM swing 0.1"


def test_input_bound_on_a_saturated_host_with_gaps() -> None:
    low = {"sm_active": 0.5, "data_wait": None}
    assert matches(
        states.input_bound,
        row(**low, host_cpu=0.9, duty=0.75),  # duty below busy: gaps
        row(**low, host_cpu=0.9, duty=0.8),  # busy duty, steady SM: no gaps
        row(**low, host_cpu=0.875, duty=0.75),
    ) == [True, False, False]
    th = Thresholds(sm_swing=0.25)
    assert matches(
        states.input_bound,
        row(**low, host_cpu=0.9, sm_active_min=0.25, sm_active_max=0.5),
        row(**low, host_cpu=0.9, sm_active_min=0.25, sm_active_max=0.4375),
        th=th,
    ) == [True, False]


def test_hollow_busy_at_the_duty_and_sm_edges() -> None:
    assert matches(
        states.hollow_busy,
        row(duty=0.8, sm_active=0.25),
        row(duty=0.75, sm_active=0.25),
        row(duty=0.99, sm_active=0.5),
        row(duty=0.99, sm_active=None, graphics_active=0.25),  # graphics stands in
        row(duty=0.99, sm_active=None, graphics_active=None, tensor_active=None),  # duty only
    ) == [True, False, False, True, False]
    r = reason(states.hollow_busy, row(duty=0.99, sm_active=None, graphics_active=0.25))
    assert r == "duty 0.99 but graphics-engine active 0.25 < 0.5"


PIPES = {"tensor_active": 0.25, "fp32_active": 0.25, "fp16_active": 0.0, "fp64_active": 0.0}


def test_memory_bound_at_the_dram_copy_and_pipe_edges() -> None:
    assert matches(
        states.memory_bound,
        row(**PIPES, dram_active=0.5),
        row(**PIPES, dram_active=0.4375),
        *(row(**{**PIPES, pipe: 0.5}, dram_active=0.5) for pipe in PIPES),  # every pipe counts
        row(**PIPES, dram_active=None, mem_copy=0.7),  # memory-copy stands in
        row(**PIPES, dram_active=None, mem_copy=0.6875),
        row(**PIPES, dram_active=0.25, mem_copy=0.9),  # DRAM activity decides when present
        row(
            **{**PIPES, "tensor_active": None},
            dram_active=0.9,
            sm_active=None,
            graphics_active=None,
        ),  # no profiling metrics
    ) == [True, False, False, False, False, False, True, False, False, False]
    r = reason(states.memory_bound, row(**PIPES, dram_active=0.5))
    assert r == "DRAM active 0.5, mem-copy 0.45, pipes 0.25"


def test_compute_fp32_at_the_fp32_and_tensor_edges() -> None:
    assert matches(
        states.compute_fp32,
        row(fp32_active=0.3, tensor_active=0.0625),
        row(fp32_active=0.25, tensor_active=0.0625),
        row(fp32_active=0.5, tensor_active=0.1),
        row(fp32_active=0.5, sm_active=None, graphics_active=None, tensor_active=None),
    ) == [True, False, False, False]
    r = reason(states.compute_fp32, row(fp32_active=0.3, tensor_active=0.0625))
    assert r == "FP32 pipe 0.3 but tensor 0.06 < 0.1"


def test_compute_tensor_at_the_tensor_edge() -> None:
    assert matches(
        states.compute_tensor,
        row(tensor_active=0.1),
        row(tensor_active=0.0625),
        row(tensor_active=None),
    ) == [True, False, False]


def test_busy_takes_every_row_and_says_what_the_metrics_allow() -> None:
    duty_only = row(duty=0.5, sm_active=None, graphics_active=None, tensor_active=None)
    assert matches(states.busy, row(), row(**QUIET), duty_only) == [True, True, True]
    assert reason(states.busy, row()) == "kernels ran; no pipe stands out (duty 0.99)"
    assert reason(states.busy, duty_only) == (
        "duty cycle only: kernels ran, no profiling metrics to say more (duty 0.5)"
    )
