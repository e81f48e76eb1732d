"""Breakdown definitions on small hand-built traces."""

from __future__ import annotations

import json
from pathlib import Path

from gpulens.analyze.traces.breakdown import breakdown
from gpulens.app.traces import load_trace_file


def _trace(tmp_path: Path, events: list[dict[str, object]]) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    return path


def _launch(ts: int, corr: int) -> dict[str, object]:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": 1,
        "args": {"correlation": corr},
    }


def _kernel(ts: int, dur: int, corr: int, stream: int = 7, name: str = "gemm") -> dict[str, object]:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"stream": stream, "correlation": corr},
    }


def test_temporal_and_stream_idle(tmp_path: Path) -> None:
    events = [
        _launch(0, 1),
        _kernel(10, 10, 1),  # [10, 20)
        _launch(1, 2),
        _kernel(25, 5, 2),  # gap 5 µs, launched long before → kernel_wait
        _launch(100, 3),
        _kernel(110, 10, 3),  # gap 80, launch at 100 > 30 → host_wait
        _launch(101, 4),
        _kernel(200, 10, 4, name="ncclKernel_AllReduce"),  # gap 80 → other
        _launch(102, 5),
        _kernel(205, 10, 5, stream=8),  # other stream, overlaps nccl
        {
            "ph": "X",
            "cat": "kernel",
            "name": "orphan",
            "pid": 0,
            "tid": 7,
            "ts": 260,
            "dur": 10,
            "args": {"stream": 7, "correlation": 99},
        },  # no launch in trace
    ]
    result = breakdown(load_trace_file(_trace(tmp_path, events)))
    t = result.temporal
    assert t is not None
    assert t.kernel_time_ns == 260_000  # 10 → 270
    busy = 10 + 5 + 10 + 15 + 10  # [10,20) [25,30) [110,120) [200,215) [260,270)
    assert t.idle_ns == (260 - busy) * 1000
    assert t.compute_ns == (10 + 5 + 10 + 10 + 10) * 1000  # nccl not compute; stream 8 is
    assert t.non_compute_ns == 5_000
    s7 = {s.key: s for s in result.idle_by_stream}[7]
    assert (s7.kernel_wait_ns, s7.host_wait_ns) == (5_000, 80_000)
    assert s7.other_ns == 80_000 + 50_000  # the orphan's gap is never host wait
    assert s7.gaps_without_launch == 1
    (device,) = result.device_idle
    assert device.idle_ns == t.idle_ns
    assert device.split.idle_ns == device.idle_ns


def test_hta_quirk_orphan_takes_first_event_ts(tmp_path: Path) -> None:
    events = [
        _launch(1000, 1),
        _kernel(10, 10, 1),
        _kernel(100, 10, 2),  # correlation 2 has no launch: HTA uses traceEvents[0].ts = 1000
    ]
    path = _trace(tmp_path, events)
    ours = {s.key: s for s in breakdown(load_trace_file(path)).idle_by_stream}[7]
    hta = {s.key: s for s in breakdown(load_trace_file(path), hta_quirks=True).idle_by_stream}[7]
    assert (ours.host_wait_ns, ours.other_ns) == (0, 80_000)
    assert (hta.host_wait_ns, hta.other_ns) == (80_000, 0)


def test_hta_window_keeps_events_before_last_step(tmp_path: Path) -> None:
    def step(n: int, ts: int) -> dict[str, object]:
        return {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"ProfilerStep#{n}",
            "pid": 1,
            "tid": 1,
            "ts": ts,
            "dur": 100,
        }

    events = [
        step(1, 0),
        _launch(1, 1),
        _kernel(10, 10, 1),
        step(2, 100),
        _launch(101, 2),
        _kernel(110, 10, 2),
    ]
    trace = load_trace_file(_trace(tmp_path, events))
    windowed = breakdown(trace, hta_window=True)
    assert windowed.window_end_ns == 100_000
    assert windowed.temporal is not None and windowed.temporal.kernel_time_ns == 10_000
    full = breakdown(trace)
    assert full.temporal is not None and full.temporal.kernel_time_ns == 110_000
