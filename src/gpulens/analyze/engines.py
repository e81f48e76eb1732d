"""Native versus optimised inference engines: activity per engine over time, and migration advice.

- `engine_timeline(frame)`: per engine and time bucket, GPUs, GPU-hours and the step-weighted
  means of duty cycle, SM, tensor and DRAM activity, useful ratio and tokens per GPU-second.
- `recommend_engine_migration(frame)`: a workload (engine, process, model key) on a native
  engine (PyTorch eager, ONNX Runtime CUDA, TensorFlow, JAX) whose steady intervals are mostly
  `memory_bound` or `hollow_busy` gets a recommendation (TensorRT or torch.compile with
  FP16/BF16, per engine) and an expected gain: **measured** when the same model (same
  `model_key` values, default project + model_parameters) also runs on an optimised engine,
  from the ratio of tokens/s, samples/s, median latency or useful ratio, in that order; else an
  **estimate**: for hollow-busy work the SM activity gap (target / current SM activity), for
  memory-bound work the bytes FP16/BF16 saves over FP32 (`half_precision_gain`), capped at
  `max_estimated_gain`. The basis is spelled out in `gain_basis`.

Needs the `state` column (`gpulens.analyze.efficiency.classify`). The engine label cannot tell
eager PyTorch from a torch.compile'd model, so "pytorch" is read as eager.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gpulens.analyze._arrays import (
    Floats,
    Ints,
    first_rows,
    floats,
    group_ids,
    ints,
    label_codes,
    most_common,
    none_if_nan,
    not_warmup,
    rows_by_group,
    rows_of,
    split_at,
    weighted_mean,
)
from gpulens.numbers import is_nan

TIMELINE_METRICS: tuple[str, ...] = (
    "duty",
    "sm_active",
    "tensor_active",
    "dram_active",
    "useful_ratio",
    "tokens_per_s",
)

ADVICE: dict[str, str] = {
    "pytorch": (
        "build a TensorRT engine (Torch-TensorRT, or export to ONNX and trtexec --fp16) or use "
        'torch.compile(mode="max-autotune") with CUDA graphs, and run in FP16/BF16 '
        "(torch.autocast)"
    ),
    "onnxruntime": (
        "switch to ONNX Runtime's TensorRT execution provider with trt_fp16_enable, or build a "
        "TensorRT engine with FP16"
    ),
    "tensorflow": (
        "convert with TF-TRT (precision_mode FP16) or compile with XLA (jit_compile=True) and "
        "the mixed_float16 policy"
    ),
    "jax": (
        "fuse the whole step under one jax.jit with bfloat16 and larger batches, or export the "
        "model to TensorRT for serving"
    ),
}


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Which engines are native, how models are matched, and the estimate's constants."""

    native_engines: tuple[str, ...] = ("pytorch", "onnxruntime", "tensorflow", "jax")
    optimised_engines: tuple[str, ...] = (
        "tensorrt",
        "tensorrt-llm",
        "torch-tensorrt",
        "onnxruntime-trt",
        "triton-server",
        "vllm",
        "sglang",
        "tgi",
    )
    model_key: tuple[str, ...] = ("project", "model_parameters")
    target_states: tuple[str, ...] = ("memory_bound", "hollow_busy")
    min_state_share: float = 0.5
    min_gpu_hours: float = 0.0
    target_sm_active: float = 0.75
    half_precision_gain: float = 2.0
    max_estimated_gain: float = 4.0


