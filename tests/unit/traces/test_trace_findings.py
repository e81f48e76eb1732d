"""Each trace finding fires on the synthetic trace made for it, with its evidence."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpulens.analyze.traces.ranks import analyze_job, analyze_rank
from gpulens.app.traces import load_trace_file
from gpulens.findings.model import Finding, Severity
from gpulens.findings.traces import rank_findings, trace_findings

from .scenarios import (
    comm_exposed,
    cpu_bound,
    every_cause,
    gpu,
    launch,
    launch_bound,
    pageable_copies,
    rank,
    sync_heavy,
)


def _rules(write_trace: Callable[..., Path], events: list[dict[str, Any]]) -> dict[str, Finding]:
    analysis = analyze_rank(load_trace_file(write_trace(events), rank=0))
    return {f.rule_id: f for f in rank_findings(analysis)}


def test_input_bound(write_trace: Callable[..., Path]) -> None:
    found = _rules(write_trace, every_cause())
    f = found["input_bound"]
    assert f.severity is Severity.CRITICAL  # 110 of 420 µs
    assert f.subject == {"trace": "trace.json", "rank": "0"}
    assert f.window == (1_000_000, 1_450_000)
    share = f.evidence[0]
    assert share.metric == "data_loader_idle_share" and abs(share.value - 110 / 420) < 1e-9
    assert any("at +20.0 µs" in e.note and "DataLoader" in e.note for e in f.evidence)
    assert "num_workers" in f.recommendation
    assert "sync_heavy" not in found and "launch_bound" not in found


def test_cpu_bound(write_trace: Callable[..., Path]) -> None:
    found = _rules(write_trace, cpu_bound())
    f = found["cpu_bound"]
    assert f.severity is Severity.CRITICAL  # 80 of 120 µs idle, the CPU busy in Python
    metrics = {e.metric: e.value for e in f.evidence}
    assert metrics["cpu_ops_idle_share"] == 80 / 120
    assert metrics["cpu_busy_share"] == 70 / 80 and metrics["python_share"] == 70 / 80
    assert any("train.py(42): step" in e.note for e in f.evidence)
    assert "torch.compile" in f.recommendation
    assert f.impact.wasted_gpu_hours == 80_000 / 3.6e12
    # the same idle with nothing profiled on the CPU side: not shown to be CPU-bound
    assert "cpu_bound" not in _rules(write_trace, cpu_bound(python=False))


def test_launch_bound(write_trace: Callable[..., Path]) -> None:
    f = _rules(write_trace, launch_bound())["launch_bound"]
    assert f.severity is Severity.CRITICAL
    metrics = {e.metric: e.value for e in f.evidence}
    assert metrics["launch_overhead_idle_us"] == 72
    assert metrics["kernels_shorter_than_launch_share"] == 1.0
    assert "CUDA graphs" in f.recommendation


def test_sync_heavy(write_trace: Callable[..., Path]) -> None:
    f = _rules(write_trace, sync_heavy())["sync_heavy"]
    assert {e.metric: e.value for e in f.evidence}["sync_idle_us"] == 20
    assert any("cudaStreamSynchronize" in e.note for e in f.evidence)
    assert ".item()" in f.recommendation


def test_comm_exposed_and_low_tensor_use(write_trace: Callable[..., Path]) -> None:
    found = _rules(write_trace, comm_exposed())
    f = found["comm_exposed"]
    assert f.severity is Severity.WARNING  # 60 of 210 µs
    metrics = {e.metric: e.value for e in f.evidence}
    assert metrics["exposed_comm_us"] == 60 and metrics["AllReduce_exposed_us"] == 60
    low = found["low_tensor_use"]  # the sgemm is 100 of 210 µs of GPU time
    assert low.severity is Severity.CRITICAL
    assert "allow_tf32" in low.recommendation


def test_memcpy_pageable(write_trace: Callable[..., Path]) -> None:
    f = _rules(write_trace, pageable_copies())["memcpy_pageable"]
    assert f.severity is Severity.CRITICAL  # 20 of 100 µs
    assert {e.metric: e.value for e in f.evidence}["pageable_h2d_us"] == 20
    assert "pin_memory" in f.recommendation


def test_straggler(write_trace: Callable[..., Path]) -> None:
    paths = [
        write_trace(rank(100, 100, 0), "rank0.json"),
        write_trace(rank(190, 10, 1), "rank1.json"),
    ]
    analyses, cluster = analyze_job([load_trace_file(p) for p in paths])
    found = [f for f in trace_findings(analyses, cluster) if f.rule_id == "straggler"]
    (f,) = found
    assert f.subject == {"trace": "rank1.json", "rank": "1"}
    assert f.severity is Severity.CRITICAL  # 90 % more compute than rank 0
    assert {e.metric: e.value for e in f.evidence}["straggler_compute_us"] == 190
    assert f.to_dict()["window"] == {"start_ns": 0, "end_ns": 200_000}


def test_quiet_trace_has_no_findings(write_trace: Callable[..., Path]) -> None:
    from .scenarios import gpu, launch

    events = [launch(0, 1), gpu("sm80_xmma_gemm_bf16", 5, 100, 1)]
    assert _rules(write_trace, events) == {}


def test_memcpy_pageable_from_many_small_copies_shows_the_count(
    write_trace: Callable[..., Path],
) -> None:
    events = [launch(0, 1), gpu("ampere_sgemm_128x64_nn", 5, 100_000, 1)]
    for i in range(12):  # 12 µs of copies in a 100 ms span: below the share, above the count
        events += [
            launch(100_000 + 10 * i, 2 + i, name="cudaMemcpyAsync"),
            gpu("Memcpy HtoD (Pageable -> Device)", 100_010 + 10 * i, 1, 2 + i, cat="gpu_memcpy"),
        ]
    f = _rules(write_trace, events)["memcpy_pageable"]
    assert f.severity is Severity.INFO
    rows = {e.metric: e for e in f.evidence}
    assert rows["pageable_h2d_copies"].value == 12 and rows["pageable_h2d_copies"].holds()
    assert rows["pageable_h2d_copies"].comparison == ">="
    share = rows["pageable_h2d_share"]
    assert share.comparison == "" and share.note.endswith("not >= 0.005")
    assert all(e.holds() for e in f.evidence)
