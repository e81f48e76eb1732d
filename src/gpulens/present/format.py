"""Numbers as people read them: `64.4 GB`, `1 h 58 min`, `126 ms`, `46.9 k launches/s`, `35%`.

Every human-readable renderer (terminal, Markdown, HTML, the dashboard) formats figures here;
JSON keeps the raw base-unit values. Sizes are decimal SI (1 GB = 10^9 bytes), as the GPU
names and MIG profiles (`80GB`, `1g.10gb`) count them; 64,424,509,440 bytes is 64.4 GB (60 GiB).

Figures carry three significant figures (`SIG`), except that the integer digits of a number
below 10,000 are never rounded away (`1,234`, not `1.23 k`); from 10,000 up an SI prefix takes
over (`46.9 k`, `1.52 G`). No output has an exponent (`1.3e+09`) or a raw count with
thousands separators (`64,424,509,440`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime

from gpulens import catalog

SIG = 3
MISSING = "-"
_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _missing(x: float | None) -> bool:
    return x is None or not math.isfinite(x)


def _decimals(x: float, sig: int) -> str:
    """`x` (|x| < 10,000) with `sig` significant figures, integer digits kept, trailing zeros
    dropped, and a thousands separator from 1,000."""
    a = abs(x)
    if a == 0:
        return "0"
    if a < 1e-6:
        return "< 0.000001" if x > 0 else "> -0.000001"
    digits = max(0, sig - 1 - math.floor(math.log10(a)))
    text = f"{x:,.{digits}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def number(x: float | None, sig: int = SIG) -> str:
    """A plain number: `0.0323`, `3.88`, `1,234`, `46.9 k`, `1.3 G`; "-" when unknown."""
    if _missing(x):
        return MISSING
    assert x is not None
    sig = max(1, sig)
    if abs(x) < 1e4:
        text = _decimals(x, sig)
        if text.lstrip("-") != "10,000":  # 9,999.7 rounds up to 10 k
            return text
    return si(x, "", sig).rstrip()


def si(x: float | None, symbol: str, sig: int = SIG) -> str:
    """`x` with an SI prefix before `symbol`: `64.4 GB`, `1.52 GHz`, `479 W`, `46.9 k`."""
    if _missing(x):
        return MISSING
    assert x is not None
    a = abs(x)
    for scale, prefix in _PREFIXES:
        # the prefix whose rounded value stays below 1,000 of it
        if a >= scale * (1 - 0.5 * 10 ** (-sig)):
            return f"{_decimals(x / scale, sig)} {prefix}{symbol}"
    return f"{_decimals(x, sig)} {symbol}"


def size(n_bytes: float | None) -> str:
    """Bytes in decimal units: `512 B`, `268 MB`, `64.4 GB`."""
    return si(n_bytes, "B")


def percent(ratio: float | None, sig: int = 2) -> str:
    """A ratio (0..1) as a percentage: `94%`, `3.6%`, `0.032%`."""
    if _missing(ratio):
        return MISSING
    assert ratio is not None
    return number(100 * ratio, sig) + "%"


def duration(seconds: float | None) -> str:
    """A duration: `850 ns`, `126 µs`, `126 ms`, `45.2 s`, `5 min 30 s`, `1 h 58 min`,
    `2 d 4 h`."""
    if _missing(seconds):
        return MISSING
    assert seconds is not None
    s = abs(seconds)
    sign = "-" if seconds < 0 else ""
    if s == 0:
        return "0 s"
    if s < 1e-6:
        return f"{sign}{number(s * 1e9)} ns"
    if s < 1e-3:
        return f"{sign}{number(s * 1e6)} µs"
    if s < 0.9995:
        return f"{sign}{number(s * 1e3)} ms"
    if s < 119.5:
        return f"{sign}{number(s)} s"
    if s < 600:
        m, rest = divmod(round(s), 60)
        return f"{sign}{m} min" + (f" {rest} s" if rest else "")
    minutes = round(s / 60)
    if minutes < 60:
        return f"{sign}{minutes} min"
    hours = round(s / 3600)
    if hours < 24:
        h, m = divmod(minutes, 60)
        return f"{sign}{h} h" + (f" {m} min" if m else "")
    d, h = divmod(hours, 24)
    return f"{sign}{d} d" + (f" {h} h" if h else "")


def money(x: float | None, currency: str = "USD") -> str:
    """An amount: cents below 100 (`72.88 USD`), whole units above (`110 USD`, `12.3 k USD`)."""
    if _missing(x):
        return MISSING
    assert x is not None
    text = f"{x:.2f}" if abs(x) < 99.995 else number(x)
    return f"{text} {currency}"


# -- units --------------------------------------------------------------------------------------

# catalog units (and the names' unit suffixes) → how they are shown
_SI_SYMBOLS = {"bytes": "B", "B": "B", "bytes/s": "B/s", "B/s": "B/s", "W": "W", "J": "J"}
_SI_SYMBOLS |= {"kWh": "kWh"}
_TIME_SCALE = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "h": 3600.0}


def quantity(value: float | None, unit: str | None) -> str:
    """`value` in `unit` (a catalog unit, or one of s, ms, us, ns, h, ratio, °C, timestamp_ns)
    as people read it; a count unit (`launches/s`, `rows`) follows the number."""
    if _missing(value):
        return MISSING
    assert value is not None
    if unit in (None, "", "count", "1"):
        return number(value)
    if unit == "ratio":
        return percent(value)
    if unit in _TIME_SCALE:
        return duration(value * _TIME_SCALE[unit])
    if unit in _SI_SYMBOLS:
        return si(value, _SI_SYMBOLS[unit])
    if unit == "Hz":  # clocks in MHz, as nvidia-smi and the datasheets give them
        return f"{number(value / 1e6)} MHz"
    if unit == "°C":
        return f"{number(value)} °C"
    if unit == "timestamp_ns":
        return datetime.fromtimestamp(value / 1e9, UTC).strftime("%Y-%m-%d %H:%M UTC")
    if unit in ("bool", "bitmask", "xid", "state"):
        return str(int(value)) if value == int(value) else number(value)
    return f"{number(value)} {unit}"


# evidence and table names end in their unit (docs: catalog.py and DESIGN.md "base units")
_SUFFIX_UNITS: tuple[tuple[str, str], ...] = (
    ("_at_ns", "timestamp_ns"),
    ("_bytes_per_second", "B/s"),
    ("_bps", "B/s"),
    ("_bytes", "B"),
    ("_gpu_hours", "GPU-h"),
    ("_hours", "h"),
    ("_seconds", "s"),
    ("_s", "s"),
    ("_ms", "ms"),
    ("_us", "us"),
    ("_ns", "ns"),
    ("_hertz", "Hz"),
    ("_hz", "Hz"),
    ("_watts", "W"),
    ("_w", "W"),
    ("_joules", "J"),
    ("_kwh", "kWh"),
    ("_celsius", "°C"),
    ("_c", "°C"),
    ("_ratio", "ratio"),
    ("_share", "ratio"),
    ("_active", "ratio"),
    ("_swing", "ratio"),
    ("_util", "ratio"),
)
# ratios whose name carries no suffix
_RATIO_NAMES = frozenset(
    {
        "duty",
        "activity",
        "data_wait",
        "mem_copy",
        "host_cpu",
        "host_iowait",
        "imbalance",
        "relative_change",
        "share_slowest",
    }
)
_PLAIN_NAMES: Mapping[str, str] = {"hours": "h"}


def unit_of(metric: str) -> str:
    """The unit of a metric, evidence or table name: the catalog's where it is there, else
    its suffix (`memory_held_bytes` → B, `idle_seconds` → s, `sm_active` → ratio,
    `kernel_launches_per_s` → launches/s); "" for a plain number."""
    for cut in ("_before", "_after", "_median", "_mean", "_max", "_min"):
        if metric.endswith(cut):
            metric = metric[: -len(cut)]
            break
    if metric in catalog.METRICS:
        return catalog.METRICS[metric].unit
    if metric in _RATIO_NAMES:
        return "ratio"
    if metric in _PLAIN_NAMES:
        return _PLAIN_NAMES[metric]
    for per in ("_per_second", "_per_s"):
        if metric.endswith(per):
            what = metric[: -len(per)].rsplit("_", 1)[-1]
            return "B/s" if what == "bytes" else f"{what}/s"
    for suffix, unit in _SUFFIX_UNITS:
        if metric.endswith(suffix):
            return unit
    return ""


def metric_value(metric: str, value: float | None) -> str:
    """A value of the metric called `metric`, in its unit: `64.4 GB`, `1 h 56 min`, `94%`."""
    return quantity(value, unit_of(metric))


# -- free text --------------------------------------------------------------------------------

# not inside an identifier: GPU-e587a412-0489-18e4-... holds "18e4"
_EXPONENT = re.compile(r"(?<![\w.+-])-?\d+(?:\.\d+)?[eE][-+]?\d+(?![\w.-])")
# a time in a trace written as epoch nanoseconds: "(ts 1682725898765423000 ns)"
_EPOCH_NS = re.compile(r"\bts (\d{16,20}) ns\b")
# a duration written in small units: "+1,538,676.0 µs", "39,619.9 us"
_SMALL_UNITS = {"µs": 1e-6, "us": 1e-6, "ns": 1e-9, "ms": 1e-3}
_DURATION = re.compile(r"(?<![\w.,])(-?\d[\d,]*(?:\.\d+)?) ?(µs|us|ns|ms)(?![\w])")


def _epoch(m: re.Match[str]) -> str:
    t = datetime.fromtimestamp(int(m.group(1)) / 1e9, UTC)
    return "ts " + t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d} UTC"


def _duration_text(m: re.Match[str]) -> str:
    return duration(float(m.group(1).replace(",", "")) * _SMALL_UNITS[m.group(2)])


def readable(text: str) -> str:
    """`text`, a label or sentence built below the present layer, with its raw numbers written
    as people read them: exponents (`model_parameters=3.35e+08` → `335 M`), durations in small
    units (`396,199.0 µs` → `396 ms`) and trace times in epoch nanoseconds (`ts
    1682725898765423000 ns` → `ts 2023-04-28 23:51:38.765 UTC`)."""
    if "e" in text or "E" in text:
        text = _EXPONENT.sub(lambda m: number(float(m.group())), text)
    if "s" in text:
        text = _EPOCH_NS.sub(_epoch, text)
        text = _DURATION.sub(_duration_text, text)
    return text
