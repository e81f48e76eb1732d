"""Capacity forecast: GPU demand (in use + pending) per hour for the next days, with intervals.

The history is cut into three parts: *train*, a *validation* window and a later *test* window
(each as long as the horizon, at most a fifth of the history). Candidates (seasonal naive by
day and by week, Holt-Winters with a daily and with a weekly season, an unobserved-components
model with both seasons as harmonics) are fitted on train and scored on validation; the best is
refitted on train + validation and scored on test, which selection never saw, beside the
seasonal-naive baseline on the same test window. The error is MASE: mean absolute error ÷ the
in-sample mean absolute error of the seasonal-naive (daily) forecast on the data fitted, so a
zero-demand hour does not blow it up as it does MAPE. The chosen model is then refitted on the
whole history for the forecast. Intervals are split-conformal: the quantile of the absolute
test-window errors (a window no fit saw), floored at 0 GPUs.

statsmodels is the `forecast` extra; it is imported only when a forecast is asked for.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpulens.errors import SourceUnavailable

HOUR_S = 3600
DAY = 24
WEEK = 168
MIN_HOURS = 3 * DAY  # less than this and no candidate can be validated and tested
CANDIDATES = ("seasonal_naive_day", "seasonal_naive_week", "holt_winters_day",
              "holt_winters_week", "unobserved_components")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Forecast:
    """One series' forecast: `points` (start of hour in s, demand GPUs, lo, hi), the model,
    the validation MASE of every candidate tried, and the test-window MASE of the chosen model
    and of seasonal naive (NaN when undefined, e.g. a constant history)."""

    model: str
    horizon_s: int
    step_s: int
    start_s: int
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    test_mase: float
    baseline_mase: float
    baseline: str
    validation_mase: Mapping[str, float]
    window_hours: int
    level: float
    test_predicted: np.ndarray  # the chosen model's forecast of the test window

    def points(self) -> list[tuple[int, float, float, float]]:
        return [
            (self.start_s + i * self.step_s, float(m), float(lo), float(hi))
            for i, (m, lo, hi) in enumerate(zip(self.mean, self.lo, self.hi, strict=True))
        ]


def _statsmodels() -> Any:
    try:
        import statsmodels.tsa.api as tsa  # type: ignore[import-untyped]
    except ImportError:
        raise SourceUnavailable(
            "the capacity forecast needs statsmodels: pip install 'gpulens[forecast]'"
        ) from None
    return tsa


def hourly(values: np.ndarray, start_s: int, step_s: int) -> tuple[np.ndarray, int]:
    """Per-step values → mean per whole clock hour (NaN steps are left out; an hour without
    data is NaN), and the start of the first hour."""
    if step_s <= 0:
        raise ValueError(f"step {step_s} s: expected a positive step")
    ts = start_s + np.arange(values.size, dtype=np.int64) * step_s
    first = (start_s // HOUR_S) * HOUR_S
    idx = (ts - first) // HOUR_S
    n = int(idx[-1]) + 1 if values.size else 0
    seen = ~np.isnan(values)
    sums = np.bincount(idx[seen], weights=values[seen], minlength=n)
    counts = np.bincount(idx[seen], minlength=n)
    out = np.full(n, np.nan)
    np.divide(sums, counts, out=out, where=counts > 0)
    return out, first


def _fill(y: np.ndarray) -> np.ndarray:
    """Gaps filled from the same hour a day (or a week) earlier, else linearly: models need a
    whole series; the errors are scored only on hours with data."""
    y = y.copy()
    for lag in (DAY, WEEK):
        gaps = np.flatnonzero(np.isnan(y))
        for i in gaps:
            if i >= lag and not np.isnan(y[i - lag]):
                y[i] = y[i - lag]
    gaps = np.isnan(y)
    if gaps.all():
        raise ValueError("the demand series has no data")
    if gaps.any():
        x = np.arange(y.size)
        y[gaps] = np.interp(x[gaps], x[~gaps], y[~gaps])
    return y


def _snaive(y: np.ndarray, h: int, m: int) -> np.ndarray:
    last = y[-m:] if y.size >= m else np.resize(y, m)
    return np.resize(last, h)


def _fit(tsa: Any, name: str, y: np.ndarray, h: int) -> np.ndarray:
    """`h` hours ahead of `y` by the candidate `name`."""
    if name == "seasonal_naive_day":
        return _snaive(y, h, DAY)
    if name == "seasonal_naive_week":
        return _snaive(y, h, WEEK)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in ("holt_winters_day", "holt_winters_week"):
            m = DAY if name.endswith("day") else WEEK
            model = tsa.ExponentialSmoothing(
                y, trend=None, seasonal="add", seasonal_periods=m, initialization_method="estimated"
            )
            return np.asarray(model.fit().forecast(h), dtype=np.float64)
        if name == "unobserved_components":
            model = tsa.UnobservedComponents(
                y,
                level="local level",
                freq_seasonal=[{"period": DAY, "harmonics": 4}, {"period": WEEK, "harmonics": 3}],
            )
            res = model.fit(disp=False, maxiter=60)
            return np.asarray(res.forecast(h), dtype=np.float64)
    raise ValueError(f"unknown forecast model {name!r}")


def mase(actual: np.ndarray, predicted: np.ndarray, history: np.ndarray, m: int = DAY) -> float:
    """Mean absolute error over the hours with data ÷ the mean absolute error of the
    seasonal-naive (lag `m`) forecast inside `history` (NaN when that scale is 0 or unknown)."""
    seen = ~np.isnan(actual)
    if not seen.any() or history.size <= m:
        return float("nan")
    diffs = np.abs(history[m:] - history[:-m])
    diffs = diffs[~np.isnan(diffs)]
    scale = float(diffs.mean()) if diffs.size else 0.0
    if scale <= 0:
        return float("nan")
    return float(np.mean(np.abs(actual[seen] - predicted[seen]))) / scale


def _usable(names: tuple[str, ...], n_train: int) -> tuple[str, ...]:
    """The candidates a training part of `n_train` hours can fit (two seasons of data)."""
    need = {"seasonal_naive_day": DAY, "seasonal_naive_week": WEEK, "holt_winters_day": 2 * DAY,
            "holt_winters_week": 2 * WEEK, "unobserved_components": 2 * WEEK}  # fmt: skip
    return tuple(n for n in names if n_train >= need[n])


def forecast(
    hourly_demand: np.ndarray,
    start_s: int,
    horizon_hours: int = WEEK,
    candidates: tuple[str, ...] = CANDIDATES,
    level: float = 0.9,
    model: str | None = None,
) -> Forecast:
    """Forecast `horizon_hours` after an hourly series starting at `start_s`.

    `model` skips the selection (used per queue with the pooled series' choice)."""
    tsa = _statsmodels()
    raw = np.asarray(hourly_demand, dtype=np.float64)
    if raw.size < MIN_HOURS:
        raise ValueError(
            f"the forecast needs at least {MIN_HOURS} hours of history, got {raw.size} h"
        )
    y = _fill(raw)
    window = int(min(horizon_hours, max(DAY, raw.size // 5)))
    n_train = raw.size - 2 * window
    train, val_end = y[:n_train], n_train + window
    baseline = "seasonal_naive_week" if n_train + window >= 2 * WEEK else "seasonal_naive_day"
    scores: dict[str, float] = {}
    if model is None:
        usable = _usable(candidates, n_train) or ("seasonal_naive_day",)
        for name in usable:
            try:
                pred = _fit(tsa, name, train, window)
            except (ValueError, np.linalg.LinAlgError):
                continue
            scores[name] = mase(raw[n_train:val_end], pred, train)
        finite = {k: v for k, v in scores.items() if np.isfinite(v)}
        chosen = min(finite, key=lambda k: finite[k]) if finite else baseline
    else:
        chosen = model
    fitted = y[:val_end]
    test_actual = raw[val_end:]
    test_pred = _fit(tsa, chosen, fitted, window)
    base_pred = _fit(tsa, baseline, fitted, window)
    test_mase = mase(test_actual, test_pred, fitted)
    base_mase = mase(test_actual, base_pred, fitted)
    errors = np.abs(test_actual - test_pred)
    errors = errors[~np.isnan(errors)]
    half = float(np.quantile(errors, level)) if errors.size else float("nan")
    mean = np.maximum(_fit(tsa, chosen, y, horizon_hours), 0.0)
    return Forecast(
        model=chosen,
        horizon_s=horizon_hours * HOUR_S,
        step_s=HOUR_S,
        start_s=start_s + raw.size * HOUR_S,
        mean=mean,
        lo=np.maximum(mean - half, 0.0),
        hi=mean + half,
        test_mase=test_mase,
        baseline_mase=base_mase,
        baseline=baseline,
        validation_mase=scores,
        window_hours=window,
        level=level,
        test_predicted=np.maximum(test_pred, 0.0),
    )


@dataclass(frozen=True, slots=True)
class QueueForecast:
    """A queue's share of the pooled forecast (top-down: by its share of the pooled demand in
    the same hour of the week over the fitted history), and the test-window MASE of that
    disaggregation beside the queue's own seasonal naive."""

    name: str
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    test_mase: float
    baseline_mase: float


@dataclass(frozen=True, slots=True)
class CapacityForecast:
    """The pooled forecast and one per queue."""

    pooled: Forecast
    queues: tuple[QueueForecast, ...]


def _week_shares(
    parts: np.ndarray, first_s: int, upto: int, out_start_s: int, h: int
) -> np.ndarray:
    """Each queue's share of the pooled demand per hour of the week over hours [0, upto),
    laid out for `h` hours from `out_start_s` (an hour of the week never seen: the overall
    share)."""
    filled = np.nan_to_num(parts[:, :upto])
    how = ((first_s // HOUR_S + np.arange(upto)) % WEEK).astype(np.int64)
    sums = np.zeros((parts.shape[0], WEEK))
    for q in range(parts.shape[0]):
        sums[q] = np.bincount(how, weights=filled[q], minlength=WEEK)
    pooled = sums.sum(axis=0)
    overall = filled.sum(axis=1) / max(float(filled.sum()), 1e-12)
    shares = np.where(pooled > 0, sums / np.where(pooled > 0, pooled, 1.0), overall[:, None])
    out_how = ((out_start_s // HOUR_S + np.arange(h)) % WEEK).astype(np.int64)
    return np.asarray(shares[:, out_how], dtype=np.float64)


def capacity_forecast(
    demand: Mapping[str, np.ndarray],
    start_s: int,
    step_s: int,
    horizon_hours: int = WEEK,
    candidates: tuple[str, ...] = CANDIDATES,
) -> CapacityForecast:
    """Per-step demand per queue (GPUs in use + pending; NaN: no data) → the pooled forecast,
    model chosen on validation, and per-queue forecasts split from it top-down (they sum to
    the pooled one; one model fit instead of one per queue)."""
    if not demand:
        raise ValueError("no queue has demand data to forecast")
    names = list(demand)
    hours = [hourly(np.asarray(demand[q], dtype=np.float64), start_s, step_s) for q in names]
    first = hours[0][1]
    parts = np.vstack([h for h, _ in hours])
    known = ~np.isnan(parts)
    pooled_h = np.where(known.any(axis=0), np.where(known, parts, 0.0).sum(axis=0), np.nan)
    pooled = forecast(pooled_h, first, horizon_hours, candidates)
    if len(names) < 2:
        return CapacityForecast(pooled, ())
    n, w = pooled_h.size, pooled.window_hours
    val_end = n - w
    test_pooled = pooled.test_predicted
    test_shares = _week_shares(parts, first, val_end, first + val_end * HOUR_S, w)
    shares = _week_shares(parts, first, n, pooled.start_s, pooled.mean.size)
    out = []
    for q, name in enumerate(names):
        own = parts[q]
        history = _fill(own[:val_end]) if (~np.isnan(own[:val_end])).any() else own[:val_end]
        base = _snaive(history, w, WEEK if val_end >= 2 * WEEK else DAY)
        out.append(
            QueueForecast(
                name=name,
                mean=pooled.mean * shares[q],
                lo=pooled.lo * shares[q],
                hi=pooled.hi * shares[q],
                test_mase=mase(own[val_end:], test_pooled * test_shares[q], history),
                baseline_mase=mase(own[val_end:], base, history),
            )
        )
    return CapacityForecast(pooled, tuple(out))


def demand_of(total_in_use: np.ndarray, pending: np.ndarray) -> np.ndarray:
    """Demand = in use + pending per step; pending unknown counts as 0 where in use is known
    (a source without pending data under-states demand), NaN where both are unknown."""
    use = np.asarray(total_in_use, dtype=np.float64)
    pend = np.asarray(pending, dtype=np.float64)
    out = np.where(np.isnan(use), np.nan, use + np.nan_to_num(pend))
    return np.where(np.isnan(use) & ~np.isnan(pend), pend, out)
