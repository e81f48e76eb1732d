"""Baselines, anomaly scores, verdicts and version-change comparisons on hand-built frames."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from gpulens.analyze.baselines import (
    ALL_HOURS,
    BaselineSettings,
    _group_median,
    learn_baselines,
    run_verdicts,
    score_intervals,
    workload_keys,
    workload_verdicts,
)
from gpulens.analyze.version_changes import compare_version_changes, mann_whitney, version_changes

DAY0 = 1_764_374_400 * 1_000_000_000  # midnight UTC
NS = 1_000_000_000
HOUR = 3600 * NS
STEP = 60 * NS
WORKLOAD = "H100|pytorch|python train.py|llm|1.3e+09"


def _rows(
    sm: np.ndarray, start: int = DAY0, host: str = "h1", **extra: Any
) -> list[dict[str, Any]]:
    return [
        {
            "start_ns": start + i * STEP,
            "step_s": 60.0,
            "host": host,
            "gpu_uuid": "g0",
            "gpu_model": "H100",
            "engine": "pytorch",
            "process_name": "python train.py",
            "project": "llm",
            "model_parameters": 1.3e9,
            "job_id": "j1",
            "sm_active": float(v),
            **{k: (v[i] if isinstance(v, list) else v) for k, v in extra.items()},
        }
        for i, v in enumerate(sm.tolist())
    ]


def _seasonal(days: int = 2, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    hours = (np.arange(days * 1440) // 60) % 24
    return np.where(hours < 12, 0.6, 0.8) + rng.normal(0, 0.02, hours.size)


def test_workload_key_and_unattributed_rows() -> None:
    rows = _rows(np.array([0.5, 0.5]))
    rows[1].update(engine=None, process_name=None)
    assert workload_keys(pa.Table.from_pylist(rows)) == [WORKLOAD, None]


def test_learn_per_hour_and_all_hours_excluding_warmup() -> None:
    sm = _seasonal()
    states = ["warmup"] * 30 + ["compute_tensor"] * (sm.size - 30)
    history = pa.Table.from_pylist(_rows(sm, state=states))
    b = learn_baselines(history)
    got = {(r["hour"]): r for r in b.to_pylist() if r["metric"] == "sm_active"}
    hours = (np.arange(sm.size) // 60) % 24
    steady = np.arange(sm.size) >= 30
    x3 = sm[(hours == 3) & steady]
    med = np.median(x3)
    assert got[3]["median"] == pytest.approx(med)
    assert got[3]["mad"] == pytest.approx(np.median(np.abs(x3 - med)))
    assert got[3]["scale"] == pytest.approx(1.4826 * max(np.median(np.abs(x3 - med)), 0.02 * med))
    assert got[0]["n"] == 90  # hour 0: 120 rows minus the 30 warm-up rows
    assert got[ALL_HOURS]["median"] == pytest.approx(np.median(sm[steady]))
    assert {r["workload"] for r in b.to_pylist()} == {WORKLOAD}


def test_scores_use_the_hour_bucket_and_fall_back_to_all_hours() -> None:
    sm = _seasonal()
    morning_only = sm[(np.arange(sm.size) // 60) % 24 < 12]
    starts = [DAY0 + d * 24 * HOUR + i * STEP for d in range(2) for i in range(720)]
    rows = _rows(morning_only)
    for r, s in zip(rows, starts, strict=True):
        r["start_ns"] = s
    b = learn_baselines(pa.Table.from_pylist(rows))
    probe = pa.Table.from_pylist(
        _rows(np.array([0.3]), start=DAY0 + 5 * HOUR)
        + _rows(np.array([0.3]), start=DAY0 + 20 * HOUR)
    )
    scores = score_intervals(probe, b).to_pylist()
    hours = (np.array(starts) // HOUR) % 24
    x5, xall = morning_only[hours == 5], morning_only
    for row, x, seasonal in ((scores[0], x5, True), (scores[1], xall, False)):
        med = np.median(x)
        scale = 1.4826 * max(np.median(np.abs(x - med)), 0.01, 0.02 * abs(med))
        assert row["sm_active_median"] == pytest.approx(med)
        assert row["sm_active_z"] == pytest.approx((0.3 - med) / scale)
        assert row["seasonal"] is seasonal and row["anomaly"] is True


def test_verdicts_healthy_and_degraded() -> None:
    b = learn_baselines(pa.Table.from_pylist(_rows(_seasonal())))
    rng = np.random.default_rng(9)
    healthy = pa.Table.from_pylist(_rows(_seasonal(days=1, seed=5)))
    slow = pa.Table.from_pylist(_rows(0.35 + rng.normal(0, 0.02, 1440)))
    (ok,) = workload_verdicts(healthy, b).to_pylist()
    (bad,) = workload_verdicts(slow, b).to_pylist()
    assert ok["verdict"] == "healthy" and bad["verdict"] == "degraded"
    assert bad["median"] == pytest.approx(np.median(slow.column("sm_active").to_numpy()))
    assert bad["median_z"] < -2 and bad["anomalous_share"] > 0.5
    unseen = pa.Table.from_pylist(_rows(np.full(20, 0.5), project="other"))
    assert workload_verdicts(unseen, b).column("verdict").to_pylist() == ["unknown"]


def test_mann_whitney_matches_pair_counting() -> None:
    rng = np.random.default_rng(4)
    a, b = rng.normal(0, 1, 25), rng.normal(0.8, 1, 30)
    u, p = mann_whitney(a, b)
    u_pairs = sum(float(x > y) + 0.5 * float(x == y) for x in a for y in b)
    assert u == pytest.approx(u_pairs)
    n1, n2 = a.size, b.size
    z = (abs(u_pairs - n1 * n2 / 2) - 0.5) / math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
    assert p == pytest.approx(math.erfc(z / math.sqrt(2)))
    assert mann_whitney(np.ones(5), np.ones(5))[1] == 1.0


def _events(rows: list[tuple[int, str, str, str | None]]) -> pa.Table:
    return pa.table(
        {
            "ts": pa.array([r[0] for r in rows], pa.int64()),
            "event": [r[1] for r in rows],
            "message": [r[2] for r in rows],
            "host": ["h1"] * len(rows),
            "job_id": [r[3] for r in rows],
        }
    )


def test_version_changes_said_or_seen() -> None:
    ev = _events(
        [
            (DAY0, "driver_version", "NVIDIA driver 550.90.07", None),
            (DAY0 + HOUR, "driver_version", "NVIDIA driver 550.90.07", None),
            (DAY0 + 2 * HOUR, "driver_version", "NVIDIA driver changed from 550 to 560", None),
            (DAY0, "version", "torch 2.3.1", "j1"),
            (DAY0 + HOUR, "version", "torch 2.3.1", "j1"),
            (DAY0 + 3 * HOUR, "version", "torch 2.4.0", "j1"),
            (DAY0 + 3 * HOUR, "job_start", "job j1 started", "j1"),
        ]
    )
    got = [(r["ts"], r["previous"], r["current"]) for r in version_changes(ev).to_pylist()]
    assert got == [(DAY0 + 2 * HOUR, "550", "560"), (DAY0 + 3 * HOUR, "torch 2.3.1", "torch 2.4.0")]


def test_compare_flags_a_regression_after_a_driver_change() -> None:
    rng = np.random.default_rng(2)
    n = 12 * 60
    change = DAY0 + 6 * HOUR
    sm = np.where(np.arange(n) < 360, 0.8, 0.6) + rng.normal(0, 0.02, n)
    steady = np.where(np.arange(n) < 360, 0.8, 0.8) + rng.normal(0, 0.02, n)
    frame = pa.Table.from_pylist(_rows(sm) + _rows(steady, host="h2"))
    ev = _events(
        [(DAY0, "driver_version", "NVIDIA driver 550", None),
         (change, "driver_version", "NVIDIA driver 560", None)]
    )  # fmt: skip
    (row,) = compare_version_changes(
        frame, ev, BaselineSettings(version_window_s=6 * 3600)
    ).to_pylist()
    before, after = sm[:360], sm[360:]
    assert row["host"] == "h1" and row["workload"] == WORKLOAD
    assert (row["before_n"], row["after_n"]) == (360, 360)
    assert row["same_hours"] is False  # the two windows share no hour of day
    rel = (np.median(after) - np.median(before)) / np.median(before)
    assert row["relative_change"] == pytest.approx(rel)
    assert row["p_value"] < 1e-6 and row["regression"] is True

    flat = pa.Table.from_pylist(_rows(steady))
    (same,) = compare_version_changes(flat, ev).to_pylist()
    assert same["regression"] is False and abs(same["relative_change"]) < 0.05


def _reference_keys(frame: pa.Table) -> list[str | None]:
    """The workload key row by row, as the module doc defines it."""
    out: list[str | None] = []
    cols = BaselineSettings().key_columns
    for r in frame.to_pylist():
        if r.get("engine") is None and r.get("process_name") is None:
            out.append(None)
            continue
        parts = []
        for c in cols:
            v = r.get(c)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                parts.append("-")
            else:
                parts.append(f"{v:.4g}" if isinstance(v, float) else str(v))
        out.append("|".join(parts))
    return out


def test_workload_keys_match_the_row_by_row_definition() -> None:
    rng = np.random.default_rng(3)
    n = 400
    pick = rng.integers(0, 3, size=(n, 5))
    rows = [
        {
            "start_ns": DAY0 + i * STEP,
            "gpu_model": ["H100", "A100", None][pick[i, 0]],
            "engine": ["pytorch", "vllm", None][pick[i, 1]],
            "process_name": ["python a.py", None, "serve"][pick[i, 2]],
            "project": ["x", "y", None][pick[i, 3]],
            "model_parameters": [1.3e9, 1.30001e9, float("nan")][pick[i, 4]],
        }
        for i in range(n)
    ]
    frame = pa.Table.from_pylist(rows)
    encoded = frame.set_column(2, "engine", frame.column("engine").dictionary_encode())
    assert workload_keys(frame) == _reference_keys(frame)
    assert workload_keys(encoded) == _reference_keys(frame)
    assert workload_keys(frame.slice(0, 0)) == []


def test_group_median_is_numpy_median_per_group() -> None:
    rng = np.random.default_rng(5)
    values = rng.normal(size=1000)
    group = rng.integers(0, 7, size=1000)
    got = _group_median(values, group, 9)
    for g in range(7):
        assert got[g] == np.median(values[group == g])
    assert np.isnan(got[7]) and np.isnan(got[8])


def _job(job: str, sm: np.ndarray, start: int, **extra: Any) -> list[dict[str, Any]]:
    return [dict(r, job_id=job) for r in _rows(sm, start=start, **extra)]


def _hours(n: int) -> np.ndarray:
    """Hour of day of n one-minute rows that start at midnight."""
    return (np.arange(n) // 60) % 24


def _hourly(
    ref: np.ndarray, ref_hours: np.ndarray, hours: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per row (of hour `hours`) the median and robust scale of `ref` in that hour."""
    med = np.array([np.median(ref[ref_hours == h]) for h in hours])
    mad = np.array(
        [np.median(np.abs(ref[ref_hours == h] - m)) for h, m in zip(hours, med, strict=True)]
    )
    return med, 1.4826 * np.maximum(mad, np.maximum(0.01, 0.02 * med))


