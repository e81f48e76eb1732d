"""Engine timeline and native-to-TensorRT recommendations, hand-built and on the simulation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from gpulens.analyze.engines import EngineSettings, engine_timeline, recommend_engine_migration

T0 = 1_764_374_400 * 1_000_000_000
NS = 1_000_000_000
STEP = 60 * NS


def _rows(engine: str, gpu: str, n: int, **cols: Any) -> list[dict[str, Any]]:
    base = {"step_s": 60.0, "host": "h1", "gpu_uuid": gpu, "engine": engine,
            "process_name": f"serve-{engine}", "project": "embed", "model_parameters": 3.35e8,
            "job_id": f"job-{gpu}"}  # fmt: skip
    return [
        {
            **base,
            "start_ns": T0 + i * STEP,
            **{k: (v[i] if isinstance(v, list) else v) for k, v in cols.items()},
        }
        for i in range(n)
    ]


def test_timeline_weighted_means_per_engine_and_bucket() -> None:
    sm = [0.2, 0.4, 0.3, 0.5]
    rows = _rows("pytorch", "a", 4, sm_active=sm) + _rows("tensorrt", "b", 4, sm_active=0.8)
    rows[1]["step_s"] = 30.0  # weights count
    rows[0]["state"] = "warmup"
    for r in rows:
        r.setdefault("state", "compute_tensor")
    out = engine_timeline(pa.Table.from_pylist(rows), bucket_s=120.0).to_pylist()
    assert [(r["engine"], r["bucket_ns"]) for r in out] == [
        ("pytorch", T0), ("pytorch", T0 + 2 * STEP), ("tensorrt", T0), ("tensorrt", T0 + 2 * STEP)
    ]  # fmt: skip
    assert out[0]["sm_active"] == pytest.approx(0.4)  # the warm-up row is left out
    assert out[0]["gpu_hours"] == pytest.approx(30 / 3600)
    assert out[1]["sm_active"] == pytest.approx(np.average([0.3, 0.5], weights=[60, 60]))
    assert out[2]["gpus"] == 1 and out[2]["intervals"] == 2
    assert out[0]["tensor_active"] is None


def test_measured_gain_from_the_same_model_on_tensorrt() -> None:
    eager = _rows("pytorch", "a", 30, state="hollow_busy", sm_active=0.25, tokens_per_s=3.6e5)
    trt = _rows("tensorrt", "b", 30, state="memory_bound", sm_active=0.8, tokens_per_s=1.36e6)
    trt[0]["state"] = "warmup"
    trt[0]["tokens_per_s"] = 1.0  # warm-up rows do not count
    (rec,) = recommend_engine_migration(pa.Table.from_pylist(eager + trt)).to_pylist()
    assert rec["engine"] == "pytorch" and rec["dominant_state"] == "hollow_busy"
    assert rec["gain_kind"] == "measured" and rec["target_engine"] == "tensorrt"
    assert rec["expected_gain"] == pytest.approx(1.36e6 / 3.6e5)
    assert "tokens/s" in rec["gain_basis"]
    assert rec["gpu_hours"] == pytest.approx(0.5)
    assert rec["gpu_hours_saved"] == pytest.approx(0.5 * (1 - 3.6e5 / 1.36e6))
    assert "TensorRT" in rec["recommendation"]


def test_latency_is_used_when_there_is_no_throughput() -> None:
    eager = _rows("pytorch", "a", 10, state="hollow_busy", sm_active=0.25, latency_p50_s=0.062)
    trt = _rows("tensorrt", "b", 10, state="memory_bound", latency_p50_s=0.016)
    (rec,) = recommend_engine_migration(pa.Table.from_pylist(eager + trt)).to_pylist()
    assert rec["expected_gain"] == pytest.approx(0.062 / 0.016)


def test_estimates_from_the_activity_gap_and_precision() -> None:
    hollow = _rows("pytorch", "a", 10, state="hollow_busy", sm_active=0.2, project="p1")
    membound = _rows("onnxruntime", "b", 10, state="memory_bound", sm_active=0.5,
                     dram_active=0.85, project="p2")  # fmt: skip
    busy = _rows("pytorch", "c", 10, state="compute_tensor", sm_active=0.9, project="p3")
    mixed = _rows("tensorflow", "d", 10, state=["hollow_busy"] * 4 + ["compute_tensor"] * 6,
                  sm_active=0.3, project="p4")  # fmt: skip
    out = {
        r["engine"]: r
        for r in recommend_engine_migration(
            pa.Table.from_pylist(membound + hollow + busy + mixed)
        ).to_pylist()
    }
    assert set(out) == {"pytorch", "onnxruntime"}  # busy is fine, mixed is under half
    assert out["pytorch"]["gain_kind"] == "estimate"
    assert out["pytorch"]["expected_gain"] == pytest.approx(0.75 / 0.2)
    assert out["onnxruntime"]["expected_gain"] == pytest.approx(2.0)
    assert "DRAM activity 0.85" in out["onnxruntime"]["gain_basis"]
    capped = recommend_engine_migration(
        pa.Table.from_pylist(hollow), EngineSettings(max_estimated_gain=3.0)
    )
    assert capped.column("expected_gain").to_pylist() == [3.0]


def test_state_column_is_required() -> None:
    with pytest.raises(ValueError, match="classify"):
        recommend_engine_migration(pa.Table.from_pylist(_rows("pytorch", "a", 2)))


def test_simulated_eager_versus_tensorrt(
    tmp_path: Path, simulated_store: Callable[..., Any]
) -> None:
    from gpulens.analyze.efficiency import classify
    from gpulens.store import Store
    from gpulens.store.frames import gpu_intervals

    span = 20 * 60
    scenarios = ["eager_inference", "tensorrt_inference"]
    simulated_store(tmp_path, T0, span, gpus_per_host=2, scenarios=scenarios)
    with Store(tmp_path) as store:
        frame = classify(gpu_intervals(store, 60.0, T0, T0 + span * NS))
    (rec,) = recommend_engine_migration(frame).to_pylist()
    assert rec["engine"] == "pytorch" and rec["gain_kind"] == "measured"
    assert rec["target_engine"] == "tensorrt"
    # throughput of the two simulated serving loops: 32 samples per (schedule + forward)
    expected = (0.0015 + 0.0435) / (0.0006 + 0.0114)
    assert rec["expected_gain"] == pytest.approx(expected, rel=0.1)
    engines = set(engine_timeline(frame).column("engine").to_pylist())
    assert {"pytorch", "tensorrt"} <= engines
