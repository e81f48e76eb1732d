"""Idle-gap cause attribution and the per-step breakdown on synthetic traces."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from gpulens.analyze.traces.causes import CAUSES, covered, idle_causes
from gpulens.analyze.traces.steps import steps
from gpulens.app.traces import load_trace_file

from .scenarios import LOADER, cpu, every_cause, gpu, launch


def test_each_gap_gets_its_cause(write_trace: Callable[..., Path]) -> None:
    result = idle_causes(load_trace_file(write_trace(every_cause())))
    expected = {
        "data_loader": 110,
        "sync": 15,
        "launch_overhead": 6,
        "cpu_ops": 137,
        "gpu_wait": 90,
        "unknown": 10,
    }
    assert {c: result.idle(c) / 1000 for c in CAUSES} == expected
    assert result.span_ns == 420_000 and result.idle_ns == 368_000
    assert all(result.causes[c].gaps == 1 for c in CAUSES)
    assert result.causes["data_loader"].share_of_span == pytest.approx(110 / 420)
    (loader,) = result.causes["data_loader"].examples
    assert loader.cpu_event == LOADER and loader.start_ns == 1_020_000
    assert loader.dur_ns == 110_000 and loader.next_gpu_event == "k2"
    assert result.causes["sync"].examples[0].cpu_event == "cudaStreamSynchronize"
    assert result.causes["cpu_ops"].examples[0].cpu_event == "aten::foo"
    assert result.causes["launch_overhead"].examples[0].cpu_event == "cudaLaunchKernel"
    assert result.causes["unknown"].examples[0].cpu_event is None
    # k4 (2 µs) is shorter than its 3 µs launch call; k1..k3, k5, k6 are not
    assert (result.kernels_with_launch, result.kernels_shorter_than_launch) == (6, 1)


def test_pageable_async_copy_counts_as_sync(write_trace: Callable[..., Path]) -> None:
    events = [
        launch(0, 1),
        gpu("k1", 10, 10, 1),
        launch(15, 2, dur=10, name="cudaMemcpyAsync"),
        gpu("Memcpy DtoH (Device -> Pageable)", 20, 3, 2, cat="gpu_memcpy"),
        launch(40, 3),
        gpu("k2", 45, 10, 3),
    ]
    result = idle_causes(load_trace_file(write_trace(events)))
    assert result.idle("sync") == 22_000  # the gap [23, 45) follows the blocking copy


def test_short_loader_overlap_is_not_input_bound(write_trace: Callable[..., Path]) -> None:
    events = [
        launch(0, 1),
        gpu("k1", 10, 10, 1),
        cpu(LOADER, 90, 10, cat="user_annotation"),  # 10 of a 100 µs gap
        launch(100, 2),
        gpu("k2", 120, 10, 2),
    ]
    result = idle_causes(load_trace_file(write_trace(events)))
    assert result.idle("data_loader") == 0 and result.idle("cpu_ops") == 100_000


def test_covered() -> None:
    s, e = np.array([0, 10, 30]), np.array([5, 20, 40])
    got = covered(s, e, np.array([0, 3, 15, 25, 45]), np.array([50, 12, 35, 28, 60]))
    assert got.tolist() == [25, 4, 10, 0, 0]


def test_steps(write_trace: Callable[..., Path]) -> None:
    trace = load_trace_file(write_trace(every_cause()))
    first, second = steps(trace, idle_causes(trace))
    assert (first.number, first.start_ns, first.end_ns) == (1, 1_000_000, 1_200_000)
    assert (first.kernels, first.kernel_time_ns, first.busy_ns) == (4, 27_000, 27_000)
    assert first.device_idle_ns == 173_000
    assert first.idle_causes_ns == {
        "data_loader": 110_000,
        "sync": 15_000,
        "launch_overhead": 6_000,
        "cpu_ops": 32_000,
        "gpu_wait": 0,
        "unknown": 0,
    }
    assert (second.kernels, second.kernel_time_ns, second.device_idle_ns) == (3, 25_000, 225_000)
    assert second.idle_causes_ns["cpu_ops"] == 105_000
    assert second.to_dict(1_000_000)["idle_share"] == pytest.approx(225 / 250)


def test_no_steps_without_profiler_steps(write_trace: Callable[..., Path]) -> None:
    assert steps(load_trace_file(write_trace([launch(0, 1), gpu("k", 5, 1, 1)]))) == []
