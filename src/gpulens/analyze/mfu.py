"""Model FLOPs utilisation per job, from the throughput the application reports.

Per (job, interval): the job's tokens/s (the largest value on its GPU rows: applications
report the job's throughput, repeated on each of its GPUs, or per rank, in which case this is
a lower bound), its parameter count, its GPUs in that interval and their dense tensor peak
(`peaks`), into the PaLM formula (`efficiency.mfu`). A job's MFU is the mean over its intervals
outside warm-up. Jobs without tokens/s or parameters, or on a GPU whose peak is unknown, get
no MFU (absent, never 0).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from gpulens.analyze import peaks as peak_table
from gpulens.analyze.efficiency import mfu

PeakOf = Callable[[str | None], float | None]


def _tensor_peak(model: str | None) -> float | None:
    spec = peak_table.lookup(model)
    if spec is None:
        return None
    found = peak_table.tensor_peak(spec)
    return None if found is None else found[1]


@dataclass
class _Bucket:
    tokens: float | None = None
    params: float | None = None
    model: str | None = None
    gpus: set[str] = field(default_factory=set)


def job_mfu(frame: pa.Table, peak_of: PeakOf = _tensor_peak) -> pa.Table:
    """One row per job with a known MFU: `job_id`, `mfu`, `intervals`, `gpus`, `peak_tflops`."""
    needed = {"job_id", "start_ns", "tokens_per_s", "model_parameters", "gpu_uuid"}
    empty = pa.table(
        {
            "job_id": pa.array([], pa.string()),
            "mfu": pa.array([], pa.float64()),
            "intervals": pa.array([], pa.int64()),
            "gpus": pa.array([], pa.int64()),
            "peak_tflops": pa.array([], pa.float64()),
        }
    )
    if not needed <= set(frame.column_names):
        return empty
    cols = {
        name: frame[name].to_pylist()
        for name in (*needed, "gpu_model", "state")
        if name in frame.column_names
    }
    buckets: dict[tuple[str, int], _Bucket] = {}
    states = cols.get("state")
    models = cols.get("gpu_model")
    for i, job in enumerate(cols["job_id"]):
        if job is None or (states is not None and states[i] == "warmup"):
            continue
        b = buckets.setdefault((job, cols["start_ns"][i]), _Bucket())
        tokens, params = cols["tokens_per_s"][i], cols["model_parameters"][i]
        if tokens is not None:
            b.tokens = max(float(tokens), b.tokens or 0.0)
        if params is not None:
            b.params = float(params)
        b.gpus.add(str(cols["gpu_uuid"][i]))
        if models is not None and models[i]:
            b.model = str(models[i])
    per_job: dict[str, list[float]] = defaultdict(list)
    gpus_of: dict[str, int] = {}
    peak_for: dict[str, float] = {}
    peaks: dict[str | None, float | None] = {}  # one datasheet lookup per GPU model
    for (job, _), b in buckets.items():
        if b.model not in peaks:
            peaks[b.model] = peak_of(b.model)
        peak = peaks[b.model]
        if peak is None or b.tokens is None or not b.params or not b.gpus:
            continue
        per_job[job].append(mfu(b.tokens, b.params, len(b.gpus), peak))
        gpus_of[job] = max(gpus_of.get(job, 0), len(b.gpus))
        peak_for[job] = peak
    if not per_job:
        return empty
    jobs = sorted(per_job)
    return pa.table(
        {
            "job_id": pa.array(jobs, pa.string()),
            "mfu": pa.array([sum(per_job[j]) / len(per_job[j]) for j in jobs], pa.float64()),
            "intervals": pa.array([len(per_job[j]) for j in jobs], pa.int64()),
            "gpus": pa.array([gpus_of[j] for j in jobs], pa.int64()),
            "peak_tflops": pa.array([peak_for[j] for j in jobs], pa.float64()),
        }
    )
