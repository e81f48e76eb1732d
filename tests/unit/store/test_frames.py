"""gpu_intervals: the interval frame built from a hand-written store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpulens.analyze.schema import ALL_COLUMNS
from gpulens.model import Kind, Reading
from gpulens.store import SegmentWriter, Store
from gpulens.store.frames import COLUMNS, gpu_intervals

NS = 1_000_000_000
T0 = 1_764_374_400 * NS  # a whole minute
GPU = {"host": "node1", "gpu_uuid": "GPU-a", "gpu_index": "0", "gpu_model": "NVIDIA H100 PCIe"}
GPU_B = {"host": "node1", "gpu_uuid": "GPU-b", "gpu_index": "1", "gpu_model": "NVIDIA H100 PCIe"}
JOB = {"job_id": "job-'1", "user": "alice", "engine": "pytorch", "project": "p"}


def _readings() -> list[Reading]:
    out: list[Reading] = []
    energy = 1000.0
    for s in range(180):  # three minutes at 1 s
        ts = T0 + s * NS
        energy = 5.0 if s == 150 else energy + 100.0  # the counter resets in minute 2
        out.append(
            Reading(
                Kind.GPU,
                ts,
                GPU,
                {
                    "gpu_util_ratio": 1.0 if s % 2 else 0.5,
                    "sm_active_ratio": 0.2 + 0.01 * (s % 60),
                    "power_watts": 100.0,
                    "energy_joules": energy,
                    "memory_used_bytes": 1e9 + s * 1e6,
                    "clocks_event_reasons": 4.0 if s < 30 else 1.0,  # power cap, then idle bit
                    "sm_clock_hertz": 1.5e9,
                },
            )
        )
        out.append(Reading(Kind.GPU, ts, GPU_B, {"gpu_util_ratio": 0.0}))
        if s < 120:  # two processes on GPU-a for two minutes; the big one is pid 7
            for pid, mem in (("7", 4e9), ("8", 1e9)):
                labels = {**GPU, "pid": pid, "process_name": f"p{pid}", **JOB}
                out.append(Reading(Kind.PROCESS, ts, labels, {"process_memory_used_bytes": mem}))
        out.append(Reading(Kind.HOST, ts, {"host": "node1"}, {"host_cpu_util_ratio": 0.5}))
        app = {"job_id": JOB["job_id"]}
        out.append(Reading(Kind.APP, ts, app, {"app_data_wait_ratio": 0.3,
                                               "app_tokens_per_second": 1000.0}))  # fmt: skip
        out.append(Reading(Kind.APP, ts, {**app, "gpu_uuid": "GPU-a"},
                           {"app_data_wait_ratio": 0.1}))  # fmt: skip
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    root: Path = tmp_path_factory.mktemp("frames")
    with SegmentWriter(root, "node1") as writer:
        writer.append(_readings())
    return Store(root)


def _rows(store: Store, **kw: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = gpu_intervals(store, 60.0, **kw).to_pylist()
    return rows


def test_columns_are_the_schema(store: Store) -> None:
    assert COLUMNS == ALL_COLUMNS
    assert gpu_intervals(store).column_names == list(ALL_COLUMNS)


def test_means_levels_and_spread(store: Store) -> None:
    rows = [r for r in _rows(store) if r["gpu_uuid"] == "GPU-a"]
    assert [r["start_ns"] for r in rows] == [T0, T0 + 60 * NS, T0 + 120 * NS]
    r = rows[0]
    assert (r["samples"], r["step_s"]) == (60, 60.0)
    assert r["duty"] == pytest.approx(0.75)
    assert r["duty_min"] == pytest.approx(0.5)
    assert r["sm_active"] == pytest.approx(0.2 + 0.01 * 29.5, abs=1e-3)
    assert (r["sm_active_min"], r["sm_active_max"]) == pytest.approx((0.2, 0.79), abs=1e-3)
    assert r["memory_used_first"] == pytest.approx(1e9, rel=1e-6)
    assert r["memory_used_last"] == pytest.approx(1e9 + 59e6, rel=1e-6)
    assert r["memory_used_bytes"] == r["memory_used_last"]
    assert r["tensor_active"] is None and r["power_limit_w"] is None  # missing stays null


def test_throttle_fractions_from_the_bitmask(store: Store) -> None:
    r0, r1, _ = [r for r in _rows(store) if r["gpu_uuid"] == "GPU-a"]
    assert r0["throttle_power"] == pytest.approx(0.5)
    assert r0["throttle_thermal"] == 0.0
    assert r0["clock_idle"] == pytest.approx(0.5)
    assert (r1["throttle_power"], r1["clock_idle"]) == (0.0, 1.0)


def test_energy_counter_and_power_estimate(store: Store) -> None:
    r0, r1, r2 = [r for r in _rows(store) if r["gpu_uuid"] == "GPU-a"]
    assert r0["energy_j"] == pytest.approx(5900.0)  # first interval: last - first
    assert r1["energy_j"] == pytest.approx(6000.0)  # carried from the previous interval's last
    # a reset inside the interval: only the rise up to the largest reading counts (16000 - 13000)
    assert r2["energy_j"] == pytest.approx(3000.0)
    assert r0["energy_power_j"] == pytest.approx(6000.0)
    b = next(r for r in _rows(store) if r["gpu_uuid"] == "GPU-b")
    assert b["energy_j"] is None and b["energy_power_j"] is None


def test_attribution_to_the_biggest_process(store: Store) -> None:
    r0, _, r2 = [r for r in _rows(store) if r["gpu_uuid"] == "GPU-a"]
    assert (r0["pid"], r0["process_name"], r0["job_id"], r0["user"]) == ("7", "p7", "job-'1",
                                                                          "alice")  # fmt: skip
    assert r0["processes"] == 2
    assert r0["process_memory_bytes"] == pytest.approx(5e9)
    assert (r2["pid"], r2["processes"], r2["process_memory_bytes"]) == (None, 0, None)


def test_host_and_app_context(store: Store) -> None:
    r0, _, r2 = [r for r in _rows(store) if r["gpu_uuid"] == "GPU-a"]
    assert r0["host_cpu"] == pytest.approx(0.5)
    assert r0["data_wait"] == pytest.approx(0.1)  # the GPU's own reading wins
    assert r0["tokens_per_s"] == pytest.approx(1000.0)  # the job-wide reading fills in
    assert r2["data_wait"] is None  # no attributed job, no app context
    b = next(r for r in _rows(store) if r["gpu_uuid"] == "GPU-b")
    assert b["host_cpu"] == pytest.approx(0.5) and b["data_wait"] is None


def test_time_bounds_and_where(store: Store) -> None:
    rows = _rows(store, start_ns=T0 + 60 * NS, end_ns=T0 + 120 * NS)
    assert {r["start_ns"] for r in rows} == {T0 + 60 * NS}
    assert {r["gpu_uuid"] for r in _rows(store, where={"gpu_uuid": "GPU-b"})} == {"GPU-b"}
    job = _rows(store, where={"job_id": "job-'1"})  # a quote in a value is just data
    assert [(r["gpu_uuid"], r["start_ns"]) for r in job] == [("GPU-a", T0), ("GPU-a", T0 + 60 * NS)]
    assert _rows(store, where={"user": "alice' OR '1'='1"}) == []
    with pytest.raises(ValueError, match="cannot filter"):
        gpu_intervals(store, where={"sm_active_ratio": "1"})
    with pytest.raises(ValueError, match="positive"):
        gpu_intervals(store, 0.0)


def test_empty_store(tmp_path: Path) -> None:
    with Store(tmp_path) as empty:
        frame = gpu_intervals(empty)
    assert frame.num_rows == 0 and frame.column_names == list(ALL_COLUMNS)
