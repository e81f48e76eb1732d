"""Warm-up windows against a row-by-row reference, on random frames."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from gpulens.analyze.phases import activity, floats, in_windows, segment_nanmedian, warmup_windows

STEP_NS = 60 * 1_000_000_000


def _settle(
    act: np.ndarray, mem: np.ndarray, step_s: float, band: float, settle: int,
    memory_ratio: float, max_warmup_s: float,
) -> tuple[int, bool] | None:  # fmt: skip
    n = len(act)
    cap = max(1, math.ceil(max_warmup_s / step_s))
    tail = slice(min(cap, n // 2), n)
    if n < 2 or np.all(np.isnan(act[tail])):
        return None
    level = float(np.nanmedian(act[tail]))
    mem_tail = mem[tail]
    mem_level = float(np.nanmedian(mem_tail)) if not np.all(np.isnan(mem_tail)) else math.nan
    for k in range(min(n, cap + 1)):
        window = act[k : k + settle]
        if np.any(np.isnan(window)) or np.any(np.abs(window - level) > band):
            continue
        if not math.isnan(mem_level) and not (mem[k] >= memory_ratio * mem_level):
            continue
        return min(k, cap), k > cap
    return min(cap, n), True


def _reference(frame: pa.Table, band: float, settle: int, max_warmup_s: float) -> list[tuple]:
    """One run at a time, as a person would walk the sorted frame."""
    t = frame.sort_by([("gpu_uuid", "ascending"), ("host", "ascending"), ("start_ns", "ascending")])
    start = t.column("start_ns").to_pylist()
    step_ns = np.round(floats(t, "step_s") * 1e9)
    jobs, gpus, hosts = (t.column(c).to_pylist() for c in ("job_id", "gpu_uuid", "host"))
    act, mem, mem_first = (
        activity(t),
        floats(t, "memory_used_bytes"),
        floats(t, "memory_used_first"),
    )
    out, i, n = [], 0, t.num_rows
    while i < n:
        j = i + 1
        while (j < n and jobs[j] == jobs[i] and gpus[j] == gpus[i] and hosts[j] == hosts[i]
               and start[j] - start[j - 1] <= step_ns[j - 1]):  # fmt: skip
            j += 1
        gpu_first = i == 0 or gpus[i - 1] != gpus[i] or hosts[i - 1] != hosts[i]
        visible = not gpu_first or (not math.isnan(mem_first[i]) and mem_first[i] <= 256 * 2**20)
        if jobs[i] is not None and visible:
            found = _settle(act[i:j], mem[i:j], step_ns[i] / 1e9, band, settle, 0.9, max_warmup_s)
            if found is not None and found[0] > 0:
                end, capped = found
                out.append((jobs[i], hosts[i], gpus[i], start[i],
                            int(start[i + end - 1] + step_ns[i]), end, capped))  # fmt: skip
        i = j
    return out


def _frame(rng: np.random.Generator, n: int) -> pa.Table:
    def nan(p: float, values: np.ndarray) -> pa.Array:
        return pa.array(np.where(rng.random(n) < p, np.nan, values), from_pandas=True)

    return pa.table(
        {
            "start_ns": rng.integers(0, 40, n) * STEP_NS,
            "step_s": rng.choice([60.0, 120.0], n),
            "job_id": [None if x == 0 else f"j{x}" for x in rng.integers(0, 4, n)],
            "gpu_uuid": [f"GPU-{x}é" if x == 3 else f"GPU-{x}" for x in rng.integers(0, 4, n)],
            "host": [None if x == 0 else f"h{x}" for x in rng.integers(0, 3, n)],
            "sm_active": nan(0.1, np.round(rng.random(n), 1)),
            "duty": nan(0.3, rng.random(n)),
            "memory_used_bytes": nan(0.1, rng.choice([1e9, 5e9, 9e9, 1e10], n)),
            "memory_used_first": nan(0.2, rng.choice([0.0, 1e8, 5e9], n)),
        }
    )


@pytest.mark.parametrize("seed", range(40))
def test_warmup_windows_and_in_windows_match_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    frame = _frame(rng, int(rng.integers(1, 150)))
    band, settle = float(rng.choice([0.1, 0.3])), int(rng.integers(1, 4))
    max_s = float(rng.choice([120.0, 300.0, 900.0]))
    got = warmup_windows(frame, band=band, settle=settle, max_warmup_s=max_s)
    assert [tuple(r.values()) for r in got.to_pylist()] == _reference(frame, band, settle, max_s)
    # in_windows: a row is inside when a window of its job and GPU holds its start
    spans = [(r["job_id"], r["gpu_uuid"], r["host"], r["start_ns"], r["end_ns"])
             for r in got.to_pylist()]  # fmt: skip

    def inside(r: dict[str, Any]) -> bool:
        key = (r["job_id"], r["gpu_uuid"], r["host"])
        return r["job_id"] is not None and any(
            (j, g, h) == key and a <= r["start_ns"] < b for j, g, h, a, b in spans
        )

    expected = [inside(r) for r in frame.to_pylist()]
    assert in_windows(frame, got).tolist() == expected


def test_in_windows_with_overlapping_windows() -> None:
    frame = pa.table({"job_id": ["a", "a", "a", None], "gpu_uuid": ["g"] * 4,
                      "host": ["h"] * 4, "start_ns": [0, 10, 20, 10]})  # fmt: skip
    windows = pa.table({"job_id": ["a", "a"], "gpu_uuid": ["g", "g"], "host": ["h", "h"],
                        "start_ns": [0, 5], "end_ns": [25, 12]})  # fmt: skip
    assert in_windows(frame, windows).tolist() == [True, True, True, False]


@pytest.mark.parametrize("seed", range(10))
def test_segment_nanmedian_is_nanmedian_per_segment(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = np.where(rng.random(300) < 0.2, np.nan, rng.random(300))
    lo = np.sort(rng.integers(0, 300, 30))
    hi = lo + rng.integers(0, 20, 30)
    got = segment_nanmedian(values, lo, np.minimum(hi, 300))
    for g, a, b in zip(got, lo, np.minimum(hi, 300), strict=True):
        part = values[a:b]
        expected = np.nan if np.isnan(part).all() else float(np.nanmedian(part))
        assert (g == expected) or (np.isnan(g) and np.isnan(expected))
