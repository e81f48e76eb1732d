"""Model FLOPs utilisation per job, from the throughput the application reports.

Per (job, interval): the job's tokens/s (the largest value on its GPU rows: applications
report the job's throughput, repeated on each of its GPUs, or per rank, in which case this is
a lower bound), its parameter count, its GPUs in that interval and their dense tensor peak
(`peaks`), into the PaLM formula (`efficiency.mfu`). A job's MFU is the mean over its intervals
outside warm-up. Jobs without tokens/s or parameters, or on a GPU whose peak is unknown, get
no MFU (absent, never 0).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from gpulens.analyze import peaks as peak_table
from gpulens.analyze._arrays import Ints, codes, floats, label_codes, not_warmup, rows_of, split_at

PeakOf = Callable[[str | None], float | None]


def _tensor_peak(model: str | None) -> float | None:
    spec = peak_table.lookup(model)
    if spec is None:
        return None
    found = peak_table.tensor_peak(spec)
    return None if found is None else found[1]


_EMPTY = pa.schema(
    [
        ("job_id", pa.string()),
        ("mfu", pa.float64()),
        ("intervals", pa.int64()),
        ("gpus", pa.int64()),
        ("peak_tflops", pa.float64()),
    ]
)


def _last(bucket: Ints, rows: Ints, n: int) -> Ints:
    """Per bucket, the last of `rows` (ascending) that falls in it; -1 where none does."""
    out = np.full(n, -1, dtype=np.int64)
    np.maximum.at(out, bucket[rows], rows)
    return out


def job_mfu(frame: pa.Table, peak_of: PeakOf = _tensor_peak) -> pa.Table:
    """One row per job with a known MFU: `job_id`, `mfu`, `intervals`, `gpus`, `peak_tflops`."""
    needed = {"job_id", "start_ns", "tokens_per_s", "model_parameters", "gpu_uuid"}
    if not needed <= set(frame.column_names):
        return _EMPTY.empty_table()
    job, jobs = label_codes(frame, "job_id")
    keep = np.array([j is not None for j in jobs], dtype=bool)[job] & not_warmup(frame)
    f = rows_of(frame, keep, (*needed, "gpu_model"))
    job = job[keep]
    if f.num_rows == 0:
        return _EMPTY.empty_table()
    # buckets: (job, interval) in the order they first appear
    key = job * (f.num_rows + 1) + codes(f, "start_ns")
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    bucket = rank[np.asarray(inverse).reshape(-1)]
    n = first.size
    rows = np.arange(f.num_rows, dtype=np.int64)
    tokens = floats(f, "tokens_per_s")
    seen = ~np.isnan(tokens)
    top = np.full(n, -np.inf)
    np.maximum.at(top, bucket[seen], tokens[seen])
    has_tokens = np.bincount(bucket[seen], minlength=n) > 0
    top = np.maximum(top, 0.0)  # the largest value reported, never below 0
    params = floats(f, "model_parameters")
    last_param = _last(bucket, rows[~np.isnan(params)], n)
    param = np.where(last_param >= 0, params[np.maximum(last_param, 0)], np.nan)
    model, models = label_codes(f, "gpu_model")
    named = np.array([bool(m) for m in models], dtype=bool)[model]
    last_model = _last(bucket, rows[named], n)
    peak_of_model = np.array(
        [np.nan if (p := peak_of(str(m) if m else None)) is None else p for m in models]
    )
    no_model = peak_of(None)
    peak = np.where(
        last_model >= 0,
        peak_of_model[model[np.maximum(last_model, 0)]],
        np.nan if no_model is None else no_model,
    )
    gpu, _ = label_codes(f, "gpu_uuid")
    pairs = np.unique(bucket * (int(gpu.max()) + 1) + gpu)
    gpus = np.bincount(pairs // (int(gpu.max()) + 1), minlength=n)
    ok = ~np.isnan(peak) & has_tokens & (param != 0) & ~np.isnan(param)
    bucket_job = job[first[np.argsort(rank)]]  # the job of each bucket, in bucket order
    if not ok.any():
        return _EMPTY.empty_table()
    if (param[ok] < 0).any() or (peak[ok] <= 0).any():  # as `efficiency.mfu` refuses them
        raise ValueError(f"need n_params > 0 and peak > 0, got {param[ok].min()}, {peak[ok].min()}")
    # the PaLM formula (`efficiency.mfu`), per bucket, in the same order of operations
    value = top * (6.0 * param) / (gpus * peak * 1e12)
    picked = np.flatnonzero(ok)
    by_job = picked[np.argsort(bucket_job[picked], kind="stable")]
    owner = bucket_job[by_job]
    cuts = np.flatnonzero(np.diff(owner)) + 1
    groups = split_at(by_job, cuts)
    names = [str(jobs[int(bucket_job[g[0]])]) for g in groups]
    mean = [sum(value[g].tolist()) / g.size for g in groups]  # summed in bucket order
    order = sorted(range(len(names)), key=names.__getitem__)
    return pa.table(
        {
            "job_id": pa.array([names[i] for i in order], pa.string()),
            "mfu": pa.array([mean[i] for i in order], pa.float64()),
            "intervals": pa.array([groups[i].size for i in order], pa.int64()),
            "gpus": pa.array([int(gpus[groups[i]].max()) for i in order], pa.int64()),
            "peak_tflops": pa.array([float(peak[groups[i][-1]]) for i in order], pa.float64()),
        },
        schema=_EMPTY,
    )
