"""Pure conversion of nvidia-smi value strings ("631.95 W", "[N/A]", "P0") to base units.

Shared by the XML and CSV parsers. A value nvidia-smi marks as unavailable ("N/A",
"[Not Supported]", "[Insufficient Permissions]", any bracketed message...) becomes None, never
0. A value that is neither a known "unavailable" marker nor a number in an expected unit raises
`BadValue`, which each parser turns into `NvidiaSmiParseError` with the source and line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from types import MappingProxyType

from gpulens import units

# Unbracketed words nvidia-smi prints instead of a value (the XML never brackets them).
_UNAVAILABLE = frozenset(
    {
        "",
        "n/a",
        "na",
        "not supported",
        "unknown",
        "unknown error",
        "insufficient permissions",
        "requested functionality has been deprecated",
        "gpu is lost",
        "not available",
        "none",
        "-",
    }
)

_NUMBER = re.compile(r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S*)\Z")

# unit (lower case) → scale to the base unit, per quantity.
_SCALES: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        "percent": {"%": 1.0},
        "bytes_mib": {"mib": float(units.MIB), "gib": float(units.MIB * 1024), "kib": 1024.0},
        "watts": {"w": 1.0, "mw": 1e-3},
        "hertz_mhz": {"mhz": 1e6, "ghz": 1e9, "khz": 1e3, "hz": 1.0},
        "celsius": {"c": 1.0},
        "bytes_per_s_kb": {"kb/s": 1024.0, "mb/s": 1024.0 * 1024.0},
        "seconds_us": {"us": 1e-6, "ms": 1e-3, "s": 1.0, "ns": 1e-9},
        "joules_mj": {"mj": 1e-3, "j": 1.0},
        "count": {},
    }
)
# What a value with no unit means, per quantity (nvidia-smi's `nounits`, or a bare XML count).
_BARE: Mapping[str, float] = MappingProxyType(
    {
        "percent": 1.0,
        "bytes_mib": float(units.MIB),
        "watts": 1.0,
        "hertz_mhz": 1e6,
        "celsius": 1.0,
        "bytes_per_s_kb": 1024.0,
        "seconds_us": 1e-6,
        "joules_mj": 1e-3,
        "count": 1.0,
    }
)
# Plausible raw ranges (in the unit nvidia-smi prints); anything outside is corrupt output.
_RANGES: Mapping[str, tuple[float, float]] = MappingProxyType(
    {
        "percent": (0.0, 100.0),
        "bytes_mib": (0.0, 2.0**50),
        "watts": (0.0, 1e5),
        "hertz_mhz": (0.0, 1e11),
        "celsius": (-100.0, 300.0),
        "bytes_per_s_kb": (0.0, 2.0**50),
        "seconds_us": (0.0, 2.0**64),
        "joules_mj": (0.0, 2.0**64),
        "count": (0.0, 2.0**64),
    }
)

QUANTITIES: frozenset[str] = frozenset(_SCALES)


class BadValue(ValueError):
    """A value string that is not a number in the expected unit nor an "unavailable" marker."""


def unavailable(raw: str) -> bool:
    """True when nvidia-smi printed a marker instead of a value ("N/A", "[Not Supported]"...)."""
    text = raw.strip()
    if text.startswith("[") and text.endswith("]"):
        return True
    return text.lower() in _UNAVAILABLE


def measure(raw: str, quantity: str, *, upper: float | None = None) -> float | None:
    """`raw` ("631.95 W", "81559 MiB", "100 %", "42") → base units, or None when unavailable.

    `quantity` is one of QUANTITIES; `upper` overrides the range's upper bound (fan speed may
    exceed 100 %). Raises BadValue for garbage, an unexpected unit or an out-of-range number.
    """
    if unavailable(raw):
        return None
    text = raw.strip()
    match = _NUMBER.match(text)
    if match is None:
        raise BadValue(f"expected a number, got {raw.strip()!r}")
    number = float(match.group(1))
    unit = match.group(2).lower()
    if unit:
        scale = _SCALES[quantity].get(unit)
        if scale is None:
            raise BadValue(f"unexpected unit {match.group(2)!r} in {text!r}")
    else:
        scale = _BARE[quantity]
    low, high = _RANGES[quantity]
    if upper is not None:
        high = upper
    raw_value = number * scale / _BARE[quantity]  # back in the unit nvidia-smi usually prints
    if not (math.isfinite(number) and low <= raw_value <= high):
        raise BadValue(f"value {text!r} is out of range [{low:g}, {high:g}]")
    return number * scale


def ratio(raw: str, *, upper: float = 100.0) -> float | None:
    """Percent → 0..1 (None when unavailable)."""
    value = measure(raw, "percent", upper=upper)
    return None if value is None else units.percent_to_ratio(value)


def clock(raw: str) -> float | None:
    """MHz → Hz; 0 MHz means "unknown" (as in NVML) and is dropped."""
    value = measure(raw, "hertz_mhz")
    return value if value else None


def pstate(raw: str) -> float | None:
    """ "P0".."P15" → 0..15; "P32"/"Unknown"/markers → None."""
    if unavailable(raw):
        return None
    text = raw.strip().upper()
    if not (text.startswith("P") and text[1:].isdigit() and text[1:].isascii()):
        raise BadValue(f"expected a performance state like 'P0', got {raw.strip()!r}")
    state = int(text[1:])
    return float(state) if 0 <= state <= 15 else None


def yes_no(raw: str) -> float | None:
    """ "Yes"/"No" → 1/0 (a real 0: the driver said no)."""
    if unavailable(raw):
        return None
    text = raw.strip().lower()
    if text in ("yes", "true", "1"):
        return 1.0
    if text in ("no", "false", "0"):
        return 0.0
    raise BadValue(f"expected Yes or No, got {raw.strip()!r}")


def active(raw: str) -> bool | None:
    """A clock-event reason's "Active"/"Not Active" → True/False (None when unavailable)."""
    if unavailable(raw):
        return None
    text = raw.strip().lower()
    if text == "active":
        return True
    if text == "not active":
        return False
    raise BadValue(f"expected 'Active' or 'Not Active', got {raw.strip()!r}")


def bitmask(raw: str) -> int | None:
    """ "0x0000000000000001" (or a decimal) → int; None when unavailable."""
    if unavailable(raw):
        return None
    text = raw.strip()
    try:
        value = int(text, 16) if text[:2].lower() == "0x" else int(text, 10)
    except ValueError:
        raise BadValue(
            f"expected a hexadecimal bitmask like '0x0000000000000001', got {text!r}"
        ) from None
    if not 0 <= value < 2**64:
        raise BadValue(f"bitmask {text!r} is out of range")
    return value


# nvidia-smi's reason names (XML tag suffix and CSV field suffix) → NVML clock-event bit.
REASON_BITS: Mapping[str, int] = MappingProxyType(
    {
        "gpu_idle": 0x001,
        "applications_clocks_setting": 0x002,
        "sw_power_cap": 0x004,
        "hw_slowdown": 0x008,
        "sync_boost": 0x010,
        "sw_thermal_slowdown": 0x020,
        "hw_thermal_slowdown": 0x040,
        "hw_power_brake_slowdown": 0x080,
        "display_clocks_setting": 0x100,
    }
)
