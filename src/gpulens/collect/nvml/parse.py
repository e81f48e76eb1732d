"""Pure translation of what the NVML binding returns (NVML units) into catalog values.

No I/O here: every function takes binding values and returns base-unit floats keyed by catalog
metric names. A value NVML cannot give (None, negative, NaN) is left out, never turned into 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from gpulens import catalog, units
from gpulens.collect.nvml.binding import (
    DeviceInfo,
    MemoryInfo,
    NvlinkCounters,
    ProcessInfo,
    ProcessUtilSample,
    RemappedRows,
    Utilization,
)
from gpulens.model import Reading, event

# GPM metric ids gpulens asks for, in catalog order, and how each converts to base units.
GPM_METRIC_IDS: tuple[int, ...] = tuple(catalog.BY_GPM_ID)
GPM_METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in catalog.BY_GPM_ID.values())
_GPM_SCALE: dict[int, tuple[str, float, bool]] = {  # private, read-only: a dict is fastest
    gpm_id: (
        m.name,
        units.percent_to_ratio(1.0) if m.unit == "ratio" else units.mib_to_bytes(1.0),
        m.unit == "ratio",
    )
    for gpm_id, m in catalog.BY_GPM_ID.items()
}


# Capability (one NVML call) → the catalog metrics it provides. GPM capabilities are per metric:
# after the first GPM interval, each GPM metric name is itself a capability key.
CAPABILITY_METRICS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "utilization": ("gpu_util_ratio", "mem_copy_util_ratio"),
        "encoder": ("enc_util_ratio",),
        "decoder": ("dec_util_ratio",),
        "memory": (
            "memory_total_bytes",
            "memory_free_bytes",
            "memory_used_bytes",
            "memory_reserved_bytes",
        ),
        "power": ("power_watts",),
        "energy_counter": ("energy_joules",),
        "energy_power_integral": ("energy_joules",),
        "temperature": ("temperature_celsius",),
        "memory_temperature": ("memory_temperature_celsius",),
        "slowdown_temperature": ("slowdown_temperature_celsius",),
        "power_limit": ("power_limit_watts",),
        "fan": ("fan_speed_ratio",),
        "sm_clock": ("sm_clock_hertz",),
        "memory_clock": ("memory_clock_hertz",),
        "clocks_event_reasons": (
            "clocks_event_reasons",
            "throttle_power_ratio",
            "throttle_thermal_ratio",
        ),
        "pstate": ("pstate",),
        "gpm": GPM_METRIC_NAMES,
        "pcie_throughput": ("pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second"),
        "power_violation": ("power_violation_seconds_total",),
        "thermal_violation": ("thermal_violation_seconds_total",),
        "ecc_corrected": ("ecc_sbe_volatile_total",),
        "ecc_uncorrected": ("ecc_dbe_volatile_total",),
        "pcie_replay": ("pcie_replay_total",),
        "remapped_rows": (
            "remapped_rows_correctable_total",
            "remapped_rows_uncorrectable_total",
            "row_remap_pending",
            "row_remap_failure",
        ),
        "nvlink_counters": ("nvlink_tx_bytes_total", "nvlink_rx_bytes_total"),
        "processes": ("process_memory_used_bytes",),
        "graphics_processes": ("process_memory_used_bytes",),
        "process_utilization": (
            "process_sm_util_ratio",
            "process_mem_util_ratio",
            "process_enc_util_ratio",
            "process_dec_util_ratio",
        ),
        "xid_events": ("xid_last",),
    }
)


_INF = math.inf


def _ok(value: float | None) -> bool:
    """True for a usable measurement: a finite, non-negative number."""
    return value is not None and 0 <= value < _INF  # NaN fails every comparison


def utilization_values(util: Utilization) -> dict[str, float]:
    """nvmlUtilization_t percent → `gpu_util_ratio`, `mem_copy_util_ratio`."""
    out: dict[str, float] = {}
    if _ok(util.gpu):
        out["gpu_util_ratio"] = units.percent_to_ratio(util.gpu)
    if _ok(util.memory):
        out["mem_copy_util_ratio"] = units.percent_to_ratio(util.memory)
    return out


def memory_values(mem: MemoryInfo) -> dict[str, float]:
    """nvmlMemory(_v2) bytes → memory_{total,free,used}_bytes, plus reserved with the v2 API."""
    out: dict[str, float] = {}
    if _ok(mem.total):
        out["memory_total_bytes"] = float(mem.total)
    if _ok(mem.free):
        out["memory_free_bytes"] = float(mem.free)
    if _ok(mem.used):
        out["memory_used_bytes"] = float(mem.used)
    if mem.reserved is not None and _ok(mem.reserved):
        out["memory_reserved_bytes"] = float(mem.reserved)
    return out


def power_watts(milliwatts: float) -> float | None:
    """nvmlDeviceGetPowerUsage mW → W (None when the value is unusable)."""
    return units.milliwatts_to_watts(milliwatts) if 0 <= milliwatts < _INF else None


def energy_joules(millijoules: float) -> float | None:
    """nvmlDeviceGetTotalEnergyConsumption mJ (counter since driver load) → J."""
    return units.millijoules_to_joules(millijoules) if 0 <= millijoules < _INF else None


def temperature_celsius(celsius: float) -> float | None:
    """°C stays °C; negative or non-finite readings are dropped (sensor sentinels)."""
    return float(celsius) if 0 <= celsius < _INF else None


def fan_speed_ratio(percent: float) -> float | None:
    """Fan percent → ratio. Some boards report a little over 100 %; kept as NVML says."""
    return units.percent_to_ratio(percent) if 0 <= percent < _INF else None


def util_ratio(percent: float) -> float | None:
    """An engine's busy percent (NVENC, NVDEC) → ratio; unusable values are dropped."""
    return units.percent_to_ratio(percent) if 0 <= percent < _INF else None


