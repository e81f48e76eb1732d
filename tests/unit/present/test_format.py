"""present/format.py: figures as people read them (expected strings written by hand)."""

from __future__ import annotations

import math

import pytest

from gpulens.present import format as fmt


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (0.07, "0.07"),
        (0.000323, "0.000323"),
        (3.88, "3.88"),
        (15.94, "15.9"),
        (479.2, "479"),
        (1234.4, "1,234"),
        (9999.7, "10 k"),
        (46_893.2, "46.9 k"),
        (1.3e9, "1.3 G"),
        (-0.5, "-0.5"),
        (None, "-"),
        (math.nan, "-"),
        (math.inf, "-"),
    ],
)
def test_number(value: float | None, text: str) -> None:
    assert fmt.number(value) == text


@pytest.mark.parametrize(
    ("n_bytes", "text"),
    [
        (64_424_509_440, "64.4 GB"),  # the example: 60 GiB
        (268_435_456, "268 MB"),
        (80e9, "80 GB"),
        (999_700, "1 MB"),
        (512, "512 B"),
        (0, "0 B"),
    ],
)
def test_size_is_decimal(n_bytes: float, text: str) -> None:
    assert fmt.size(n_bytes) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (7080, "1 h 58 min"),
        (6960, "1 h 56 min"),
        (3600, "1 h"),
        (0.126, "126 ms"),
        (126e-6, "126 µs"),
        (9e-8, "90 ns"),
        (45.24, "45.2 s"),
        (60, "60 s"),
        (330, "5 min 30 s"),
        (1500, "25 min"),
        (49.5 * 3600, "2 d 2 h"),
        (0, "0 s"),
        (None, "-"),
    ],
)
def test_duration(seconds: float | None, text: str) -> None:
    assert fmt.duration(seconds) == text


@pytest.mark.parametrize(
    ("ratio", "text"),
    [(0.94, "94%"), (0.036, "3.6%"), (0.000323, "0.032%"), (1.0, "100%"), (0, "0%")],
)
def test_percent(ratio: float, text: str) -> None:
    assert fmt.percent(ratio) == text


def test_money() -> None:
    assert fmt.money(72.88) == "72.88 USD"
    assert fmt.money(110.08, "EUR") == "110 EUR"
    assert fmt.money(12_345.6) == "12.3 k USD"
    assert fmt.money(None) == "-"


@pytest.mark.parametrize(
    ("metric", "value", "text"),
    [
        ("kernel_launches_per_s", 46_893.2, "46.9 k launches/s"),
        ("memory_held_bytes", 64_424_509_440, "64.4 GB"),
        ("memory_used_bytes", 64_424_509_440, "64.4 GB"),  # from the catalog
        ("idle_seconds", 7080, "1 h 58 min"),
        ("duration_s", 0.126, "126 ms"),
        ("kernel_us", 1_234_567, "1.23 s"),
        ("gap_us", 126, "126 µs"),
        ("sm_active", 0.354, "35%"),
        ("duty", 0.94, "94%"),
        ("data_idle_share", 0.5, "50%"),
        ("sm_clock_hz", 1.515e9, "1,515 MHz"),
        ("sm_clock_hertz", 705e6, "705 MHz"),
        ("power_w", 479.2, "479 W"),
        ("temperature_c", 58.66, "58.7 °C"),
        ("nvlink_bps", 2.3e10, "23 GB/s"),
        ("rate_bytes_per_second", 262_144, "262 kB/s"),
        ("hours", 2.5, "2 h 30 min"),
        ("useful_ratio_before", 0.5, "50%"),
        ("oom_at_ns", 1_764_378_000e9, "2025-11-29 01:00 UTC"),
        ("expected_gain", 3.876, "3.88"),
        ("r2", 0.95, "0.95"),
    ],
)
def test_metric_value_from_the_name(metric: str, value: float, text: str) -> None:
    assert fmt.metric_value(metric, value) == text


def test_readable_rewrites_exponents_only() -> None:
    assert fmt.readable("model_parameters=3.35e+08") == "model_parameters=335 M"
    assert fmt.readable("H100|pytorch|llm|1.3e+09") == "H100|pytorch|llm|1.3 G"
    assert fmt.readable("r2 1e-07, gpu e41a-07 at 0.5") == "r2 < 0.000001, gpu e41a-07 at 0.5"
    uuid = "GPU-e587a412-0489-18e4-876fcd57ef9e"
    assert fmt.readable(f"gpu_uuid={uuid}, x=-2.5e-3") == f"gpu_uuid={uuid}, x=-0.0025"


def test_readable_rewrites_small_units_and_trace_times() -> None:
    note = "10 kernels, 396,199.0 µs total, mean 39,619.9 µs; shifted by -62,789.0 µs"
    assert fmt.readable(note) == "10 kernels, 396 ms total, mean 39.6 ms; shifted by -62.8 ms"
    at = "Memcpy HtoD at +1,538,676.0 µs (ts 1682725898765423000 ns)"
    assert fmt.readable(at) == "Memcpy HtoD at +1.54 s (ts 2023-04-28 23:51:38.765 UTC)"
    assert fmt.readable("3 gaps of 120 us, 5 ms each") == "3 gaps of 120 µs, 5 ms each"
    assert fmt.readable("rank_12 ms_per_step") == "rank_12 ms_per_step"