def _bucket_sums(ids: np.ndarray, n: int, x: Floats, w: Floats) -> Floats:
    ok = ~np.isnan(x) & ~np.isnan(w)
    num = np.bincount(ids, weights=np.where(ok, x * w, 0.0), minlength=n)
    den = np.bincount(ids, weights=np.where(ok, w, 0.0), minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def engine_timeline(
    frame: pa.Table, bucket_s: float = 3600.0, exclude_warmup: bool = True
) -> pa.Table:
    """Per (engine, bucket_ns): gpus, intervals, gpu_hours and step-weighted metric means."""
    if exclude_warmup:
        needed = ("engine", "start_ns", "step_s", "gpu_uuid", *TIMELINE_METRICS)
        frame = rows_of(frame, not_warmup(frame), needed)
    bucket_ns = int(bucket_s * 1e9)
    start = ints(frame, "start_ns") if frame.num_rows else np.zeros(0, dtype=np.int64)
    buckets = (start // bucket_ns) * bucket_ns
    keyed = frame.append_column("_bucket", pa.array(buckets, pa.int64()))
    ids, n = group_ids(keyed, ("engine", "_bucket"))
    if n == 0:
        names = ["engine", "bucket_ns", "gpus", "intervals", "gpu_hours", *TIMELINE_METRICS]
        types = [pa.string(), pa.int64(), pa.int64(), pa.int64()] + [pa.float64()] * (
            len(TIMELINE_METRICS) + 1
        )
        return pa.schema(list(zip(names, types, strict=True))).empty_table()
    first = first_rows(ids, n)
    engine, engines = label_codes(frame, "engine")
    step = np.nan_to_num(floats(frame, "step_s"))
    gpu_codes, gpu_count = group_ids(frame, ("gpu_uuid",))
    pairs = np.unique(ids * gpu_count + gpu_codes)
    cols: dict[str, object] = {
        "engine": pa.array([engines[c] for c in engine[first].tolist()], pa.string()),
        "bucket_ns": buckets[first],
        "gpus": np.bincount(pairs // gpu_count, minlength=n),
        "intervals": np.bincount(ids, minlength=n),
        "gpu_hours": np.bincount(ids, weights=step, minlength=n) / 3600.0,
    }
    for m in TIMELINE_METRICS:
        cols[m] = pa.array(_bucket_sums(ids, n, floats(frame, m), step), from_pandas=True)
    table = pa.table(cols)
    return table.sort_by([("engine", "ascending"), ("bucket_ns", "ascending")])


RECOMMEND_SCHEMA = pa.schema(
    [
        ("engine", pa.string()),
        ("process_name", pa.string()),
        ("model", pa.string()),
        ("jobs", pa.string()),
        ("gpus", pa.int64()),
        ("gpu_hours", pa.float64()),
        ("dominant_state", pa.string()),
        ("state_share", pa.float64()),
        ("sm_active", pa.float64()),
        ("tensor_active", pa.float64()),
        ("dram_active", pa.float64()),
        ("duty", pa.float64()),
        ("recommendation", pa.string()),
        ("target_engine", pa.string()),
        ("expected_gain", pa.float64()),
        ("gain_kind", pa.string()),
        ("gain_basis", pa.string()),
        ("gpu_hours_saved", pa.float64()),
    ]
)

# (column, higher is better, what it is called in the basis)
# (column, higher is better, what it is, its unit in the basis text)
_MEASURES: tuple[tuple[str, bool, str, str], ...] = (
    ("tokens_per_s", True, "tokens/s per GPU", " tokens/s"),
    ("samples_per_s", True, "samples/s per GPU", " samples/s"),
    ("latency_p50_s", False, "median latency", " s"),
    ("useful_ratio", True, "useful work per GPU-hour", " (ratio)"),
)


def _model_keys(frame: pa.Table, keys: tuple[str, ...]) -> tuple[Ints, list[str | None]]:
    """(code per row, label per code) of the model key: "project=embed, model_parameters=3.35e+08"
    (floats to 4 significant digits), None where a key is missing; rows with the same label
    share a code."""
    n = frame.num_rows
    if not keys or n == 0:
        return np.zeros(n, dtype=np.int64), [None]
    parts: list[tuple[Ints, list[str | None]]] = []
    for c in keys:
        if c in frame.column_names and pa.types.is_floating(frame.schema.field(c).type):
            values = floats(frame, c)
            uniq, code = np.unique(values, return_inverse=True)
            texts = [None if is_nan(v) else f"{v:.4g}" for v in uniq.tolist()]
            parts.append((np.asarray(code, dtype=np.int64).reshape(-1), texts))
        else:
            parts.append(label_codes(frame, c))
    combined = np.zeros(n, dtype=np.int64)
    for code, texts in parts:
        _, inverse = np.unique(combined * len(texts) + code, return_inverse=True)
        combined = np.asarray(inverse, dtype=np.int64).reshape(-1)
    _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    labels: list[str | None] = []
    index: dict[str | None, int] = {}
    label_of = np.empty(first.size, dtype=np.int64)
    for i, row in enumerate(first.tolist()):
        vals = [texts[code[row]] for code, texts in parts]
        if all(v is not None for v in vals):
            label = ", ".join(f"{k}={v}" for k, v in zip(keys, vals, strict=True))
        else:
            label = None
        label_of[i] = index.setdefault(label, len(labels))
        if label_of[i] == len(labels):
            labels.append(label)
    return label_of[np.asarray(inverse).reshape(-1)], labels


def _by_model(
    engine: Ints,
    engines: list[str | None],
    model: Ints,
    labels: list[str | None],
    optimised: set[str],
) -> dict[tuple[str, str], Ints]:
    """(model, optimised engine) → its rows (ascending), in the order they first appear."""
    fast = np.array([e is not None and e.lower() in optimised for e in engines], dtype=bool)
    named = np.array([m is not None for m in labels], dtype=bool)
    rows = np.flatnonzero(fast[engine] & named[model])
    if rows.size == 0:
        return {}
    key = model[rows] * len(engines) + engine[rows]
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    grouped = rows[np.argsort(inverse, kind="stable")]
    parts = split_at(grouped, np.cumsum(np.bincount(inverse))[:-1])
    out: dict[tuple[str, str], Ints] = {}
    for k in np.argsort(first, kind="stable").tolist():
        r = rows[first[k]]
        out[(str(labels[model[r]]), str(engines[engine[r]]))] = parts[k]
    return out


def recommend_engine_migration(frame: pa.Table, settings: EngineSettings | None = None) -> pa.Table:
    """Native-engine workloads stuck in memory-bound or hollow-busy states, with advice and gain."""
    s = settings or EngineSettings()
    if "state" not in frame.column_names:
        raise ValueError(
            "recommend_engine_migration needs the 'state' column of each interval; got columns "
            f"{frame.column_names!r}: run gpulens.analyze.efficiency.classify on the frame first"
        )
    needed = (
        *("engine", "state", "process_name", "job_id", "gpu_uuid", "step_s", *s.model_key),
        *("sm_active", "tensor_active", "dram_active", "duty", *(c for c, _, _, _ in _MEASURES)),
    )
    f = rows_of(frame, not_warmup(frame), needed)
    if f.num_rows == 0:
        return RECOMMEND_SCHEMA.empty_table()
    engine, engines = label_codes(f, "engine")
    state, states = label_codes(f, "state")
    native = {e.lower() for e in s.native_engines}
    is_native = np.array([(e or "").lower() in native for e in engines], dtype=bool)
    is_target = np.array([bool(v) and v in s.target_states for v in states], dtype=bool)
    if not (is_native[engine] & is_target[state]).any():  # no workload can qualify
        return RECOMMEND_SCHEMA.empty_table()
    proc, procs = label_codes(f, "process_name")
    job, jobs = label_codes(f, "job_id")
    gpu, _ = label_codes(f, "gpu_uuid")
    model, labels = _model_keys(f, s.model_key)
    step = np.nan_to_num(floats(f, "step_s"))
    values = {c: floats(f, c) for c in ("sm_active", "tensor_active", "dram_active", "duty")}
    measures = {c: floats(f, c) for c, _, _, _ in _MEASURES}
    by_model = _by_model(engine, engines, model, labels, {e.lower() for e in s.optimised_engines})
    ids, n = group_ids(f, ("engine", "process_name", *s.model_key))
    rows = []
    for idx in rows_by_group(ids, n):
        i0 = int(idx[0])
        if not is_native[engine[i0]]:
            continue
        eng = (engines[engine[i0]] or "").lower()
        w = step[idx]
        hours = float(w.sum()) / 3600.0
        target = is_target[state[idx]]
        if not target.any():
            continue
        # summed one by one in row order, as Python's sum() adds
        share = float(np.cumsum(w[target])[-1]) / max(float(w.sum()), 1e-12)
        if share < s.min_state_share or hours < s.min_gpu_hours:
            continue
        dominant = str(states[most_common(state[idx][target])])
        means = {c: weighted_mean(v[idx], w) for c, v in values.items()}
        measured = _measured(idx, labels[model[i0]], by_model, measures, step)
        if measured is not None:
            (gain, basis, target_engine), kind = measured, "measured"
        else:
            gain, basis = _estimate(dominant, means["sm_active"], means["dram_active"], s)
            kind, target_engine = "estimate", "tensorrt"
        job_names = sorted(j for c in np.unique(job[idx]).tolist() if (j := jobs[c]) is not None)
        rows.append(
            {
                "engine": engines[engine[i0]],
                "process_name": procs[proc[i0]],
                "model": labels[model[i0]],
                "jobs": ", ".join(x for x in job_names if x),
                "gpus": int(np.unique(gpu[idx]).size),
                "gpu_hours": hours,
                "dominant_state": dominant,
                "state_share": share,
                **{c: none_if_nan(v) for c, v in means.items()},
                "recommendation": ADVICE.get(eng, ADVICE["pytorch"]),
                "target_engine": target_engine,
                "expected_gain": gain,
                "gain_kind": kind,
                "gain_basis": basis,
                "gpu_hours_saved": hours * (1.0 - 1.0 / gain) if gain > 1 else 0.0,
            }
        )
    return pa.Table.from_pylist(rows, schema=RECOMMEND_SCHEMA)


def _measured(
    idx: np.ndarray,
    model: str | None,
    by_model: dict[tuple[str, str], Ints],
    measures: dict[str, Floats],
    step: Floats,
) -> tuple[float, str, str] | None:
    """(gain, basis, engine) from the best optimised engine running the same model, or None."""
    if model is None:
        return None
    best: tuple[float, str, str] | None = None
    for (m, other_engine), other in by_model.items():
        if m != model:
            continue
        o = other
        for col, higher, label, unit in _MEASURES:
            mine = weighted_mean(measures[col][idx], step[idx])
            theirs = weighted_mean(measures[col][o], step[o])
            if not (mine > 0 and theirs > 0):
                continue
            gain = theirs / mine if higher else mine / theirs
            basis = (
                f"measured: {label} of the same model ({model}) on {other_engine} "
                f"{theirs:.4g}{unit} vs {mine:.4g}{unit} here"
            )
            if best is None or gain > best[0]:
                best = (gain, basis, other_engine)
            break
    return best


def _estimate(dominant: str, sm: float, dram: float, s: EngineSettings) -> tuple[float, str]:
    """(gain, basis) from the activity gap when no other engine runs the same model."""
    if dominant == "hollow_busy" and not is_nan(sm) and sm > 0:
        gain = min(s.max_estimated_gain, max(1.0, s.target_sm_active / sm))
        return gain, (
            f"estimate: SM activity gap, target {s.target_sm_active:.2f} vs {sm:.2f} now "
            "(fused kernels and CUDA graphs remove launch gaps)"
        )
    gain = min(s.max_estimated_gain, s.half_precision_gain)
    dram_text = f"DRAM activity {dram:.2f}; " if not is_nan(dram) else ""
    return gain, (
        f"estimate: {dram_text}FP16/BF16 moves half the bytes of FP32 per weight and "
        "activation (no gain if the model already runs in half precision)"
    )
