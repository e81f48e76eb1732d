"""counter_rate: first-sample, reset and wrap rules, as properties and examples; RateStage."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulens.model import Kind, Reading
from gpulens.pipeline.rates import RateStage, counter_increase, counter_rate

S = 10**9
T0 = 1_764_000_000 * S

timestamps = st.integers(min_value=0, max_value=2**62)
gaps = st.integers(min_value=1, max_value=10**13)  # 1 ns .. ~3 h
values = st.floats(min_value=0, max_value=1e15, allow_nan=False, allow_infinity=False)


@given(ts=timestamps, value=values)
def test_first_sample_has_no_rate(ts: int, value: float) -> None:
    assert counter_rate(None, (ts, value)) is None


@given(ts=timestamps, back=st.integers(min_value=0, max_value=10**12), a=values, b=values)
def test_non_increasing_time_has_no_rate(ts: int, back: int, a: float, b: float) -> None:
    assert counter_rate((ts, a), (ts - back, b)) is None


@given(ts=timestamps, dt=gaps, start=values, increase=values)
def test_monotone_counter_rate_is_non_negative_and_reconstructs_increase(
    ts: int, dt: int, start: float, increase: float
) -> None:
    current = start + increase
    rate = counter_rate((ts, start), (ts + dt, current))
    assert rate is not None
    assert rate >= 0
    assert rate * (dt / 1e9) == pytest.approx(current - start, rel=1e-9, abs=1e-6)


@given(ts=timestamps, dt=gaps, a=values, b=values)
def test_rates_are_never_negative(ts: int, dt: int, a: float, b: float) -> None:
    rate = counter_rate((ts, a), (ts + dt, b))
    assert rate is not None and rate >= 0


@given(ts=timestamps, dt=gaps, previous=values, current=values)
def test_reset_counts_the_current_value_as_the_increase(
    ts: int, dt: int, previous: float, current: float
) -> None:
    if current >= previous:
        return
    rate = counter_rate((ts, previous), (ts + dt, current))
    assert rate is not None
    assert rate * (dt / 1e9) == pytest.approx(current, rel=1e-9, abs=1e-6)


@given(
    ts=timestamps,
    dt=gaps,
    bits=st.sampled_from([32, 40, 48]),  # exact in a float, like NVML's counters
    data=st.data(),
)
def test_wrap_arithmetic(ts: int, dt: int, bits: int, data: st.DataObject) -> None:
    modulus = float(2**bits)
    previous = data.draw(st.integers(min_value=0, max_value=2**bits - 1))
    step = data.draw(st.integers(min_value=0, max_value=2**bits - 1))
    current = (previous + step) % 2**bits
    rate = counter_rate((ts, float(previous)), (ts + dt, float(current)), wrap=modulus)
    assert rate is not None
    assert rate >= 0
    assert rate * (dt / 1e9) == pytest.approx(step, rel=1e-9, abs=1e-6)


def test_examples() -> None:
    assert counter_rate((0, 100.0), (2 * S, 300.0)) == 100.0
    assert counter_rate((0, 100.0), (S // 2, 100.0)) == 0.0
    assert counter_rate((0, 500.0), (S, 20.0)) == 20.0  # reset: Prometheus rule
    assert counter_rate((0, 250.0), (S, 10.0), wrap=256.0) == 16.0  # 6 to wrap + 10
    assert counter_rate((0, math.nan), (S, 1.0)) is None
    assert counter_rate((0, 1.0), (S, math.inf)) is None
    assert counter_rate((S, 1.0), (S, 2.0)) is None


def test_increase_helper() -> None:
    assert counter_increase(3.0, 5.0) == 2.0
    assert counter_increase(5.0, 3.0) == 3.0
    assert counter_increase(5.0, 3.0, wrap=10.0) == 8.0


def _gpu(ts: int, energy: float, uuid: str = "GPU-0", **extra: float) -> Reading:
    return Reading(
        Kind.GPU, ts, {"host": "h", "gpu_uuid": uuid}, {"energy_joules": energy, **extra}
    )


def test_stage_adds_catalog_rate_gauges_after_first_sample() -> None:
    stage = RateStage()
    (first,) = stage.process([_gpu(T0, 1000.0)])
    assert "energy_watts" not in first.values
    (second,) = stage.process([_gpu(T0 + 2 * S, 1600.0)])
    assert second.values["energy_watts"] == 300.0
    assert second.values["energy_joules"] == 1600.0


def test_stage_keeps_series_apart_by_labels_and_kind() -> None:
    stage = RateStage()
    stage.process([_gpu(T0, 0.0, "a"), _gpu(T0, 1000.0, "b")])
    a, b = stage.process([_gpu(T0 + S, 10.0, "a"), _gpu(T0 + S, 1500.0, "b")])
    assert a.values["energy_watts"] == 10.0
    assert b.values["energy_watts"] == 500.0


def test_stage_host_and_violation_counters() -> None:
    stage = RateStage()
    host = {"host": "h", "device": "nvme0n1"}
    stage.process([Reading(Kind.HOST, T0, host, {"host_disk_read_bytes_total": 0.0})])
    (r,) = stage.process(
        [Reading(Kind.HOST, T0 + 10 * S, host, {"host_disk_read_bytes_total": 5e9})]
    )
    assert r.values["host_disk_read_bytes_per_second"] == 5e8
    labels = {"gpu_uuid": "g"}
    stage.process([Reading(Kind.GPU, T0, labels, {"power_violation_seconds_total": 10.0})])
    (v,) = stage.process(
        [Reading(Kind.GPU, T0 + S, labels, {"power_violation_seconds_total": 11.02})]
    )
    assert v.values["power_violation_ratio"] == 1.0  # capped: clock jitter, not 102 %


def test_stage_passes_readings_without_counters_untouched() -> None:
    stage = RateStage()
    reading = Reading(Kind.GPU, T0, {"gpu_uuid": "g"}, {"power_watts": 300.0})
    assert stage.process([reading])[0] is reading
    assert len(stage) == 0


def test_stage_does_not_overwrite_a_rate_the_source_gave() -> None:
    stage = RateStage()
    stage.process([_gpu(T0, 0.0)])
    (r,) = stage.process([_gpu(T0 + S, 100.0, energy_watts=42.0)])
    assert r.values["energy_watts"] == 42.0


def test_stage_ignores_out_of_order_samples() -> None:
    stage = RateStage()
    stage.process([_gpu(T0 + 10 * S, 1000.0)])
    (old,) = stage.process([_gpu(T0, 0.0)])
    assert "energy_watts" not in old.values
    (r,) = stage.process([_gpu(T0 + 11 * S, 1100.0)])
    assert r.values["energy_watts"] == 100.0


def test_stage_reset_is_never_negative() -> None:
    stage = RateStage()
    stage.process([_gpu(T0, 5000.0)])
    (r,) = stage.process([_gpu(T0 + S, 40.0)])  # driver reload: counter restarted
    assert r.values["energy_watts"] == 40.0


def test_stage_wrap_modulus() -> None:
    stage = RateStage(wraps={"energy_joules": 1000.0})
    stage.process([_gpu(T0, 990.0)])
    (r,) = stage.process([_gpu(T0 + S, 5.0)])
    assert r.values["energy_watts"] == 15.0


def test_stage_forgets_entities_unseen_for_a_while() -> None:
    stage = RateStage(forget_after_s=60)
    stage.process([_gpu(T0, 0.0, "gone"), _gpu(T0, 0.0, "stays")])
    for k in range(1, 200):
        stage.process([_gpu(T0 + k * S, float(k), "stays")])
    assert len(stage) == 1
    (back,) = stage.process([_gpu(T0 + 200 * S, 500.0, "gone")])
    assert "energy_watts" not in back.values  # old state forgotten: first sample again


def test_stage_validates_forget_after() -> None:
    with pytest.raises(ValueError, match="forget_after_s"):
        RateStage(forget_after_s=0)
