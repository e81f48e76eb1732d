"""MFU per job from reported throughput, checked against the PaLM formula by hand."""

from __future__ import annotations

import pyarrow as pa
import pytest

from gpulens.analyze.mfu import job_mfu


def _frame(rows: list[dict[str, object]]) -> pa.Table:
    return pa.Table.from_pylist(rows)


def test_job_mfu_is_the_palm_formula_averaged_over_intervals() -> None:
    base = {
        "job_id": "j",
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "model_parameters": 7e9,
        "state": "compute_tensor",
    }
    rows = [
        # two GPUs, two intervals; the job reports 20k and 30k tokens/s on each of its GPUs
        {**base, "start_ns": 0, "gpu_uuid": "a", "tokens_per_s": 20_000.0},
        {**base, "start_ns": 0, "gpu_uuid": "b", "tokens_per_s": 20_000.0},
        {**base, "start_ns": 60, "gpu_uuid": "a", "tokens_per_s": 30_000.0},
        {**base, "start_ns": 60, "gpu_uuid": "b", "tokens_per_s": 30_000.0},
        # warm-up is left out
        {**base, "start_ns": 120, "gpu_uuid": "a", "tokens_per_s": 1.0, "state": "warmup"},
    ]
    out = job_mfu(_frame(rows)).to_pylist()
    peak = 989.4e12  # H100 SXM dense BF16 per GPU
    expected = (20_000 * 6 * 7e9 / (2 * peak) + 30_000 * 6 * 7e9 / (2 * peak)) / 2
    assert len(out) == 1
    assert out[0]["mfu"] == pytest.approx(expected, rel=1e-9)
    assert out[0]["intervals"] == 2 and out[0]["gpus"] == 2


def test_no_mfu_without_tokens_parameters_or_a_known_peak() -> None:
    rows = [
        {
            "job_id": "a",
            "start_ns": 0,
            "gpu_uuid": "x",
            "gpu_model": "NVIDIA H100 80GB HBM3",
            "tokens_per_s": None,
            "model_parameters": 7e9,
        },
        {
            "job_id": "b",
            "start_ns": 0,
            "gpu_uuid": "y",
            "gpu_model": "Mystery GPU 9000",
            "tokens_per_s": 1e4,
            "model_parameters": 7e9,
        },
    ]
    assert job_mfu(_frame(rows)).num_rows == 0
    assert job_mfu(_frame([{"job_id": "a"}])).num_rows == 0
