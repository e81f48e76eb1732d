from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpulens import units


def test_conversions_to_base_units() -> None:
    assert units.percent_to_ratio(91) == 0.91
    assert units.milliwatts_to_watts(68_200) == 68.2
    assert units.millijoules_to_joules(1_500) == 1.5
    assert units.mib_to_bytes(1) == 1_048_576
    assert units.kb_per_s_to_bytes_per_s(2) == 2048
    assert units.mib_per_s_to_bytes_per_s(1) == 1_048_576
    assert units.mhz_to_hz(1980) == 1.98e9
    assert units.us_to_ns(3) == 3_000
    assert units.joules_to_kwh(3.6e6) == 1.0


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_seconds_to_ns_round_trip(seconds: float) -> None:
    ns = units.s_to_ns(seconds)
    assert isinstance(ns, int)
    assert abs(units.ns_to_s(ns) - seconds) <= 1e-9 * max(1.0, seconds)
