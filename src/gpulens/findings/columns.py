"""The context frame's columns as the rules read them: floats, strings, label codes, interval
starts and ends, coverage, and who a row belongs to; each read once per context and cached.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.findings.context import Context


def _read_floats(ctx: Context, name: str) -> np.ndarray:
    if name not in ctx.frame.column_names:
        return np.full(ctx.frame.num_rows, np.nan)
    col = pc.cast(ctx.frame.column(name), pa.float64())
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)


def floats(ctx: Context, name: str) -> np.ndarray:
    """Frame column `name` as float64 with NaN for null (all NaN when absent); cached."""
    return ctx.cached("floats:" + name, _read_floats, ctx, name)


def _read_strings(ctx: Context, name: str) -> list[str | None]:
    if name not in ctx.frame.column_names:
        return [None] * ctx.frame.num_rows
    col = ctx.frame.column(name)
    if not pa.types.is_string(col.type):
        col = pc.cast(col, pa.string())
    return list(col.to_pylist())


def strings(ctx: Context, name: str) -> list[str | None]:
    """Frame column `name` as Python strings (None for null or absent); cached."""
    return ctx.cached("strings:" + name, _read_strings, ctx, name)


def _read_codes(ctx: Context, name: str) -> tuple[np.ndarray, list[str | None]]:
    if name not in ctx.frame.column_names:
        return np.zeros(ctx.frame.num_rows, dtype=np.int64), [None]
    col = ctx.frame.column(name)
    if not pa.types.is_string(col.type):
        col = pc.cast(col, pa.string())
    encoded = pc.dictionary_encode(col, null_encoding="encode").combine_chunks()
    values: list[str | None] = encoded.dictionary.to_pylist()
    if not values:
        return np.zeros(ctx.frame.num_rows, dtype=np.int64), [None]
    idx = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return idx, values


def label_codes(ctx: Context, name: str) -> tuple[np.ndarray, list[str | None]]:
    """(code per row, value per code) of frame column `name` as strings: equal values share a
    code, null (or an absent column) has its own, whose value is None; cached."""
    return ctx.cached("codes:" + name, _read_codes, ctx, name)


def _read_step0(ctx: Context) -> np.ndarray:
    return np.asarray(np.nan_to_num(floats(ctx, "step_s")), dtype=np.float64)


def step0(ctx: Context) -> np.ndarray:
    """Interval lengths in seconds with NaN as 0; cached."""
    return ctx.cached("step0", _read_step0, ctx)


def starts(ctx: Context) -> np.ndarray:
    """Interval starts (int64 ns)."""

    def read() -> np.ndarray:
        col = ctx.frame.column("start_ns")
        return np.asarray(pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)

    return ctx.cached("starts", read)


def ends(ctx: Context) -> np.ndarray:
    """Interval ends (int64 ns)."""
    return ctx.cached("ends", lambda: starts(ctx) + np.round(step0(ctx) * 1e9).astype(np.int64))


def in_states(ctx: Context, *states: str) -> np.ndarray:
    """True for rows whose state is one of `states`."""
    code, values = label_codes(ctx, "state")
    want = set(states)
    hit = np.array([v in want for v in values], dtype=bool)
    return np.asarray(hit[code], dtype=bool)


def equals(ctx: Context, name: str, *values: str | None) -> np.ndarray:
    """True for rows whose label `name` is one of `values` (None matches null)."""
    code, names = label_codes(ctx, name)
    want = set(values)
    return np.asarray(np.array([v in want for v in names], dtype=bool)[code], dtype=bool)


def owners(ctx: Context) -> list[str]:
    """Per row, what runs group by: the job, else the GPU entity."""

    def build() -> list[str]:
        job, host = strings(ctx, "job_id"), strings(ctx, "host")
        uuid, mig = strings(ctx, "gpu_uuid"), strings(ctx, "mig_instance")
        return [
            f"job:{j}" if j is not None else f"gpu:{h}|{u}|{m}"
            for j, h, u, m in zip(job, host, uuid, mig, strict=True)
        ]

    return ctx.cached("owners", build)


def _read_covered(ctx: Context) -> np.ndarray:
    step = step0(ctx)
    if "covered_s" in ctx.frame.column_names:  # the frame builder's coverage rule
        cover = floats(ctx, "covered_s")
        return np.asarray(np.where(np.isnan(cover), step, cover), dtype=np.float64)
    samples = floats(ctx, "samples")
    if np.isnan(samples).all():
        return step
    gpu = combined_codes(ctx, "host", "gpu_uuid", "mig_instance")
    full = np.zeros(int(gpu.max()) + 1 if gpu.size else 0)
    np.fmax.at(full, gpu, samples)
    share = np.divide(samples, full[gpu], out=np.ones_like(step), where=full[gpu] > 0)
    share = np.where(np.isnan(share), 1.0, np.clip(share, 0.0, 1.0))
    return np.asarray(step * share, dtype=np.float64)


def covered(ctx: Context) -> np.ndarray:
    """Per row, the seconds its readings cover: the frame's `covered_s` (the coverage rule of
    `gpulens.store.coverage`, the same seconds waste counts); in a frame without it, the
    interval's length times its samples over the most samples an interval of its GPU entity
    holds (the whole length without a sample count); cached."""
    return ctx.cached("covered", _read_covered, ctx)


def combined_codes(ctx: Context, *names: str) -> np.ndarray:
    """Per row, an integer standing for its values of the label columns `names` together
    (equal combinations, equal codes; null is a value of its own); cached."""

    def build() -> np.ndarray:
        out = np.zeros(ctx.frame.num_rows, dtype=np.int64)
        for name in names:
            code, values = label_codes(ctx, name)
            out = out * len(values) + code
        _, inverse = np.unique(out, return_inverse=True)
        return np.asarray(inverse, dtype=np.int64).reshape(-1)

    return ctx.cached("combined:" + "|".join(names), build)


def owner_codes(ctx: Context) -> np.ndarray:
    """`owners` as integers: the job's code where there is a job, else one past every job
    code plus the GPU entity's code; cached."""

    def build() -> np.ndarray:
        job, jobs = label_codes(ctx, "job_id")
        gpu = combined_codes(ctx, "host", "gpu_uuid", "mig_instance")
        has_job = np.array([v is not None for v in jobs], dtype=bool)[job]
        return np.where(has_job, job, len(jobs) + gpu)

    return ctx.cached("owner_codes", build)
