"""engine_migration with latencies measured in the serving process: the telemetry rule uses
them for the workload's job instead of its estimate, and its evidence says so."""

from __future__ import annotations

import pytest

from .helpers import findings, series

SERVED = (
    {"job_id": "svc", "model": "M", "engine": "eager", "p50_ms": 12.0, "calls": 4000},
    {"job_id": "svc", "model": "M", "engine": "onnxruntime", "p50_ms": 4.0, "calls": 3000},
    {"job_id": "other", "model": "M", "engine": "tensorrt", "p50_ms": 1.0, "calls": 10},
)


def _rows() -> list[dict]:
    return series(30, duty=0.95, sm_active=0.25, tensor_active=0.05, engine="pytorch",
                  process_name="python serve.py", job_id="svc")  # fmt: skip


def test_measured_latencies_replace_the_estimate() -> None:
    (f,), _ = findings(_rows(), "engine_migration", latency=SERVED)
    ev = {e.metric: e for e in f.evidence}
    assert ev["expected_gain"].value == pytest.approx(3.0)  # 12 ms / 4 ms, the same job's
    assert ev["expected_gain"].note.startswith("measured: median latency of the same model (M")
    assert ev["latency_p50_ms"].value == 12.0 and ev["latency_p50_ms_optimised"].value == 4.0
    assert "onnxruntime" in f.summary and "estimate" not in f.recommendation
    assert f.impact.wasted_gpu_hours == pytest.approx(0.5 * (1 - 1 / 3.0))


def test_without_measurements_of_that_job_the_estimate_stays() -> None:
    (f,), _ = findings(_rows(), "engine_migration", latency=SERVED[2:])
    ev = {e.metric: e for e in f.evidence}
    assert ev["expected_gain"].value == pytest.approx(0.75 / 0.25)
    assert ev["expected_gain"].note.startswith("estimate")
    assert "latency_p50_ms" not in ev
