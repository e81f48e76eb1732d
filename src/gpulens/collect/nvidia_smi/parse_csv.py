"""Pure parse of `nvidia-smi --query-gpu=<fields> --format=csv[,nounits]` into Readings.

Header-driven: any subset and order of fields, with or without units (`power.draw [W]` with
`631.95 W` or `631.95`). Known fields map to catalog metrics in base units; unknown columns are
ignored; `[N/A]`, `[Not Supported]` and other markers leave the metric absent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import tzinfo
from types import MappingProxyType

from gpulens.collect.capture_time import nvsmi_csv_time
from gpulens.collect.nvidia_smi import values as v
from gpulens.collect.nvidia_smi.errors import NvidiaSmiParseError
from gpulens.collect.nvml import parse as nvml_parse
from gpulens.model import FrozenLabels, Kind, Reading

SOURCE_LABEL = "nvidia_smi"

Convert = Callable[[str], float | None]


def _q(quantity: str) -> Convert:
    return lambda raw: v.measure(raw, quantity)


_MIB, _W, _C, _COUNT = _q("bytes_mib"), _q("watts"), _q("celsius"), _q("count")

# Field name (and nvidia-smi's aliases) → (catalog metric, converter). When two fields give the
# same metric (power.draw and power.draw.average), the first listed in a row wins.
FIELDS: Mapping[str, tuple[str, Convert]] = MappingProxyType(
    {
        "utilization.gpu": ("gpu_util_ratio", v.ratio),
        "utilization.memory": ("mem_copy_util_ratio", v.ratio),
        "utilization.encoder": ("enc_util_ratio", v.ratio),
        "utilization.decoder": ("dec_util_ratio", v.ratio),
        "memory.total": ("memory_total_bytes", _MIB),
        "memory.used": ("memory_used_bytes", _MIB),
        "memory.free": ("memory_free_bytes", _MIB),
        "memory.reserved": ("memory_reserved_bytes", _MIB),
        "power.draw": ("power_watts", _W),
        "power.draw.average": ("power_watts", _W),
        "gpu.power.draw.average": ("power_watts", _W),
        "power.draw.instant": ("power_instant_watts", _W),
        "gpu.power.draw.instant": ("power_instant_watts", _W),
        "enforced.power.limit": ("power_limit_watts", _W),
        "gpu.power.current_limit": ("power_limit_watts", _W),
        "temperature.gpu": ("temperature_celsius", _C),
        "temperature.memory": ("memory_temperature_celsius", _C),
        "fan.speed": ("fan_speed_ratio", lambda raw: v.ratio(raw, upper=255.0)),
        "pstate": ("pstate", v.pstate),
        "clocks.current.sm": ("sm_clock_hertz", v.clock),
        "clocks.sm": ("sm_clock_hertz", v.clock),
        "clocks.current.memory": ("memory_clock_hertz", v.clock),
        "clocks.mem": ("memory_clock_hertz", v.clock),
        "clocks.max.sm": ("sm_clock_max_hertz", v.clock),
        "clocks.max.memory": ("memory_clock_max_hertz", v.clock),
        "clocks.max.mem": ("memory_clock_max_hertz", v.clock),
        "clocks_event_reasons_counters.sw_power_cap": (
            "power_violation_seconds_total",
            _q("seconds_us"),
        ),
        "ecc.errors.corrected.volatile.total": ("ecc_sbe_volatile_total", _COUNT),
        "ecc.errors.uncorrected.volatile.total": ("ecc_dbe_volatile_total", _COUNT),
        "remapped_rows.correctable": ("remapped_rows_correctable_total", _COUNT),
        "remapped_rows.sbe": ("remapped_rows_correctable_total", _COUNT),
        "remapped_rows.uncorrectable": ("remapped_rows_uncorrectable_total", _COUNT),
        "remapped_rows.dbe": ("remapped_rows_uncorrectable_total", _COUNT),
        "remapped_rows.failure": ("row_remap_failure", v.yes_no),
    }
)

# Identity fields → label.
LABEL_FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "uuid": "gpu_uuid",
        "gpu_uuid": "gpu_uuid",
        "index": "gpu_index",
        "name": "gpu_model",
        "gpu_name": "gpu_model",
    }
)

_REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
_ACTIVE_FIELDS = frozenset(p + "active" for p in _REASON_PREFIXES)

# What gpulens asks for: identity, then everything it maps, in one call.
QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "utilization.gpu",
    "utilization.memory",
    "utilization.encoder",
    "utilization.decoder",
    "memory.total",
    "memory.reserved",
    "memory.used",
    "memory.free",
    "power.draw",
    "power.draw.instant",
    "enforced.power.limit",
    "temperature.gpu",
    "temperature.memory",
    "fan.speed",
    "pstate",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "clocks_event_reasons.active",
    "clocks_event_reasons_counters.sw_power_cap",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.failure",
)

_HEADER_CELL = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)(?:\s*\[[^\]]*\])?\Z")


def query_command(binary: str = "nvidia-smi", fields: tuple[str, ...] = QUERY_FIELDS) -> list[str]:
    """The argv that produces what `parse_query_csv` reads."""
    return [binary, f"--query-gpu={','.join(fields)}", "--format=csv,nounits"]


def parse_header(line: str, source: str, lineno: int = 1) -> list[str]:
    """Header cells ("power.draw [W]") → field names ("power.draw"), lower-cased."""
    names: list[str] = []
    for cell in line.split(","):
        match = _HEADER_CELL.match(cell.strip())
        if match is None:
            raise NvidiaSmiParseError(
                source,
                lineno,
                f"expected a CSV header of --query-gpu field names, got {line.strip()[:120]!r} "
                "(use --format=csv without `noheader`)",
            )
        names.append(match.group(1).lower())
    return names


def parse_query_csv(text: str, source: str, ts_ns: int, host: str) -> list[Reading]:
    """One `gpu` reading per data row of `nvidia-smi --query-gpu=... --format=csv[,nounits]`.

    Raises NvidiaSmiParseError, and nothing else, naming `source` and the line, for a missing
    header, a header without any field gpulens measures, a row whose column count differs
    from the header's, or a bad value.
    """
    return list(iter_query_csv(enumerate(text.splitlines(), start=1), source, ts_ns, host))


def iter_query_csv(
    lines: Iterable[tuple[int, str]],
    source: str,
    ts_ns: int,
    host: str,
    tz: tzinfo | None = None,
) -> Iterator[Reading]:
    """`parse_query_csv` over (line number, line) pairs, one reading at a time. With `tz`, a
    row's `timestamp` field (local time without a zone, read in `tz`) stamps it; `ts_ns`
    stamps rows without one."""
    names: list[str] | None = None
    at: int | None = None  # the timestamp column
    order = 0
    for lineno, line in lines:
        if not line.strip():
            continue
        if names is None:
            names = parse_header(line, source, lineno)
            _check_measures(names, source, lineno)
            at = names.index("timestamp") if "timestamp" in names else None
            continue
        cells = line.split(",")
        if len(cells) != len(names):
            raise NvidiaSmiParseError(
                source,
                lineno,
                f"row has {len(cells)} columns, the header has {len(names)} "
                "(truncated output, or a value containing a comma)",
            )
        stamp = ts_ns
        if tz is not None and at is not None:
            stamp = nvsmi_csv_time(cells[at], tz) or ts_ns
        yield _row(names, cells, source, lineno, stamp, host, order)
        order += 1
    if names is None:
        raise NvidiaSmiParseError(source, 0, "empty output: expected a CSV header and rows")


def _check_measures(names: list[str], source: str, lineno: int) -> None:
    """Refuse a header of identity fields only: its rows would be readings without values."""
    if any(n in FIELDS or n in _ACTIVE_FIELDS or n.startswith(_REASON_PREFIXES) for n in names):
        return
    raise NvidiaSmiParseError(
        source,
        lineno,
        f"the header names no field gpulens measures (only {', '.join(names)}); query at "
        "least one, e.g. utilization.gpu, memory.used or power.draw",
    )


def _row(
    names: list[str], cells: list[str], source: str, lineno: int, ts_ns: int, host: str, order: int
) -> Reading:
    labels: dict[str, str] = {"host": host}
    vals: dict[str, float] = {}
    mask: int | None = None
    composed, seen_reason = 0, False
    for name, cell in zip(names, cells, strict=True):
        raw = cell.strip()
        try:
            spec = FIELDS.get(name)
            if spec is not None:
                metric, convert = spec
                if metric not in vals:
                    value = convert(raw)
                    if value is not None:
                        vals[metric] = value
                continue
            label = LABEL_FIELDS.get(name)
            if label is not None:
                if not v.unavailable(raw):
                    labels.setdefault(label, raw)
                continue
            if name in _ACTIVE_FIELDS:
                mask = v.bitmask(raw) if mask is None else mask
                continue
            if name.startswith(_REASON_PREFIXES):
                bit = v.REASON_BITS.get(name.split(".", 1)[1])
                state = v.active(raw) if bit is not None else None
                if bit is not None and state is not None:
                    seen_reason = True
                    composed |= bit if state else 0
        except v.BadValue as exc:
            raise NvidiaSmiParseError(source, lineno, f"field {name!r}: {exc}") from None
    if mask is None and seen_reason:
        mask = composed
    if mask is not None:
        vals.update(nvml_parse.clock_event_values(mask))
    labels.setdefault("gpu_index", str(order))
    labels["source"] = SOURCE_LABEL
    return Reading(Kind.GPU, ts_ns, FrozenLabels(labels), vals)
