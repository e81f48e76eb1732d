"""Serving latency per engine from the serving process's own readings (pure).

gpulens.torch.inference writes one app reading per (engine, window) with the window's calls
(`app_requests`, warm-up left out), their rate and the quantiles of their latency (min, p50,
p90, p95, p99, max). Here windows are combined:

- **Quantiles over many windows** are those of the mixture of the windows' distributions, each
  window weighted by its calls and its distribution interpolated between its stored quantiles
  (min, p25, p50, p75, p90, p95, p99, max): linear in latency up to the median, linear in
  log-latency above it (the long right tail of latencies). With one window it gives that
  window's stored quantiles back; over windows of different loads it stays within a few per
  cent of the quantile of all the calls (tests/unit/analyze/test_inference_latency.py).
- **QPS** is the calls over the time the windows cover (each window's calls over its rate).
- **Engine choice by load** (`engine_choice`): per model, each engine's windows are grouped
  into load bins (requests per second, bins a factor `bin_ratio` wide); a bin holds the latency
  objective when its quantile is at most the objective. The native engine holds it up to the
  highest load before its first bin that does not; above that load the optimised engine that
  holds the objective at the highest load is needed. When it held at every measured load, the
  switch point is the higher of the highest measured load and its saturation one call at a
  time (1 / mean latency): beyond that no measurement says it still holds. Each engine's
  latency against batch size comes with it (`batch_curves`: the quantile and samples per
  second per mean batch size, rounded).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from gpulens.analyze._arrays import floats, strings

QUANTILES: tuple[tuple[float, str], ...] = (
    (0.0, "app_latency_min_seconds"),
    (0.25, "app_latency_p25_seconds"),
    (0.5, "app_latency_p50_seconds"),
    (0.75, "app_latency_p75_seconds"),
    (0.9, "app_latency_p90_seconds"),
    (0.95, "app_latency_p95_seconds"),
    (0.99, "app_latency_p99_seconds"),
    (1.0, "app_latency_max_seconds"),
)
NATIVE: tuple[str, ...] = ("eager",)
OPTIMISED: tuple[str, ...] = ("compile", "tensorrt", "onnxruntime")
_KEYS = ("job_id", "model", "engine")


@dataclass(frozen=True, slots=True)
class Objective:
    """A latency objective: the `quantile` ("p50", "p90", "p95", "p99") at most `seconds`."""

    seconds: float = 0.1
    quantile: str = "p95"

    def __post_init__(self) -> None:
        if self.quantile not in ("p50", "p90", "p95", "p99") or not self.seconds > 0:
            raise ValueError(
                "a latency objective is p50, p90, p95 or p99 at most a positive number of "
                f"seconds, got {self.quantile!r} <= {self.seconds!r} s"
            )

    @property
    def q(self) -> float:
        return int(self.quantile[1:]) / 100.0

    def text(self) -> str:
        return f"{self.quantile} <= {self.seconds * 1e3:.4g} ms"


def served(app: pa.Table) -> pa.Table:
    """The rows of `app` written by a serving wrapper (with `app_requests` and an engine)."""
    if app.num_rows == 0 or "app_requests" not in app.column_names:
        return app.slice(0, 0)
    calls = floats(app, "app_requests")
    engine = strings(app, "engine") if "engine" in app.column_names else [None] * app.num_rows
    keep = ~np.isnan(calls) & (calls > 0) & np.array([bool(e) for e in engine], dtype=bool)
    return app.filter(pa.array(keep))


def _knots(t: pa.Table) -> np.ndarray:
    """Per row the latency at each of `QUANTILES` (rows x 6), a missing knot interpolated from
    its neighbours (sorted, so a row's quantile function never decreases)."""
    cols = np.column_stack([floats(t, c) for _, c in QUANTILES])
    probs = np.array([p for p, _ in QUANTILES])
    for row in cols:
        seen = ~np.isnan(row)
        if seen.any() and not seen.all():
            row[~seen] = np.interp(probs[~seen], probs[seen], row[seen])
    return np.sort(cols, axis=1)


def mixture_quantiles(
    calls: np.ndarray, knots: np.ndarray, qs: Sequence[float], grid: int = 2048
) -> list[float | None]:
    """Quantiles `qs` of the calls-weighted mixture of per-window distributions, each given by
    its latency at the probabilities of `QUANTILES` (see the module's docstring)."""
    ok = ~np.isnan(knots).any(axis=1) & (calls > 0)
    calls, knots = calls[ok], knots[ok]
    if calls.size == 0:
        return [None for _ in qs]
    if calls.size == 1:
        probs = np.array([p for p, _ in QUANTILES])
        return [float(np.interp(q, probs, knots[0])) for q in qs]
    lo, hi = float(knots.min()), float(knots.max())
    base = np.geomspace(max(lo, 1e-9), max(hi, 1e-9), grid) if hi > lo else np.array([lo])
    xs = np.unique(np.concatenate([base, knots.ravel()] if knots.size <= 60_000 else [base]))
    probs = np.array([p for p, _ in QUANTILES])
    cdf = np.zeros(xs.size)
    for w, row in zip(calls, knots, strict=True):
        cdf += w * _cdf(xs, row, probs)
    cdf /= calls.sum()
    out: list[float | None] = []
    for q in qs:
        i = int(np.searchsorted(cdf, q, side="left"))
        if i == 0:
            out.append(float(xs[0]))
        elif i >= xs.size:
            out.append(float(xs[-1]))
        else:  # linear between the grid points around q
            c0, c1 = cdf[i - 1], cdf[i]
            f = 0.0 if c1 <= c0 else (q - c0) / (c1 - c0)
            out.append(float(xs[i - 1] + f * (xs[i] - xs[i - 1])))
    return out


def _cdf(xs: np.ndarray, knots: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """The CDF at `xs` of a distribution whose quantile function is linear between knots."""
    if knots[-1] <= knots[0]:
        return np.asarray(xs >= knots[0], dtype=np.float64)
    # np.interp needs increasing x: merge tied knots, keeping the highest probability
    x, idx = np.unique(knots[::-1], return_index=True)
    p = probs[::-1][idx]
    linear = np.interp(xs, x, p, left=0.0, right=1.0)
    if x[0] <= 0:
        return np.asarray(linear, dtype=np.float64)
    # above the median, linear in log-latency: a long right tail, as latencies have
    logged = np.interp(np.log(np.maximum(xs, 1e-300)), np.log(x), p, left=0.0, right=1.0)
    return np.asarray(np.where(xs > knots[2], logged, linear), dtype=np.float64)


def _window_seconds(t: pa.Table) -> np.ndarray:
    calls, rate = floats(t, "app_requests"), floats(t, "app_requests_per_second")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(rate > 0, calls / rate, np.nan)


def _groups(t: pa.Table, keys: Sequence[str]) -> dict[tuple[str, ...], np.ndarray]:
    cols = [strings(t, k) if k in t.column_names else [None] * t.num_rows for k in keys]
    out: dict[tuple[str, ...], list[int]] = {}
    for i, key in enumerate(zip(*cols, strict=True)):
        out.setdefault(tuple(k or "" for k in key), []).append(i)
    return {k: np.array(v) for k, v in sorted(out.items())}


def _summary(t: pa.Table, rows: np.ndarray) -> dict[str, Any]:
    sub = t.take(pa.array(rows))
    calls = floats(sub, "app_requests")
    p50, p95, p99 = mixture_quantiles(calls, _knots(sub), (0.5, 0.95, 0.99))
    seconds = _window_seconds(sub)
    covered = float(np.nansum(seconds))
    mean = floats(sub, "app_latency_mean_seconds")
    seen = ~np.isnan(mean)
    batch = floats(sub, "app_batch_size")
    bseen = ~np.isnan(batch)
    warm = floats(sub, "app_warmup_requests")
    total = float(calls.sum())
    return {
        "calls": int(total),
        "warmup_calls": int(np.nansum(warm)),
        "p50_ms": None if p50 is None else p50 * 1e3,
        "p95_ms": None if p95 is None else p95 * 1e3,
        "p99_ms": None if p99 is None else p99 * 1e3,
        "mean_ms": float((mean[seen] * calls[seen]).sum() / calls[seen].sum() * 1e3)
        if seen.any()
        else None,
        "qps": total / covered if covered > 0 else None,
        "batch_size": float((batch[bseen] * calls[bseen]).sum() / calls[bseen].sum())
        if bseen.any()
        else None,
        "windows": int(rows.size),
    }


def latency_by_engine(app: pa.Table) -> list[dict[str, Any]]:
    """One row per (job, model, engine) that served calls: calls, warm-up calls, p50/p95/p99
    and mean latency in ms, QPS, mean batch size, readings combined."""
    t = served(app)
    if t.num_rows == 0:
        return []
    out = []
    for (job, model, engine), rows in _groups(t, _KEYS).items():
        out.append({"job_id": job, "model": model, "engine": engine, **_summary(t, rows)})
    return out


def _curve(t: pa.Table, rows: np.ndarray, q: float, bin_ratio: float) -> list[dict[str, Any]]:
    """(load, quantile) points: the engine's windows binned by requests per second."""
    sub = t.take(pa.array(rows))
    rate = floats(sub, "app_requests_per_second")
    ok = rate > 0
    bins = np.full(rate.size, -1, dtype=np.int64)
    bins[ok] = np.floor(np.log(rate[ok]) / math.log(bin_ratio)).astype(np.int64)
    calls, knots = floats(sub, "app_requests"), _knots(sub)
    seconds = _window_seconds(sub)
    points = []
    for b in np.unique(bins[ok]).tolist():
        ix = np.flatnonzero(bins == b)
        (lat,) = mixture_quantiles(calls[ix], knots[ix], (q,))
        covered = float(np.nansum(seconds[ix]))
        points.append(
            {
                "qps": float(calls[ix].sum()) / covered if covered > 0 else None,
                "latency_ms": None if lat is None else lat * 1e3,
                "calls": int(calls[ix].sum()),
            }
        )
    return points


def _batch_curve(t: pa.Table, rows: np.ndarray, q: float) -> list[dict[str, Any]]:
    """(batch size, quantile, samples/s) points: the engine's windows by mean batch size
    (rounded), for the latency against batch side of the curve."""
    sub = t.take(pa.array(rows))
    batch = floats(sub, "app_batch_size")
    calls, knots = floats(sub, "app_requests"), _knots(sub)
    seconds = _window_seconds(sub)
    points = []
    for b in np.unique(np.round(batch[~np.isnan(batch)])).tolist():
        ix = np.flatnonzero(np.round(batch) == b)
        (lat,) = mixture_quantiles(calls[ix], knots[ix], (q,))
        covered = float(np.nansum(seconds[ix]))
        samples = float((calls[ix] * batch[ix]).sum())
        points.append(
            {
                "batch_size": b,
                "latency_ms": None if lat is None else lat * 1e3,
                "samples_per_second": samples / covered if covered > 0 else None,
                "calls": int(calls[ix].sum()),
            }
        )
    return points


def _holds_up_to(
    points: list[dict[str, Any]], objective_ms: float
) -> tuple[float | None, float | None]:
    """(highest load before the first bin missing the objective, that bin's load or None)."""
    best = None
    for p in points:
        if p["latency_ms"] is None or p["qps"] is None:
            continue
        if p["latency_ms"] > objective_ms:
            return best, p["qps"]
        best = p["qps"]
    return best, None


def engine_choice(
    app: pa.Table,
    objective: Objective | None = None,
    native: Sequence[str] = NATIVE,
    optimised: Sequence[str] = OPTIMISED,
    bin_ratio: float = 1.25,
) -> list[dict[str, Any]]:
    """Per (job, model) served on a native and at least one other engine: the load up to which
    the native engine holds `objective`, above which an optimised one is needed (see the
    module's docstring), with each engine's latency curve."""
    obj = objective or Objective()
    t = served(app)
    if t.num_rows == 0:
        return []
    limit_ms = obj.seconds * 1e3
    out = []
    for (job, model), rows in _groups(t, ("job_id", "model")).items():
        sub = t.take(pa.array(rows))
        engines = _groups(sub, ("engine",))
        curves = {e[0]: _curve(sub, ix, obj.q, bin_ratio) for e, ix in engines.items()}
        by_batch = {e[0]: _batch_curve(sub, ix, obj.q) for e, ix in engines.items()}
        natives = [e for e in curves if e in native]
        others = [e for e in curves if e in optimised]
        if not natives or not others:
            continue
        nat = natives[0]
        holds, fails = _holds_up_to(curves[nat], limit_ms)
        mean_ms = _summary(sub, engines[(nat,)])["mean_ms"]
        saturation = 1e3 / mean_ms if mean_ms else None
        switch = fails if fails is not None else max(holds or 0.0, saturation or 0.0) or None
        best = None
        for e in others:
            up_to, missed = _holds_up_to(curves[e], limit_ms)
            if up_to is not None and (best is None or up_to > best[1]):
                best = (e, up_to, missed)
        out.append(
            {
                "job_id": job,
                "model": model,
                "objective": obj.text(),
                "native_engine": nat,
                "native_holds_up_to_qps": holds,
                "native_misses_from_qps": fails,
                "native_saturation_qps": saturation,
                "switch_above_qps": None if holds is None and fails is not None else switch,
                "optimised_engine": best[0] if best else None,
                "optimised_holds_up_to_qps": best[1] if best else None,
                "verdict": _verdict(obj, nat, holds, fails, saturation, best),
                "curves": curves,
                "batch_curves": by_batch,
            }
        )
    return out


def _verdict(
    obj: Objective,
    nat: str,
    holds: float | None,
    fails: float | None,
    saturation: float | None,
    best: tuple[str, float, float | None] | None,
) -> str:
    other = (
        f"{best[0]} holds it up to {best[1]:.4g} requests/s measured"
        if best
        else "no optimised engine measured holds it"
    )
    if holds is None and fails is not None:
        return (
            f"{nat} misses {obj.text()} at every measured load (from {fails:.4g} "
            f"requests/s); {other}"
        )
    if fails is not None:
        return (
            f"{nat} holds {obj.text()} up to {holds:.4g} requests/s and misses it from "
            f"{fails:.4g} requests/s: above that, {other}"
        )
    sat = (
        f"; one call at a time it saturates near {saturation:.4g} requests/s" if saturation else ""
    )
    top = f"{holds:.4g}" if holds is not None else "?"
    return f"{nat} holds {obj.text()} at every measured load (up to {top} requests/s){sat}; {other}"


def measured_gain(
    rows: Sequence[dict[str, Any]],
    jobs: Sequence[str],
    native: Sequence[str] = NATIVE,
    optimised: Sequence[str] = OPTIMISED,
) -> tuple[float, str, str, dict[str, Any], dict[str, Any]] | None:
    """(gain, basis, engine, native row, optimised row) from `latency_by_engine` rows of `jobs`
    where the same model was served on a native and an optimised engine: the ratio of their
    median latencies, the fastest optimised engine; None when no such pair was measured."""
    best = None
    for job in jobs:
        mine = [r for r in rows if r["job_id"] == job and r.get("p50_ms")]
        for nat in (r for r in mine if r["engine"] in native):
            for opt in (r for r in mine if r["engine"] in optimised and r["model"] == nat["model"]):
                gain = nat["p50_ms"] / opt["p50_ms"]
                if best is None or gain > best[0]:
                    basis = (
                        f"measured: median latency of the same model ({nat['model']}, job "
                        f"{job}) on {opt['engine']} {opt['p50_ms']:.4g} ms vs "
                        f"{nat['p50_ms']:.4g} ms on {nat['engine']} ({opt['calls']} and "
                        f"{nat['calls']} calls after warm-up, gpulens.torch.inference)"
                    )
                    best = (gain, basis, str(opt["engine"]), nat, opt)
    return best
