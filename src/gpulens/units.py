"""Pure conversions from the units sources speak to gpulens' base units.

Base units: seconds, bytes, watts, joules, hertz, degrees Celsius, ratios in 0..1.
"""

from __future__ import annotations

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
NS_PER_US = 1_000
MIB = 1024 * 1024
KIB = 1024


def percent_to_ratio(value: float) -> float:
    """0..100 → 0..1."""
    return value / 100.0


def milliwatts_to_watts(value: float) -> float:
    return value / 1000.0


def millijoules_to_joules(value: float) -> float:
    return value / 1000.0


def mib_to_bytes(value: float) -> float:
    return value * MIB


def kib_to_bytes(value: float) -> float:
    return value * KIB


def kb_per_s_to_bytes_per_s(value: float) -> float:
    """NVML's PCIe throughput is in KB/s (1024 bytes, per nvml.h)."""
    return value * KIB


def mib_per_s_to_bytes_per_s(value: float) -> float:
    """GPM's *_PER_SEC metrics are MiB/s."""
    return value * MIB


def mhz_to_hz(value: float) -> float:
    return value * 1_000_000.0


def us_to_s(value: float) -> float:
    return value / 1_000_000.0


def ns_to_s(value: float) -> float:
    return value / 1e9


def s_to_ns(seconds: float) -> int:
    """Seconds (float) → integer nanoseconds, rounded to the nearest ns."""
    return round(seconds * NS_PER_S)


def us_to_ns(value: int) -> int:
    return value * NS_PER_US


def joules_to_kwh(value: float) -> float:
    return value / 3.6e6
