"""Leak fits and over-provisioning against window-by-window references, on random frames."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from gpulens.analyze._arrays import weighted_mean
from gpulens.analyze.leaks import detect_leaks, r_squared, theil_sen
from gpulens.analyze.memory import MemorySettings, overprovisioned
from gpulens.analyze.mig import SMALLER_GPUS, mig_family, pick_mig_profile

MIN = 60 * 1_000_000_000
MODELS = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "Tesla T4", None]


def _nan(x: float) -> float | None:
    return None if x != x else x


def _fit(rows: list[dict[str, Any]], s: MemorySettings) -> dict[str, Any]:
    t0 = rows[0]["start_ns"]
    step = [r["step_s"] or 0.0 for r in rows]
    end = int(rows[-1]["start_ns"] + step[-1] * 1e9)
    t = (np.array([r["start_ns"] for r in rows]) - t0) / 1e9 + np.array(step) / 2
    y = np.array([r["memory_used_bytes"] for r in rows])
    slope, intercept = theil_sen(t, y, s.leak_max_points)
    r2 = r_squared(t, y, slope, intercept)
    samples = ("memory_used_first", "memory_used_last", "memory_used_bytes")
    low = np.array([min(r[k] for k in samples if r[k] is not None) for r in rows])
    floor = np.minimum.accumulate(low[::-1])[::-1]
    q = max(1, len(rows) // 4)
    q1, q3 = slice(0, q), slice(2 * q, 3 * q) if len(rows) >= 4 else slice(-1, None)
    expected = slope * float(np.median(t[q3]) - np.median(t[q1]))
    floor_growth = float(np.median(floor[q3]) - np.median(floor[q1]))
    floor_ratio = floor_growth / expected if expected > 0 else 0.0
    duration = (end - t0) / 1e9
    totals = [r["memory_total_bytes"] for r in rows if r["memory_total_bytes"] is not None]
    tot = max(totals) if totals else float("nan")
    head = tot - float(y[-1])
    to_oom = head / slope if slope > 0 and head == head else float("nan")
    confidence = (
        min(1.0, max(0.0, r2))
        * min(1.0, duration / (2 * s.leak_min_duration_s))
        * min(1.0, max(0.0, floor_ratio))
    )
    leak = (
        duration >= s.leak_min_duration_s
        and slope > 0
        and slope * duration >= s.leak_min_growth_bytes
        and r2 >= s.leak_min_r2
        and floor_ratio >= s.leak_min_floor_ratio
    )
    return {
        "window_start_ns": t0,
        "window_end_ns": end,
        "duration_s": duration,
        "intervals": len(rows),
        "rate_bytes_per_second": slope,
        "r2": r2,
        "floor_ratio": floor_ratio,
        "growth_bytes": slope * duration,
        "first_used_bytes": float(y[0]),
        "last_used_bytes": float(y[-1]),
        "memory_total_bytes": _nan(tot),
        "headroom_bytes": _nan(head),
        "time_to_oom_s": None if to_oom != to_oom else max(0.0, to_oom),  # unknown: null
        "oom_at_ns": None if to_oom != to_oom else end + round(max(0.0, to_oom) * 1e9),
        "confidence": confidence if slope > 0 else 0.0,
        "leak": bool(leak),
    }


def _leaks_reference(frame: pa.Table, s: MemorySettings) -> list[dict[str, Any]]:
    """Per (job, host, GPU) in the order of first appearance of each label, runs split at gaps
    and PID changes, the steady rows of each run fitted."""
    rows = frame.to_pylist()
    order: dict[str, list[Any]] = {}
    for r in rows:
        for k in ("job_id", "host", "gpu_uuid"):
            order.setdefault(k, [])
            if r[k] not in order[k]:
                order[k].append(r[k])
    groups: dict[tuple[int, ...], list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: r["start_ns"]):
        key = tuple(order[k].index(r[k]) for k in ("job_id", "host", "gpu_uuid"))
        groups.setdefault(key, []).append(r)
    out = []
    for _, group in sorted(groups.items()):
        if group[0]["job_id"] is None:
            continue
        runs: list[list[dict[str, Any]]] = [[group[0]]]
        for prev, r in pairwise(group):
            gap = r["start_ns"] - prev["start_ns"] > 1.5 * (prev["step_s"] or 0.0) * 1e9
            if gap or r["pid"] != prev["pid"]:
                runs.append([])
            runs[-1].append(r)
        for run_no, run in enumerate(runs):
            steady = [r for r in run if r.get("state") != "warmup"]
            steady = [r for r in steady if r["memory_used_bytes"] is not None]
            if "state" not in frame.column_names:
                steady = [
                    r for r in steady if r["start_ns"] >= run[0]["start_ns"] + s.warmup_s * 1e9
                ]
            if len(steady) >= 3:
                labels = {k: steady[0][k] for k in ("job_id", "host", "gpu_uuid", "gpu_model")}
                out.append({**labels, "run": run_no, **_fit(steady, s)})
    return out


def _frame(rng: np.random.Generator, n: int, trend: float) -> pa.Table:
    def maybe(p: float, values: np.ndarray) -> pa.Array:
        return pa.array(np.where(rng.random(n) < p, np.nan, values), from_pandas=True)

    return pa.table(
        {
            "start_ns": np.sort(rng.integers(0, n + n // 20, n)) * MIN,
            "step_s": maybe(0.02, np.full(n, 60.0)),
            "job_id": [None if x == 0 else f"j{x}" for x in rng.integers(0, 3, n)],
            "host": ["h1"] * n,
            "gpu_uuid": [f"g{x}" for x in rng.integers(0, 2, n)],
            "gpu_model": [MODELS[i] for i in rng.integers(0, len(MODELS), n)],
            "pid": [str(x) for x in rng.choice([1, 2], n, p=[0.97, 0.03])],
            "memory_used_bytes": maybe(
                0.05, np.round(rng.random(n) * 1e8 + np.arange(n) * trend, -6)
            ),
            "memory_used_first": maybe(0.3, rng.random(n) * 1e9),
            "memory_used_last": maybe(0.3, rng.random(n) * 1e9),
            "memory_total_bytes": maybe(0.1, np.full(n, 80e9)),
            "state": [["warmup", "busy"][i] for i in rng.choice(2, n, p=[0.05, 0.95])],
        }
    )


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    def eq(x: Any, y: Any) -> bool:
        return x == y or (isinstance(x, float) and isinstance(y, float) and x != x and y != y)

    pairs = zip(a, b, strict=False)
    return len(a) == len(b) and all(all(eq(x[k], y[k]) for k in x | y) for x, y in pairs)


@pytest.mark.parametrize("seed", range(24))
def test_detect_leaks_matches_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    frame = _frame(rng, int(rng.integers(1, 400)), trend=float(rng.choice([0.0, 2e7])))
    if seed % 2:
        frame = frame.drop_columns(["state"])
    points, warmup = int(rng.choice([8, 256])), float(rng.choice([0, 300]))
    s = MemorySettings(
        leak_max_points=points, warmup_s=warmup, leak_min_duration_s=600.0, leak_min_r2=0.3
    )
    got = detect_leaks(frame, s).to_pylist()
    assert _same(got, _leaks_reference(frame, s))


@pytest.mark.parametrize("seed", range(8))
def test_detect_leaks_matches_the_reference_on_leaking_runs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(40, 600))
    frame = _frame(rng, n, trend=2e7).drop_columns(["state"])
    for name, value in (("job_id", "j1"), ("gpu_uuid", "g0"), ("pid", "1")):  # long runs
        frame = frame.set_column(frame.column_names.index(name), name, pa.array([value] * n))
    frame = frame.set_column(0, "start_ns", pa.array(np.arange(n) * MIN))
    for name in ("memory_used_first", "memory_used_last"):  # the floor is the used memory
        frame = frame.set_column(frame.column_names.index(name), name, pa.nulls(n, pa.float64()))
    s = MemorySettings(leak_max_points=int(rng.choice([16, 256])), leak_min_duration_s=600.0)
    got = detect_leaks(frame, s).to_pylist()
    assert any(r["leak"] for r in got)
    assert _same(got, _leaks_reference(frame, s))


def _nanmax(x: np.ndarray) -> float:
    return float(np.nanmax(x)) if not np.isnan(x).all() else float("nan")


def _over_reference(frame: pa.Table, s: MemorySettings) -> list[tuple[Any, ...]]:
    """Job by job, in the order the jobs first appear outside warm-up."""
    rows = [r for r in frame.to_pylist() if r["job_id"] is not None and r["state"] != "warmup"]
    jobs: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        jobs.setdefault(r["job_id"], []).append(r)
    out = []
    for job, rs in jobs.items():
        w = np.nan_to_num(np.array([r["step_s"] for r in rs], dtype=float))

        def col(name: str, rs: list[dict[str, Any]] = rs) -> np.ndarray:
            return np.array([r[name] for r in rs], dtype=float)

        duty, sm = weighted_mean(col("duty"), w), weighted_mean(col("sm_active"), w)
        basis, activity = ("duty", duty) if duty == duty else ("sm_active", sm)
        proc = col("process_memory_bytes")
        peak = _nanmax(np.where(np.isnan(proc), col("memory_used_bytes"), proc))
        tot = _nanmax(col("memory_total_bytes"))
        start = np.array([r["start_ns"] for r in rs])
        duration = float((start + w * 1e9).max() - start.min()) / 1e9
        model = Counter(r["gpu_model"] for r in rs).most_common(1)[0][0]
        flagged = bool(
            activity <= s.overprovisioned_max_activity
            and peak <= s.overprovisioned_max_memory_bytes
            and duration >= s.overprovisioned_min_duration_s
        )
        profile = None
        if flagged:
            family = mig_family(model, tot)
            profile = pick_mig_profile(
                family, peak, activity, s.mig_memory_margin, s.mig_target_activity
            )
        smaller = None
        if flagged and profile is None:
            fits = [g for g, m in SMALLER_GPUS if m >= peak * s.mig_memory_margin]
            smaller = next((g for g in fits if g.upper() not in (model or "").upper()), None)
        out.append(
            (
                *(job, rs[0]["host"], len({r["gpu_uuid"] for r in rs}), model, duration),
                *(float(w.sum()) / 3600.0, basis if activity == activity else None),
                *(_nan(activity), _nan(duty), _nan(sm), _nan(peak), _nan(tot), flagged),
                *(profile.name if profile else None, smaller),
            )
        )
    return out


@pytest.mark.parametrize("seed", range(24))
def test_overprovisioned_matches_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))

    def maybe(p: float, values: np.ndarray) -> pa.Array:
        return pa.array(np.where(rng.random(n) < p, np.nan, values), from_pandas=True)

    frame = pa.table(
        {
            "start_ns": rng.integers(0, 300, n) * MIN,
            "step_s": maybe(0.05, rng.choice([60.0, 3600.0], n)),
            "job_id": [None if x == 0 else f"j{x}" for x in rng.integers(0, 8, n)],
            "host": [f"h{x}" for x in rng.integers(0, 2, n)],
            "gpu_uuid": [None if x == 0 else f"g{x}" for x in rng.integers(0, 4, n)],
            "gpu_model": [MODELS[i] for i in rng.integers(0, len(MODELS), n)],
            "duty": maybe(0.3, rng.random(n) * 0.3),
            "sm_active": maybe(0.3, rng.random(n) * 0.3),
            "process_memory_bytes": maybe(0.3, rng.random(n) * 2e10),
            "memory_used_bytes": maybe(0.3, rng.random(n) * 2e10),
            "memory_total_bytes": maybe(0.2, np.full(n, 80e9)),
            "state": [["warmup", "busy", None][i] for i in rng.choice(3, n, p=[0.1, 0.8, 0.1])],
        }
    )
    s = MemorySettings()
    keys = ("job_id", "host", "gpus", "gpu_model", "duration_s", "gpu_hours", "activity_basis",
            "mean_activity", "mean_duty", "mean_sm_active", "peak_memory_bytes",
            "memory_total_bytes", "overprovisioned", "mig_profile", "smaller_gpu")  # fmt: skip
    got = [tuple(r[k] for k in keys) for r in overprovisioned(frame, s).to_pylist()]
    expected = _over_reference(frame, s)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert all(a == b or (a != a and b != b) for a, b in zip(g, e, strict=True)), (g, e)
