"""Counters → rates: one pure function with explicit rules, and the stage that applies it.

Rules of `counter_rate`:

- first sample (no previous) → None; so is a non-increasing timestamp (dt ≤ 0) and a
  non-finite value.
- counter went down → a reset. Without `wrap` we follow Prometheus' `rate()`: the counter
  restarted from 0, so the increase is the current value (the part before the reset is lost,
  the rate is never negative). With `wrap` (the counter's modulus, for fixed-width hardware
  counters that roll over) the increase is `current + wrap - previous`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from gpulens import catalog, units
from gpulens.model import FrozenLabels, Kind, Reading


class Sample(NamedTuple):
    """One counter observation: UTC nanoseconds and the counter value."""

    ts_ns: int
    value: float


def counter_increase(previous: float, current: float, wrap: float | None = None) -> float:
    """The increase from `previous` to `current`, applying the reset/wrap rule (never < 0)."""
    if current >= previous:
        return current - previous
    if wrap is not None:
        return max(current + wrap - previous, 0.0)
    return max(current, 0.0)


def counter_rate(
    previous: tuple[int, float] | None,
    current: tuple[int, float],
    wrap: float | None = None,
) -> float | None:
    """Per-second rate of a counter between two `(ts_ns, value)` samples, or None (see module)."""
    if previous is None:
        return None
    prev_ts, prev_value = previous
    cur_ts, cur_value = current
    dt_ns = cur_ts - prev_ts
    if dt_ns <= 0 or not (math.isfinite(prev_value) and math.isfinite(cur_value)):
        return None
    increase = (
        cur_value - prev_value
        if cur_value >= prev_value
        else counter_increase(prev_value, cur_value, wrap)
    )
    return increase / units.ns_to_s(dt_ns)


_Identity = tuple[Kind, frozenset[tuple[str, str]]]


def _identity(reading: Reading) -> _Identity:
    """The entity a reading describes: its kind and its label items (cached by FrozenLabels)."""
    labels = reading.labels
    if type(labels) is FrozenLabels:
        return reading.kind, labels.identity
    return reading.kind, frozenset(labels.items())


class RateStage:
    """Adds the rate gauge of every catalog counter to a copy of the reading that carries it.

    State is one `(ts_ns, value)` sample per (kind, labels, counter), grouped per entity.
    Entities not seen for `forget_after_s` (reading time) are dropped. A rate the reading
    already has is kept, not overwritten. Rates stored as ratios (violation time per second)
    are capped at 1.0, since the counter and the tick timestamps come from different clocks and
    jitter can push them a little over.
    """

    def __init__(
        self,
        pairs: Mapping[str, str] | None = None,
        wraps: Mapping[str, float] | None = None,
        forget_after_s: float = 600.0,
    ) -> None:
        if forget_after_s <= 0:
            raise ValueError(f"forget_after_s must be > 0 seconds, got {forget_after_s!r}")
        self._pairs = dict(catalog.rate_pairs() if pairs is None else pairs)
        self._counters = frozenset(self._pairs)
        self._wraps = dict(wraps or {})
        self._capped = frozenset(
            gauge
            for gauge in self._pairs.values()
            if gauge in catalog.METRICS and catalog.METRICS[gauge].unit == "ratio"
        )
        self._forget_ns = units.s_to_ns(forget_after_s)
        self._last: dict[_Identity, dict[str, tuple[int, float]]] = {}
        self._next_sweep: int | None = None

    def __len__(self) -> int:
        """How many counter series the stage remembers."""
        return sum(len(series) for series in self._last.values())

    def process(self, readings: Iterable[Reading]) -> list[Reading]:
        """The readings, with rate gauges added where a counter has a previous sample."""
        out: list[Reading] = []
        newest = None
        counters = self._counters
        for reading in readings:
            found = counters.intersection(reading.values)
            if not found:
                out.append(reading)
                continue
            newest = reading.ts if newest is None else max(newest, reading.ts)
            out.append(self._apply(reading, found))
        if newest is not None:
            self._sweep(newest)
        return out

    def _apply(self, reading: Reading, found: frozenset[str]) -> Reading:
        identity = _identity(reading)
        last = self._last.get(identity)
        if last is None:
            last = self._last[identity] = {}
        ts, values, pairs, wraps = reading.ts, reading.values, self._pairs, self._wraps
        added: dict[str, float] = {}
        for counter in found:
            current = (ts, values[counter])
            previous = last.get(counter)
            if previous is not None and ts <= previous[0]:
                continue  # out-of-order or repeated sample: keep the newer state
            last[counter] = current
            gauge = pairs[counter]
            if previous is None or gauge in values:
                continue  # first sample: no rate yet (counter_rate's first rule)
            rate = counter_rate(previous, current, wraps.get(counter))
            if rate is not None:
                added[gauge] = min(rate, 1.0) if gauge in self._capped else rate
        if not added:
            return reading
        return Reading(reading.kind, ts, reading.labels, {**values, **added})

    def _sweep(self, now_ns: int) -> None:
        """Forget series older than `forget_after_s`; runs at most every half of that."""
        if self._next_sweep is None:
            self._next_sweep = now_ns + self._forget_ns // 2
            return
        if now_ns < self._next_sweep:
            return
        self._next_sweep = now_ns + self._forget_ns // 2
        horizon = now_ns - self._forget_ns
        for identity, series in list(self._last.items()):
            stale = [counter for counter, (ts, _) in series.items() if ts < horizon]
            for counter in stale:
                del series[counter]
            if not series:
                del self._last[identity]