def test_run_verdicts_from_history_from_the_window_and_unknown() -> None:
    rng = np.random.default_rng(11)
    window = DAY0 + 24 * HOUR

    def noisy(level: float, n: int = 240) -> np.ndarray:
        return level + rng.normal(0, 0.02, n)

    past = noisy(0.8, 1440)
    history = pa.Table.from_pylist(_job("old", past, DAY0))
    fast, slow = noisy(0.8), noisy(0.5)
    # workload "serve" has no history: three runs in the window, one of them slow
    serve = {"process_name": "serve", "project": "web"}
    s1, s2, s3 = noisy(0.6), noisy(0.6), noisy(0.3)
    lone = noisy(0.7)
    frame = pa.Table.from_pylist(
        _job("fast", fast, window)
        + _job("slow", slow, window)
        + _job("s1", s1, window, **serve)
        + _job("s2", s2, window, **serve)
        + _job("s3", s3, window, **serve)
        + _job("lone", lone, window, process_name="other", project="solo")
    )
    got = {r["job_id"]: r for r in run_verdicts(frame, history).to_pylist()}
    assert {j: r["verdict"] for j, r in got.items()} == {
        "fast": "healthy",
        "slow": "degraded",
        "s1": "healthy",
        "s2": "healthy",
        "s3": "degraded",
        "lone": "unknown",
    }
    assert got["slow"]["baseline"] == "history" and got["slow"]["runs"] == 2
    assert got["slow"]["median"] == pytest.approx(np.median(slow))
    assert got["slow"]["baseline_n"] == past.size
    # each window minute is scored against the same hour of day of the baseline's samples
    med, scale = _hourly(past, _hours(past.size), _hours(slow.size))
    assert got["slow"]["baseline_median"] == pytest.approx(np.median(med))
    assert got["slow"]["median_z"] == pytest.approx(np.median((slow - med) / scale))
    assert got["s3"]["baseline"] == "window" and got["s3"]["runs"] == 3
    pooled, pooled_hours = np.concatenate([s1, s2, s3]), np.tile(_hours(240), 3)
    med, scale = _hourly(pooled, pooled_hours, _hours(s3.size))
    assert got["s3"]["baseline_median"] == pytest.approx(np.median(med))
    assert got["s3"]["median_z"] == pytest.approx(np.median((s3 - med) / scale))
    assert got["lone"]["baseline"] is None and got["lone"]["reason"].startswith(
        "no earlier history of this workload and 1 run(s)"
    )
    assert got["fast"]["reason"] is None


def test_a_run_keeps_one_workload_when_a_key_label_comes_and_goes() -> None:
    history = pa.Table.from_pylist(_job("old", _seasonal(days=1), DAY0))
    rows = _job("j", np.full(60, 0.7), DAY0 + 24 * HOUR)
    for r in rows[:10]:
        r["model_parameters"] = None  # the application had not reported its size yet
    (row,) = run_verdicts(pa.Table.from_pylist(rows), history).to_pylist()
    assert row["workload"] == WORKLOAD and row["intervals"] == 60


def test_run_verdicts_without_a_useful_work_metric() -> None:
    rows = [{k: v for k, v in r.items() if k != "sm_active"} | {"duty": 0.9}
            for r in _job("j", np.full(30, 0.5), DAY0)]  # fmt: skip
    (row,) = run_verdicts(pa.Table.from_pylist(rows), None).to_pylist()
    assert row["verdict"] == "unknown" and row["metric"] is None
    assert "profiling" in row["reason"]
