"""Per-call latencies of one engine turned into window readings, with warm-up split off (pure).

**Warm-up rule.** The first calls of an engine are held back until latency settles: after each
call n >= 2W (W = `settle_calls`, 10), the median of the last W calls is compared with the
median of the W calls before them; once it is no more than `tolerance` (10 %) below it, latency
has stopped falling and the engine is settled at that median. The warm-up calls are then the
held calls up to the last one slower than `slow_factor` (2) x the settled median; the held
calls after it are the first steady ones. An engine that has not settled after `max_calls`
(500) calls or `max_seconds` (120 s) of calls is settled by the same prefix rule at that point.
Warm-up calls are counted (`app_warmup_requests`, `app_warmup_seconds`) and left out of the
percentiles.

**Bounded memory.** A window keeps at most `reservoir` latencies (reservoir sampling, Vitter's
algorithm R, with a seeded generator): its percentiles are exact up to that many calls and a
uniform sample beyond. Counts, sums, minimum and maximum are exact.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from statistics import median

import numpy as np


@dataclass(frozen=True, slots=True)
class WarmupRule:
    """When an engine's warm-up ends (see the module's docstring)."""

    settle_calls: int = 10
    tolerance: float = 0.1
    slow_factor: float = 2.0
    max_calls: int = 500
    max_seconds: float = 120.0

    def __post_init__(self) -> None:
        if self.settle_calls < 2 or self.max_calls < 2 * self.settle_calls:
            raise ValueError(
                "warm-up settle_calls must be >= 2 and max_calls >= 2 x settle_calls, got "
                f"{self.settle_calls} and {self.max_calls}"
            )
        if not 0 <= self.tolerance < 1 or self.slow_factor <= 1:
            raise ValueError(
                f"warm-up tolerance must be in [0, 1) and slow_factor > 1, got "
                f"{self.tolerance} and {self.slow_factor}"
            )


@dataclass(slots=True)
class Call:
    """One served call: its latency (s), batch size (None: unknown) and end time (ns)."""

    seconds: float
    batch: float | None
    end_ns: int


@dataclass(slots=True)
class Warmup:
    """Holds an engine's first calls until the rule decides where its warm-up ends."""

    rule: WarmupRule = field(default_factory=WarmupRule)
    held: list[Call] = field(default_factory=list)
    settled: bool = False
    warmup_calls: int = 0
    warmup_seconds: float = 0.0
    level_s: float | None = None  # the settled median latency

    def add(self, call: Call) -> tuple[list[Call], list[Call]]:
        """Feed one call: (warm-up calls, steady calls) released by it (both empty while the
        warm-up is undecided)."""
        if self.settled:
            return [], [call]
        self.held.append(call)
        n, w = len(self.held), self.rule.settle_calls
        spent = sum(c.seconds for c in self.held)
        if n >= 2 * w:
            last = median(c.seconds for c in self.held[-w:])
            before = median(c.seconds for c in self.held[-2 * w : -w])
            if last >= before * (1.0 - self.rule.tolerance):
                return self._settle(last)
        if n >= self.rule.max_calls or spent >= self.rule.max_seconds:
            return self._settle(median(c.seconds for c in self.held[-w:]))
        return [], []

    def _settle(self, level: float) -> tuple[list[Call], list[Call]]:
        slow = [i for i, c in enumerate(self.held) if c.seconds > self.rule.slow_factor * level]
        cut = slow[-1] + 1 if slow else 0
        warm, steady = self.held[:cut], self.held[cut:]
        self.held = []
        self.settled = True
        self.level_s = level
        self.warmup_calls = len(warm)
        self.warmup_seconds = sum(c.seconds for c in warm)
        return warm, steady


@dataclass(slots=True)
class LatencyWindow:
    """The steady calls of one window of one engine, in bounded memory."""

    reservoir: int = 4096
    seed: int = 0
    calls: int = 0
    total_s: float = 0.0
    min_s: float = float("inf")
    max_s: float = 0.0
    batch_sum: float = 0.0
    batch_calls: int = 0
    warmup_calls: int = 0
    warmup_s: float = 0.0
    sample: list[float] = field(default_factory=list)
    _rng: random.Random | None = None

    def add(self, call: Call) -> None:
        self.calls += 1
        self.total_s += call.seconds
        self.min_s = min(self.min_s, call.seconds)
        self.max_s = max(self.max_s, call.seconds)
        if call.batch is not None:
            self.batch_sum += call.batch
            self.batch_calls += 1
        if len(self.sample) < self.reservoir:
            self.sample.append(call.seconds)
            return
        if self._rng is None:
            self._rng = random.Random(self.seed)
        j = self._rng.randrange(self.calls)
        if j < self.reservoir:
            self.sample[j] = call.seconds

    def add_warmup(self, call: Call) -> None:
        self.warmup_calls += 1
        self.warmup_s += call.seconds

    def values(self, window_s: float) -> dict[str, float]:
        """The window's app values (empty when it served nothing). `window_s`: the wall time
        the window covers, the denominator of the rates."""
        out: dict[str, float] = {}
        if self.warmup_calls:
            out["app_warmup_requests"] = float(self.warmup_calls)
            out["app_warmup_seconds"] = self.warmup_s
        if self.calls == 0 or window_s <= 0:
            return out
        q = np.quantile(np.asarray(self.sample), [0.5, 0.9, 0.95, 0.99, 0.25, 0.75])
        out.update(
            {
                "app_requests": float(self.calls),
                "app_requests_per_second": self.calls / window_s,
                "app_latency_mean_seconds": self.total_s / self.calls,
                "app_latency_min_seconds": self.min_s,
                "app_latency_p25_seconds": float(q[4]),
                "app_latency_p75_seconds": float(q[5]),
                "app_latency_p50_seconds": float(q[0]),
                "app_latency_p90_seconds": float(q[1]),
                "app_latency_p95_seconds": float(q[2]),
                "app_latency_p99_seconds": float(q[3]),
                "app_latency_max_seconds": self.max_s,
                "app_busy_ratio": min(self.total_s / window_s, 1.0),
            }
        )
        if self.batch_calls:
            out["app_batch_size"] = self.batch_sum / self.batch_calls
            out["app_samples_per_second"] = (
                self.batch_sum * (self.calls / self.batch_calls) / window_s
            )
        return out