def memory_temperature_celsius(celsius: float) -> float | None:
    """NVML_FI_DEV_MEMORY_TEMP °C. GDDR parts answer 0 (no HBM sensor): dropped, like < 0."""
    return float(celsius) if 0 < celsius < _INF else None


def power_limit_watts(milliwatts: float) -> float | None:
    """nvmlDeviceGetEnforcedPowerLimit mW → W; 0 (no limit known) is dropped."""
    return units.milliwatts_to_watts(milliwatts) if 0 < milliwatts < _INF else None


def count_total(count: float) -> float | None:
    """A hardware event counter (ECC errors, PCIe replays) as a float; negatives dropped."""
    return float(count) if 0 <= count < _INF else None


def remapped_rows_values(rows: RemappedRows) -> dict[str, float]:
    """nvmlDeviceGetRemappedRows → remapped-row counters and pending/failure flags (0/1)."""
    out: dict[str, float] = {}
    if _ok(rows.correctable):
        out["remapped_rows_correctable_total"] = float(rows.correctable)
    if _ok(rows.uncorrectable):
        out["remapped_rows_uncorrectable_total"] = float(rows.uncorrectable)
    out["row_remap_pending"] = 1.0 if rows.pending else 0.0
    out["row_remap_failure"] = 1.0 if rows.failure else 0.0
    return out


def nvlink_values(counters: NvlinkCounters) -> dict[str, float]:
    """NVLink data KiB counters (all links) → `nvlink_{tx,rx}_bytes_total` in bytes.

    The pipeline's rate stage turns them into `nvlink_*_bytes_per_second` unless GPM already
    gave those gauges in the same reading (a gauge a reading has is never overwritten).
    """
    out: dict[str, float] = {}
    if _ok(counters.tx_kib):
        out["nvlink_tx_bytes_total"] = float(counters.tx_kib) * 1024.0
    if _ok(counters.rx_kib):
        out["nvlink_rx_bytes_total"] = float(counters.rx_kib) * 1024.0
    return out


def clock_hertz(mhz: float | None) -> float | None:
    """MHz → Hz; 0 MHz means NVML did not know, so it is dropped too."""
    return units.mhz_to_hz(mhz) if mhz is not None and 0 < mhz < _INF else None


