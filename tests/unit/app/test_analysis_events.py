"""A report sees the store's events: a driver change followed by a drop in useful work is a
`baseline_regression` finding, and a report of the same readings without the events has none."""

from __future__ import annotations

from pathlib import Path

from gpulens.app.analysis import analyse
from gpulens.model import Kind, Reading, event
from gpulens.store import SegmentWriter, Store

NS = 1_000_000_000
T0 = 1_790_000_040 * NS
GPU = {"host": "node1", "gpu_uuid": "GPU-0", "gpu_index": "0", "gpu_model": "NVIDIA H100 80GB HBM3"}
PROC = {**GPU, "pid": "100", "user": "alice", "job_id": "job-1", "engine": "pytorch"}


def _write(data_dir: Path, with_events: bool) -> None:
    readings: list[Reading] = []
    change = T0 + 3600 * NS
    for s in range(0, 2 * 3600, 10):
        ts = T0 + s * NS
        tensor = 0.55 if ts < change else 0.35  # tensor activity drops after the new driver
        readings.append(
            Reading(
                Kind.GPU,
                ts,
                GPU,
                {
                    "gpu_util_ratio": 0.99,
                    "sm_active_ratio": 0.9,
                    "tensor_active_ratio": tensor,
                    "fp32_active_ratio": 0.08,
                    "dram_active_ratio": 0.35,
                    "sm_clock_hertz": 1.98e9,
                    "sm_clock_max_hertz": 1.98e9,
                    "power_watts": 600.0,
                    "power_limit_watts": 700.0,
                    "memory_used_bytes": 40e9,
                    "memory_total_bytes": 80e9,
                },
            )
        )
        readings.append(Reading(Kind.PROCESS, ts, PROC, {"process_memory_used_bytes": 40e9}))
    if with_events:
        readings.append(event(T0, "driver_version", "NVIDIA driver 550.90", {"host": "node1"}))
        readings.append(event(change, "driver_version", "NVIDIA driver 560.10", {"host": "node1"}))
    with SegmentWriter(data_dir, "node1", flush_seconds=86400) as writer:
        writer.append(readings)


def test_a_report_sees_version_changes(tmp_path: Path) -> None:
    for with_events in (True, False):
        data = tmp_path / str(with_events)
        _write(data, with_events)
        with Store(data) as store:
            view = analyse(store, step_s=60.0)
        rules = {f.rule_id for f in view.findings}
        assert ("baseline_regression" in rules) is with_events, rules
