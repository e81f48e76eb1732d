"""The serving wrapper's pure side: the warm-up rule and the bounded per-window latencies."""

from __future__ import annotations

import numpy as np
import pytest

from gpulens.torch.latency import Call, LatencyWindow, Warmup, WarmupRule


def feed(
    series: list[float], rule: WarmupRule | None = None
) -> tuple[Warmup, list[Call], list[Call]]:
    w = Warmup(rule or WarmupRule())
    warm: list[Call] = []
    steady: list[Call] = []
    for i, s in enumerate(series):
        a, b = w.add(Call(s, 1.0, i))
        warm += a
        steady += b
    return w, warm, steady


def test_one_cold_call_is_the_warmup() -> None:
    series = [2.0] + [0.001 * (1 + 0.05 * (i % 3)) for i in range(60)]  # compile, then steady
    w, warm, steady = feed(series)
    assert w.settled
    assert [c.seconds for c in warm] == [2.0]
    assert len(steady) == 60
    assert w.level_s == pytest.approx(np.median(series[1:21]), rel=0.1)


def test_a_decaying_warmup_ends_where_calls_stop_being_twice_the_settled_level() -> None:
    decay = [0.1, 0.05, 0.02, 0.008, 0.004, 0.0025, 0.0015, 0.0012]
    series = decay + [0.001] * 60
    w, warm, steady = feed(series)
    level = w.level_s
    assert level == pytest.approx(0.001)
    # every warm-up call up to the last one slower than 2x the level, none after
    assert [c.seconds for c in warm] == [s for s in decay if s > 2 * level]
    assert len(warm) + len(steady) == len(series)
    assert all(c.seconds <= 2 * level for c in steady)


def test_latency_still_falling_keeps_calls_held_until_the_cap() -> None:
    series = [1.0 / (i + 1) for i in range(40)]  # keeps falling by more than 10 % per block
    w, warm, steady = feed(series, WarmupRule(max_calls=40))
    assert w.settled  # settled by the cap, at the 40th call
    assert len(warm) + len(steady) == 40
    w2, warm2, steady2 = feed(series[:39], WarmupRule(max_calls=40))
    assert not w2.settled and warm2 == [] and steady2 == [] and len(w2.held) == 39


def test_bad_rules_are_refused() -> None:
    with pytest.raises(ValueError, match="settle_calls"):
        WarmupRule(settle_calls=1)
    with pytest.raises(ValueError, match="tolerance"):
        WarmupRule(slow_factor=1.0)


def test_window_quantiles_are_those_of_its_calls_while_they_fit() -> None:
    rng = np.random.default_rng(7)
    lat = rng.lognormal(-6, 0.5, 1000)
    w = LatencyWindow(reservoir=4096)
    for i, s in enumerate(lat):
        w.add(Call(float(s), 4.0, i))
    v = w.values(window_s=2.0)
    for q, key in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
        assert v[f"app_latency_{key}_seconds"] == pytest.approx(np.quantile(lat, q))
    assert v["app_requests"] == 1000
    assert v["app_requests_per_second"] == pytest.approx(500.0)
    assert v["app_latency_mean_seconds"] == pytest.approx(lat.mean())
    assert v["app_latency_max_seconds"] == lat.max()
    assert v["app_latency_min_seconds"] == lat.min()
    assert v["app_batch_size"] == 4.0
    assert v["app_samples_per_second"] == pytest.approx(2000.0)


def test_window_memory_is_bounded_and_the_sample_stays_representative() -> None:
    rng = np.random.default_rng(3)
    lat = rng.exponential(0.002, 50_000)
    w = LatencyWindow(reservoir=1000)
    for i, s in enumerate(lat):
        w.add(Call(float(s), None, i))
    assert len(w.sample) == 1000
    v = w.values(window_s=10.0)
    assert v["app_requests"] == 50_000  # counts and extremes stay exact
    assert v["app_latency_max_seconds"] == lat.max()
    assert v["app_latency_p50_seconds"] == pytest.approx(np.quantile(lat, 0.5), rel=0.1)
    assert v["app_latency_p95_seconds"] == pytest.approx(np.quantile(lat, 0.95), rel=0.1)
    assert "app_batch_size" not in v  # not known: absent, not 0


def test_warmup_calls_are_counted_apart() -> None:
    w = LatencyWindow()
    w.add_warmup(Call(3.0, 1.0, 0))
    assert w.values(1.0) == {"app_warmup_requests": 1.0, "app_warmup_seconds": 3.0}
    assert LatencyWindow().values(1.0) == {}