def static_values(info: DeviceInfo) -> dict[str, float]:
    """Values read once with the inventory: max clocks and the enforced power limit."""
    out: dict[str, float] = {}
    sm_max = clock_hertz(info.max_sm_clock_mhz)
    if sm_max is not None:
        out["sm_clock_max_hertz"] = sm_max
    mem_max = clock_hertz(info.max_memory_clock_mhz)
    if mem_max is not None:
        out["memory_clock_max_hertz"] = mem_max
    if info.power_limit_mw is not None and info.power_limit_mw > 0:
        out["power_limit_watts"] = units.milliwatts_to_watts(info.power_limit_mw)
    return out


def clock_event_values(bitmask: int) -> dict[str, float]:
    """Clock-event reasons bitmask → the mask plus 0/1 power and thermal throttle flags."""
    if bitmask < 0:
        return {}
    return {
        "clocks_event_reasons": float(bitmask),
        "throttle_power_ratio": 1.0 if bitmask & catalog.POWER_REASON_BITS else 0.0,
        "throttle_thermal_ratio": 1.0 if bitmask & catalog.THERMAL_REASON_BITS else 0.0,
    }


def clock_event_names(bitmask: int) -> list[str]:
    """The named reasons set in `bitmask` (e.g. ["sw_power_cap"]), lowest bit first."""
    return catalog.reason_names(bitmask)


def pstate(value: int) -> float | None:
    """Performance state 0..15; NVML's 32 (UNKNOWN) and other out-of-range values are dropped."""
    return float(value) if 0 <= value <= 15 else None


def pcie_bytes_per_second(kb_per_s: float) -> float | None:
    """nvmlDeviceGetPcieThroughput KB/s (1024 bytes) → bytes/s."""
    return float(units.kb_per_s_to_bytes_per_s(kb_per_s)) if 0 <= kb_per_s < _INF else None


def violation_seconds(nanoseconds: float) -> float | None:
    """nvmlDeviceGetViolationStatus cumulative ns → seconds (a counter)."""
    return units.ns_to_s(nanoseconds) if 0 <= nanoseconds < _INF else None


def gpm_values(metrics: Mapping[int, float]) -> dict[str, float]:
    """GPM metric id → value (percent for utilisations, MiB/s for *_PER_SEC) → catalog values.

    Unknown ids and unusable values are left out. Utilisations are capped at 1.0: counter skew
    between the two samples can push GPM a hair over 100 %.
    """
    out: dict[str, float] = {}
    scales = _GPM_SCALE
    for gpm_id, raw in metrics.items():
        spec = scales.get(gpm_id)
        if spec is None or not 0 <= raw < _INF:
            continue
        name, scale, is_ratio = spec
        value = raw * scale
        out[name] = 1.0 if is_ratio and value > 1.0 else value
    return out


def merge_processes(*lists: Iterable[ProcessInfo]) -> list[ProcessInfo]:
    """Compute and graphics processes merged per pid, first-seen order.

    A process that is both (a CUDA app that also renders) appears in both NVML lists with its
    memory on the device; the larger known value is kept, never the sum (it would count the
    same memory twice). Instance ids and name come from the first list that has them.
    """
    merged: dict[int, ProcessInfo] = {}
    for procs in lists:
        for proc in procs:
            seen = merged.get(proc.pid)
            if seen is None:
                merged[proc.pid] = proc
                continue
            used = seen.used_gpu_memory
            if proc.used_gpu_memory is not None and (used is None or proc.used_gpu_memory > used):
                used = proc.used_gpu_memory
            merged[proc.pid] = ProcessInfo(
                pid=proc.pid,
                used_gpu_memory=used,
                gpu_instance_id=seen.gpu_instance_id
                if seen.gpu_instance_id is not None
                else proc.gpu_instance_id,
                compute_instance_id=seen.compute_instance_id
                if seen.compute_instance_id is not None
                else proc.compute_instance_id,
                name=seen.name if seen.name is not None else proc.name,
            )
    return list(merged.values())


def latest_samples(samples: Iterable[ProcessUtilSample]) -> dict[int, ProcessUtilSample]:
    """The newest utilisation sample per pid (NVML may return several per process)."""
    latest: dict[int, ProcessUtilSample] = {}
    for sample in samples:
        seen = latest.get(sample.pid)
        if seen is None or sample.timestamp_us >= seen.timestamp_us:
            latest[sample.pid] = sample
    return latest


