"""Which queries, over which time chunks (pure arithmetic, no I/O).

A range [start, end) at step `step` is evaluated at `t = start + step, ..., end`, each value
covering (t - step, t]: `start` and `end` are first aligned down to a multiple of the step, so
the steps of two reports line up with each other and with the store's epoch-aligned intervals.

Prometheus refuses a range query of more than 11,000 points per series, and one that would
hold more than `query.max-samples` samples (50 M by default) at once: the range is cut into
chunks of at most `max_points` steps each, and small enough that the series times the points
of a chunk plus the raw samples one step's window reads stay under half of `max_samples`.
A server that refuses a chunk anyway gets it again in halves (`halve`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Prometheus's hard limit of points per series in one range query
PROMETHEUS_MAX_POINTS = 11_000
#: Prometheus's default `query.max-samples`
PROMETHEUS_MAX_SAMPLES = 50_000_000


@dataclass(frozen=True, slots=True)
class QueryLimits:
    """The server's limits as gpulens plans for them (`prometheus.max_points`,
    `prometheus.max_samples`)."""

    max_points: int = PROMETHEUS_MAX_POINTS - 1
    max_samples: int = PROMETHEUS_MAX_SAMPLES


@dataclass(frozen=True, slots=True)
class Chunk:
    """One query_range call: evaluation times `first_s`, `first_s + step`, ..., `last_s`."""

    first_s: float
    last_s: float
    step_s: float

    @property
    def points(self) -> int:
        return round((self.last_s - self.first_s) / self.step_s) + 1


def aligned(start_s: float, end_s: float, step_s: float) -> tuple[float, float]:
    """[start, end) aligned down to multiples of the step (ValueError when nothing is left)."""
    if not step_s > 0:
        raise ValueError(f"the step must be positive, got {step_s!r}")
    lo = math.floor(start_s / step_s) * step_s
    hi = math.floor(end_s / step_s) * step_s
    if hi <= lo:
        raise ValueError(
            f"the range {start_s:.0f}..{end_s:.0f} holds no whole step of {step_s:g} s"
        )
    return lo, hi


def chunks(
    start_s: float,
    end_s: float,
    step_s: float,
    series: int,
    scrape_s: float,
    limits: QueryLimits = QueryLimits(),
) -> list[Chunk]:
    """The chunks of [start, end) (aligned) for a query over `series` series scraped every
    `scrape_s` seconds."""
    lo, hi = aligned(start_s, end_s, step_s)
    total = round((hi - lo) / step_s)
    per_point = max(series, 1)
    window = max(series, 1) * max(step_s / max(scrape_s, 1e-3), 1.0)
    budget = limits.max_samples / 2 - window
    by_samples = int(budget // per_point) if budget > per_point else 1
    size = max(1, min(limits.max_points, by_samples, total))
    out: list[Chunk] = []
    k = 0
    while k < total:
        n = min(size, total - k)
        first = lo + (k + 1) * step_s
        out.append(Chunk(first, first + (n - 1) * step_s, step_s))
        k += n
    return out


def halve(chunk: Chunk) -> list[Chunk]:
    """A chunk the server refused, as two (ValueError for a single point: nothing to split)."""
    if chunk.points <= 1:
        raise ValueError("a single step cannot be split further")
    left = chunk.points // 2
    mid = chunk.first_s + (left - 1) * chunk.step_s
    return [
        Chunk(chunk.first_s, mid, chunk.step_s),
        Chunk(mid + chunk.step_s, chunk.last_s, chunk.step_s),
    ]


def step_query(series: str, agg: str, step_s: float, selector: str = "") -> str:
    """PromQL for one series downsampled at the step: `avg_over_time(NAME{sel}[900s])`."""
    window = f"{step_s:g}s" if float(step_s).is_integer() else f"{round(step_s * 1000)}ms"
    sel = f"{{{selector}}}" if selector else ""
    return f"{agg}_over_time({series}{sel}[{window}])"
