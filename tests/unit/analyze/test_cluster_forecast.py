"""The capacity forecast on a history with a known daily and weekly pattern, and on a public
trace (Alibaba GenAI 2026 request log, one GPU per request) with its measured errors."""

from __future__ import annotations

import csv
import math
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("statsmodels")

from gpulens.analyze.cluster.forecast import (
    capacity_forecast,
    demand_of,
    forecast,
    hourly,
    mase,
)
from gpulens.errors import SourceUnavailable

MONDAY = 1_700_438_400  # 2023-11-20 00:00 UTC, a Monday


def pattern(hours: np.ndarray) -> np.ndarray:
    """Known demand: 20 GPUs at night, 60 from 09:00 to 18:00 on weekdays, 10 at weekends."""
    hod, dow = hours % 24, (hours // 24) % 7
    day = (hod >= 9) & (hod < 18)
    return np.where(dow >= 5, 10.0, np.where(day, 60.0, 20.0))


def test_known_pattern_is_forecast_with_a_weekly_model() -> None:
    rng = np.random.default_rng(7)
    n = 28 * 24
    y = pattern(np.arange(n)) + rng.normal(0, 1.0, n)
    f = forecast(y, MONDAY)
    assert f.model in ("seasonal_naive_week", "holt_winters_week", "unobserved_components")
    assert f.start_s == MONDAY + n * 3600 and f.step_s == 3600 and f.horizon_s == 7 * 86400
    truth = pattern(np.arange(n, n + 168))
    assert np.mean(np.abs(f.mean - truth)) < 3.0  # GPUs, against a 50-GPU swing
    assert math.isfinite(f.test_mase) and math.isfinite(f.baseline_mase)
    assert f.test_mase < 0.5  # the in-sample daily naive is wrong every weekend
    assert (f.lo <= f.mean).all() and (f.mean <= f.hi).all() and (f.lo >= 0).all()
    inside = (truth >= f.lo - 1e-9) & (truth <= f.hi + 1e-9)
    assert inside.mean() > 0.6
    assert set(f.validation_mase) >= {"seasonal_naive_day", "holt_winters_day"}


def test_per_queue_forecasts_sum_to_the_pooled_one() -> None:
    steps = 21 * 1440
    t = np.arange(steps)
    hours = t // 60
    a = pattern(hours)  # training: the office pattern
    b = np.full(steps, 5.0)  # inference: flat
    f = capacity_forecast(
        {"train": a, "infer": b},
        MONDAY,
        60,
        candidates=("seasonal_naive_day", "seasonal_naive_week"),
    )
    assert f.pooled.model == "seasonal_naive_week"
    total = sum(q.mean for q in f.queues)
    assert np.allclose(total, f.pooled.mean)
    infer = next(q for q in f.queues if q.name == "infer")
    assert np.allclose(infer.mean, 5.0)


def test_hourly_means_and_gaps() -> None:
    values = np.array([1.0, 3.0, np.nan, np.nan, np.nan, 5.0])  # half-hour steps from 00:30
    out, first = hourly(values, 1800, 1800)
    assert first == 0 and out.size == 4 and np.allclose(out[:2], [1.0, 3.0])
    assert np.isnan(out[2]) and out[3] == 5.0
    d = demand_of(np.array([1.0, np.nan, 2.0]), np.array([np.nan, 4.0, 1.0]))
    assert np.allclose(d, [1.0, 4.0, 3.0])


def test_mase_survives_zero_demand() -> None:
    history = np.tile([0.0, 0.0, 4.0, 0.0], 12)
    assert mase(np.zeros(4), np.ones(4), history, m=4) != mase(
        np.zeros(4), np.zeros(4), history, m=4
    )
    assert math.isnan(mase(np.zeros(4), np.ones(4), np.zeros(48), m=4))


def test_short_history_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 72 hours"):
        forecast(np.ones(48), 0)


def test_missing_statsmodels_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "statsmodels.tsa.api", None)
    with pytest.raises(SourceUnavailable, match=r"pip install 'gpulens\[forecast\]'"):
        forecast(np.ones(200), 0)


def _genai_hourly(path: Path) -> tuple[dict[str, np.ndarray], int]:
    """GPUs busy per hour per request type: each request holds one GPU for its exec time."""
    rows = []
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            if not r["exec_time_seconds"]:
                continue
            t = datetime.strptime(r["gmt_create"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
            rows.append((r["predict_type"], t.timestamp(), float(r["exec_time_seconds"])))
    first = int(min(t for _, t, _ in rows) // 3600 * 3600)
    n = int(max(t + d for _, t, d in rows) - first) // 3600 + 1
    out: dict[str, np.ndarray] = {}
    for kind, t, d in rows:
        # the busy seconds land in the hours they span
        series = out.setdefault(kind, np.zeros(n))
        lo, hi = t - first, t - first + d
        while lo < hi:
            h = int(lo // 3600)
            step = min(hi, (h + 1) * 3600) - lo
            series[h] += step / 3600.0
            lo += step
    return out, first


def test_forecast_on_a_public_request_trace(shared: Path) -> None:
    path = shared / "data/clusters/alibaba-genai-v2026/lora_request_trace.csv"
    demand, first = _genai_hourly(path)
    f = capacity_forecast(demand, first, 3600)
    assert f.pooled.mean.size == 168
    assert math.isfinite(f.pooled.test_mase) and math.isfinite(f.pooled.baseline_mase)
    print(
        f"genai-2026 pooled: model {f.pooled.model}, test MASE {f.pooled.test_mase:.3f}, "
        f"{f.pooled.baseline} {f.pooled.baseline_mase:.3f}, window {f.pooled.window_hours} h"
    )