def process_memory_values(proc: ProcessInfo) -> dict[str, float]:
    """`process_memory_used_bytes`, absent when NVML does not know (WDDM, some MIG setups)."""
    if proc.used_gpu_memory is None or not _ok(proc.used_gpu_memory):
        return {}
    return {"process_memory_used_bytes": float(proc.used_gpu_memory)}


_IDLE_PROCESS: Mapping[str, float] = MappingProxyType(
    {
        "process_sm_util_ratio": 0.0,
        "process_mem_util_ratio": 0.0,
        "process_enc_util_ratio": 0.0,
        "process_dec_util_ratio": 0.0,
    }
)


_PROCESS_UTIL_NAMES = tuple(_IDLE_PROCESS)


def process_util_values(sample: ProcessUtilSample | None) -> dict[str, float]:
    """Per-process utilisation percent → ratios.

    `None` means the process had no sample in the window, which NVML defines as zero
    utilisation ("one sample per process that had some non-zero utilization"), so this one
    case is a real 0, not a missing value. Only call it when the utilisation query succeeded.
    """
    if sample is None:
        return dict(_IDLE_PROCESS)
    out: dict[str, float] = {}
    raws = (sample.sm_util, sample.mem_util, sample.enc_util, sample.dec_util)
    for name, raw in zip(_PROCESS_UTIL_NAMES, raws, strict=True):
        if 0 <= raw < _INF:
            out[name] = raw / 100.0
    return out


def cuda_version(encoded: int) -> str:
    """NVML's CUDA driver version integer → "major.minor" (12040 → "12.4")."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def device_labels(host: str, info: DeviceInfo, parent_index: int | None = None) -> dict[str, str]:
    """Identity labels of a GPU or MIG instance. MIG instances carry their parent's index."""
    labels = {
        "host": host,
        "gpu_uuid": info.uuid,
        "gpu_index": str(info.index if parent_index is None else parent_index),
        "gpu_model": info.name,
    }
    if info.parent_uuid is not None:
        if info.gpu_instance_id is not None:
            labels["mig_instance"] = str(info.gpu_instance_id)
        if info.mig_profile is not None:
            labels["mig_profile"] = info.mig_profile
        labels["parent_uuid"] = info.parent_uuid
    return labels


VERSION_TITLES: Mapping[str, str] = MappingProxyType(
    {"driver_version": "NVIDIA driver", "nvml_version": "NVML", "cuda_driver_version": "CUDA"}
)


def version_events(
    ts: int,
    current: Mapping[str, str],
    previous: Mapping[str, str] | None,
    labels: Mapping[str, str],
) -> list[Reading]:
    """One event per version at start (`previous` None) and per version that changed since."""
    out: list[Reading] = []
    for key, value in current.items():
        title = VERSION_TITLES.get(key, key)
        if previous is None:
            message = f"{title} {value}"
        elif previous.get(key) != value:
            message = f"{title} changed from {previous.get(key, 'unknown')} to {value}"
        else:
            continue
        out.append(event(ts, key, message, labels))
    return out


def gpu_lost_event(ts: int, labels: Mapping[str, str], reason: str) -> Reading:
    """The one event emitted when a device falls off the bus."""
    uuid, index = labels.get("gpu_uuid", "?"), labels.get("gpu_index", "?")
    return event(ts, "gpu_lost", (
        f"GPU {uuid} (index {index}) is no longer reachable: {reason}; gpulens stops reading "
        "it. Check `nvidia-smi` and the kernel log (XID 79 = fallen off the bus)."
    ), labels)  # fmt: skip


def energy_method_event(ts: int, labels: Mapping[str, str]) -> Reading:
    """Says, once per device, that energy_joules comes from integrating power_watts."""
    return event(ts, "energy_method", (
        f"energy_joules on {labels.get('gpu_uuid', '?')} is integrated from power_watts because "
        "the GPU has no energy counter (NVML gives one on Volta and newer); its accuracy "
        "follows the tick interval"
    ), labels)  # fmt: skip


def xid_event(ts: int, xid: int, uuid: str, labels: Mapping[str, str]) -> Reading:
    """An XID error reported by the driver for GPU `uuid`."""
    return event(ts, "xid", f"XID {xid} on GPU {uuid}", labels)
