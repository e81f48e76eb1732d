"""Events are categorised and attached to the GPUs and buckets they affect."""

from __future__ import annotations

import pyarrow as pa
import pytest

from gpulens.analyze.events import attach_events, categorise

T0 = 1_764_374_400 * 1_000_000_000
NS = 1_000_000_000
STEP_NS = 60 * NS


@pytest.mark.parametrize(
    ("name", "message", "category"),
    [
        ("job_start", "job sim-1001 started", "job_start"),
        ("job_restart", "job sim-1001 restarted (attempt 2)", "job_restart"),
        ("deploy", "model search-embed deployed with tensorrt", "deploy"),
        ("oom", "CUDA out of memory: process exited", "oom"),
        ("app_error", "RuntimeError: CUDA out of memory. Tried to allocate", "oom"),
        ("driver_version", "NVIDIA driver 550.90.07", "version"),
        ("driver_version", "NVIDIA driver changed from 550.90.07 to 560.35.03", "version_change"),
        ("tensorrt_version", "TensorRT changed from 10.5 to 10.6", "version_change"),
        ("engine_build", "TensorRT engine built in 240 s (fp16)", "engine_build"),
        ("engine_build_failed", "TensorRT engine build failed: no tactic", "engine_build_failed"),
        ("engine_build", "engine build failed: unsupported op", "engine_build_failed"),
        ("engine_fallback", "fell back to the PyTorch path", "engine_fallback"),
        ("triton", "model fell back to the native path", "engine_fallback"),
        ("xid", "XID 79 on GPU GPU-1", "xid"),
        ("gpu_lost", "GPU GPU-1 is no longer reachable", "gpu_lost"),
        ("something", "else", "other"),
    ],
)
def test_categorise(name: str, message: str, category: str) -> None:
    assert categorise(name, message) == category


def _frame() -> pa.Table:
    rows = []
    for host, gpu, job in (("h1", "a", "j1"), ("h1", "b", "j2"), ("h2", "c", "j3")):
        for i in range(10):
            rows.append(
                {
                    "start_ns": T0 + i * STEP_NS,
                    "step_s": 60.0,
                    "host": host,
                    "gpu_uuid": gpu,
                    "job_id": job,
                }
            )
    return pa.Table.from_pylist(rows)


def test_attach_by_job_gpu_and_host() -> None:
    ts = T0 + 3 * STEP_NS + 5 * NS  # inside bucket 3
    events = pa.table(
        {
            "ts": pa.array([ts, ts, ts, T0 + 100 * STEP_NS], pa.timestamp("ns")),
            "event": ["job_start", "driver_version", "xid", "oom"],
            "message": ["job j1 started", "NVIDIA driver 550", "XID 79", "CUDA out of memory"],
            "host": ["h1", "h1", "h2", "h1"],
            "gpu_uuid": [None, None, "c", None],
            "job_id": ["j1", None, None, None],
        }
    )
    out = attach_events(_frame(), events, window_ns=2 * STEP_NS).to_pylist()
    by_event: dict[int, list[dict[str, object]]] = {}
    for r in out:
        by_event.setdefault(int(r["event_index"]), []).append(r)
    # job j1 only runs on GPU a; window [ts - 2 steps, ts + 2 steps) covers buckets 1..5
    (job,) = by_event[0]
    assert (job["gpu_uuid"], job["job_id"], job["category"]) == ("a", "j1", "job_start")
    assert job["bucket_ns"] == T0 + 3 * STEP_NS
    assert (job["first_bucket_ns"], job["last_bucket_ns"]) == (T0 + STEP_NS, T0 + 5 * STEP_NS)
    assert job["rows"] == 5
    # a host-wide event touches both GPUs of h1 and none of h2
    assert sorted(r["gpu_uuid"] for r in by_event[1]) == ["a", "b"]  # type: ignore[type-var]
    assert {r["job_id"] for r in by_event[1]} == {"j1", "j2"}
    assert [(r["host"], r["gpu_uuid"]) for r in by_event[2]] == [("h2", "c")]
    # no data near it: still one row to annotate, with no GPU and no rows
    (lost,) = by_event[3]
    assert (lost["gpu_uuid"], lost["rows"], lost["bucket_ns"]) == (None, 0, None)
    assert lost["category"] == "oom"


def test_no_events_gives_an_empty_table_with_the_columns() -> None:
    empty = pa.table({"ts": pa.array([], pa.int64()), "event": pa.array([], pa.string())})
    out = attach_events(_frame(), empty, window_ns=STEP_NS)
    assert out.num_rows == 0 and "bucket_ns" in out.column_names
