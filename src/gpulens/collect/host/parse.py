"""Pure translation of psutil structures into catalog values (no psutil import, no I/O).

Every function takes objects shaped like psutil's named tuples (anything with the same
attributes works, which is how the tests feed them) and returns metric name → float in base
units. A field the platform does not provide is left out, never reported as 0.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Values = dict[str, float]

# psutil's Linux cpu_times fields; `guest` and `guest_nice` are already counted in `user` and
# `nice` by the kernel, so they are subtracted from the total (as psutil.cpu_percent does).
_GUEST_FIELDS = ("guest", "guest_nice")
_IDLE_FIELDS = ("idle", "iowait")

# A name is a partition of another listed device when it is that name plus digits
# (sda → sda1) or plus "p" and digits (nvme0n1 → nvme0n1p2, mmcblk0 → mmcblk0p1).
_PARTITION_SUFFIX = re.compile(r"p?\d+")


def _field(obj: Any, name: str) -> float | None:
    value = getattr(obj, name, None)
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _fields(obj: Any) -> dict[str, float]:
    """The numeric fields of a psutil named tuple (or any object with `_fields`/`__dict__`)."""
    names: Iterable[str] = getattr(obj, "_fields", None) or vars(obj)
    out: dict[str, float] = {}
    for name in names:
        value = _field(obj, name)
        if value is not None:
            out[name] = value
    return out


def cpu_total_seconds(times: Any) -> float:
    """All CPU time in a cpu_times sample (busy + idle), without double-counted guest time."""
    f = _fields(times)
    return sum(v for k, v in f.items() if k not in _GUEST_FIELDS)


def cpu_busy_seconds(times: Any) -> float:
    """CPU time that was neither idle nor waiting on I/O (the catalog's busy definition)."""
    f = _fields(times)
    return cpu_total_seconds(times) - sum(f.get(k, 0.0) for k in _IDLE_FIELDS)


def cpu_ratios(prev: Any, cur: Any) -> Values:
    """Busy and iowait ratios between two cpu_times samples; {} when no time passed.

    Ratios are clamped to 0..1: Linux idle counters can step back slightly between reads.
    `host_cpu_iowait_ratio` is absent on platforms without an `iowait` field.
    """
    total = cpu_total_seconds(cur) - cpu_total_seconds(prev)
    if total <= 0:
        return {}
    busy = cpu_busy_seconds(cur) - cpu_busy_seconds(prev)
    out: Values = {"host_cpu_util_ratio": _clamp(busy / total)}
    cur_io, prev_io = _field(cur, "iowait"), _field(prev, "iowait")
    if cur_io is not None and prev_io is not None:
        out["host_cpu_iowait_ratio"] = _clamp((cur_io - prev_io) / total)
    return out


def per_cpu_ratios(prev: Sequence[Any], cur: Sequence[Any]) -> dict[str, float]:
    """Busy ratio per logical CPU index ("0", "1", ...); {} when the CPU count changed."""
    if len(prev) != len(cur):
        return {}
    out: dict[str, float] = {}
    for index, (p, c) in enumerate(zip(prev, cur, strict=True)):
        ratio = cpu_ratios(p, c).get("host_cpu_util_ratio")
        if ratio is not None:
            out[str(index)] = ratio
    return out


def _clamp(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def memory_values(vm: Any) -> Values:
    """Memory used and total from psutil.virtual_memory().

    Used is `total - available` (what can not be handed to a new process without swapping),
    the figure `free` and htop show; psutil's own `used` leaves out page cache differently per
    platform, so it is the fallback only when `available` is missing.
    """
    out: Values = {}
    total = _field(vm, "total")
    if total is not None:
        out["host_memory_total_bytes"] = total
    available = _field(vm, "available")
    if total is not None and available is not None:
        out["host_memory_used_bytes"] = max(0.0, total - available)
    else:
        used = _field(vm, "used")
        if used is not None:
            out["host_memory_used_bytes"] = used
    return out


def load_values(loadavg: Sequence[float] | None, cpu_count: int | None) -> Values:
    """`host_load1` from (load1, load5, load15) and `host_cpu_count`; each absent when unknown."""
    out: Values = {}
    if loadavg:
        out["host_load1"] = float(loadavg[0])
    if cpu_count:
        out["host_cpu_count"] = float(cpu_count)
    return out


def _skipped(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def whole_disks(names: Iterable[str]) -> list[str]:
    """The names that are not partitions of another listed name (avoids double counting)."""
    names = list(names)
    present = set(names)
    out = []
    for name in names:
        partition = any(
            name != other
            and name.startswith(other)
            and _PARTITION_SUFFIX.fullmatch(name[len(other) :]) is not None
            for other in present
        )
        if not partition:
            out.append(name)
    return out


def disk_values(perdisk: Mapping[str, Any] | None, skip: Sequence[str] = ()) -> dict[str, Values]:
    """Per whole-disk byte and operation counters from psutil.disk_io_counters(perdisk=True).

    Partitions of a listed disk and names matching a `skip` glob (e.g. "loop*") are dropped.
    """
    if not perdisk:
        return {}
    out: dict[str, Values] = {}
    for name in whole_disks(n for n in perdisk if not _skipped(n, skip)):
        counters = perdisk[name]
        values: Values = {}
        for attr, metric in (
            ("read_bytes", "host_disk_read_bytes_total"),
            ("write_bytes", "host_disk_write_bytes_total"),
            ("read_count", "host_disk_reads_total"),
            ("write_count", "host_disk_writes_total"),
        ):
            value = _field(counters, attr)
            if value is not None:
                values[metric] = value
        if values:
            out[name] = values
    return out


def network_values(
    pernic: Mapping[str, Any] | None, skip: Sequence[str] = ("lo",)
) -> dict[str, Values]:
    """Per interface rx/tx byte counters from psutil.net_io_counters(pernic=True)."""
    if not pernic:
        return {}
    out: dict[str, Values] = {}
    for name, counters in pernic.items():
        if _skipped(name, skip):
            continue
        values: Values = {}
        rx, tx = _field(counters, "bytes_recv"), _field(counters, "bytes_sent")
        if rx is not None:
            values["host_network_rx_bytes_total"] = rx
        if tx is not None:
            values["host_network_tx_bytes_total"] = tx
        if values:
            out[name] = values
    return out


def process_cpu_values(cpu_times: Any) -> Values:
    """`process_cpu_seconds_total` = user + system of the process itself (not its children)."""
    user, system = _field(cpu_times, "user"), _field(cpu_times, "system")
    if user is None or system is None:
        return {}
    return {"process_cpu_seconds_total": user + system}


def process_memory_values(memory_info: Any) -> Values:
    """`process_rss_bytes` from Process.memory_info()."""
    rss = _field(memory_info, "rss")
    return {} if rss is None else {"process_rss_bytes": rss}


def process_io_values(io_counters: Any) -> Values:
    """Storage bytes from Process.io_counters() (`read_bytes`/`write_bytes`: real block I/O,
    not `read_chars`, which also counts page-cache hits and pipes)."""
    out: Values = {}
    read, write = _field(io_counters, "read_bytes"), _field(io_counters, "write_bytes")
    if read is not None:
        out["process_read_bytes_total"] = read
    if write is not None:
        out["process_write_bytes_total"] = write
    return out
