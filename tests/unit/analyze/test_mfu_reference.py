"""MFU per job against a bucket-by-bucket reference, on random frames."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from gpulens.analyze.efficiency import mfu
from gpulens.analyze.mfu import _tensor_peak, job_mfu

MODELS = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "Mystery", "", None, "Tesla T4"]


def _reference(frame: pa.Table) -> list[dict[str, Any]]:
    """Row by row: per (job, interval) the largest tokens/s, the last parameters and GPU model,
    the distinct GPUs; a job's MFU is the mean over its intervals, in the order they appear."""
    buckets: dict[tuple[str, int], dict[str, Any]] = {}
    for r in frame.to_pylist():
        if r["job_id"] is None or r.get("state") == "warmup":
            continue
        b = buckets.setdefault((r["job_id"], r["start_ns"]), {"gpus": set(), "model": None})
        if r["tokens_per_s"] is not None:
            b["tokens"] = max(r["tokens_per_s"], b.get("tokens") or 0.0)
        if r["model_parameters"] is not None:
            b["params"] = r["model_parameters"]
        b["gpus"].add(str(r["gpu_uuid"]))
        if r["gpu_model"]:
            b["model"] = r["gpu_model"]
    per_job: dict[str, list[float]] = defaultdict(list)
    gpus: dict[str, int] = {}
    peak_of: dict[str, float] = {}
    for (job, _), b in buckets.items():
        peak = _tensor_peak(b["model"])
        if peak is None or b.get("tokens") is None or not b.get("params"):
            continue
        per_job[job].append(mfu(b["tokens"], b["params"], len(b["gpus"]), peak))
        gpus[job] = max(gpus.get(job, 0), len(b["gpus"]))
        peak_of[job] = peak
    return [
        {
            "job_id": j,
            "mfu": sum(per_job[j]) / len(per_job[j]),
            "intervals": len(per_job[j]),
            "gpus": gpus[j],
            "peak_tflops": peak_of[j],
        }
        for j in sorted(per_job)
    ]


@pytest.mark.parametrize("seed", range(30))
def test_job_mfu_matches_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 120))

    def maybe(values: np.ndarray) -> pa.Array:
        return pa.array(np.where(rng.random(n) < 0.3, np.nan, values), from_pandas=True)

    frame = pa.table(
        {
            "job_id": [None if x == 0 else f"j{x}" for x in rng.integers(0, 6, n)],
            "start_ns": rng.integers(0, 10, n) * 60,
            "gpu_uuid": [None if x == 0 else f"g{x}" for x in rng.integers(0, 5, n)],
            "gpu_model": [MODELS[i] for i in rng.integers(0, len(MODELS), n)],
            "tokens_per_s": maybe(rng.random(n) * 1e4 - 1e3),
            "model_parameters": maybe(rng.choice([0.0, 7e9, 1.3e9, 70e9], n)),
            "state": [["warmup", "busy", None][i] for i in rng.integers(0, 3, n)],
        }
    )
    if seed % 2:
        frame = frame.drop_columns(["state"])
    assert job_mfu(frame).to_pylist() == _reference(frame)
