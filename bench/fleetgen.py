"""Realistic simulated GPU telemetry, generated columnar and fast, for the store benchmark.

Signals are what an NVML/DCGM collector on an 8×H100 node reports at 1 s: phases (idle,
training, inference, input-starved) of exponential length, a training-step square wave inside
busy phases, smooth drift plus small noise, and the quantisation real sources have (percent
integers, mW, MiB, MHz, KB/s, whole degrees; profiling ratios as DCGM floats).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

NS = 1_000_000_000
MIB = 1024 * 1024
DAY_NS = 86_400 * NS

#: the metrics each GPU row carries (27, like an H100 with GPM + NVML fields)
GPU_ROW_METRICS: tuple[str, ...] = (
    "gpu_util_ratio", "mem_copy_util_ratio", "graphics_active_ratio", "sm_active_ratio",
    "sm_occupancy_ratio", "tensor_active_ratio", "dram_active_ratio", "fp16_active_ratio",
    "fp32_active_ratio", "pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second",
    "nvlink_tx_bytes_per_second", "nvlink_rx_bytes_per_second", "memory_total_bytes",
    "memory_free_bytes", "memory_used_bytes", "memory_reserved_bytes", "power_watts",
    "power_limit_watts", "energy_joules", "temperature_celsius", "memory_temperature_celsius",
    "sm_clock_hertz", "memory_clock_hertz", "clocks_event_reasons", "pstate",
    "power_violation_seconds_total",
)  # fmt: skip


def _smooth(rng: np.random.Generator, n: int, width: int, scale: float) -> np.ndarray:
    """Slow drift: white noise through a moving average of `width` samples."""
    k = np.ones(width) / width
    raw = rng.normal(0.0, scale * np.sqrt(width), n + width)
    return np.convolve(raw, k, mode="valid")[:n]


def _phases(rng: np.random.Generator, n: int, interval: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample phase id and phase kind (0 idle, 1 train, 2 inference, 3 starved) for `n`
    samples `interval` seconds apart (phase lengths are in seconds)."""
    span = n * interval
    lengths = rng.exponential(2400.0, size=max(4, span // 600)).astype(np.int64) + 60
    ends = np.cumsum(lengths)
    count = int(np.searchsorted(ends, span)) + 1
    kinds = rng.choice(4, size=count, p=[0.25, 0.45, 0.2, 0.1])
    phase = np.searchsorted(ends[:count], np.arange(n) * interval, side="right")
    return phase, kinds[phase]


def gpu_day(
    seed: int, gpu: int, start_ns: int, seconds: int, interval: int = 1
) -> dict[str, np.ndarray]:
    """One GPU's readings every `interval` s for `seconds` seconds from `start_ns`: metric name
    → float64 array (`seconds // interval` samples; counters grow by value × interval)."""
    rng = np.random.default_rng([seed, gpu, start_ns // DAY_NS])
    n = seconds // interval
    phase, kind = _phases(rng, n, interval)
    busy = kind != 0
    # phase level for useful work; a training-step square wave inside busy phases
    level = rng.uniform(0.35, 0.95, size=int(phase.max()) + 1)[phase]
    period = rng.integers(3, 9, size=int(phase.max()) + 1)[phase]
    t = np.arange(n) * interval
    step = ((t % period) < np.maximum(1, period * 0.7)).astype(np.float64)
    starved = kind == 3
    work = np.where(busy, level * (0.75 + 0.25 * step), 0.0)
    work = np.where(starved, work * ((t % 20) < 6), work)
    work = np.clip(
        work + np.where(busy, _smooth(rng, n, _w(30, interval), 0.01) + rng.normal(0, 0.01, n), 0),
        0,
        1,
    )

    def ratio(x: np.ndarray) -> np.ndarray:  # a DCGM/GPM profiling float
        return np.clip(x, 0.0, 1.0)

    def pct(x: np.ndarray) -> np.ndarray:  # an NVML integer percent as a ratio
        return np.round(np.clip(x, 0.0, 1.0) * 100.0) / 100.0

    out: dict[str, np.ndarray] = {}
    out["gpu_util_ratio"] = pct(np.where(busy, np.minimum(1.0, work * 1.6 + 0.05), 0.0))
    out["mem_copy_util_ratio"] = pct(work * 0.45 + np.where(busy, rng.normal(0, 0.01, n), 0))
    out["graphics_active_ratio"] = ratio(np.where(busy, np.minimum(1, work * 1.15), 0))
    out["sm_active_ratio"] = ratio(work)
    out["sm_occupancy_ratio"] = ratio(work * 0.4 + np.where(busy, rng.normal(0, 0.005, n), 0))
    tensor_share = np.where(kind == 1, 0.45, 0.25)
    out["tensor_active_ratio"] = ratio(work * tensor_share)
    out["dram_active_ratio"] = ratio(work * 0.55 + np.where(busy, rng.normal(0, 0.01, n), 0))
    out["fp16_active_ratio"] = ratio(work * 0.04)
    out["fp32_active_ratio"] = ratio(work * 0.12 + np.where(busy, rng.normal(0, 0.003, n), 0))
    kbps = 1024.0
    pcie_rx = np.where(starved, 9e9 * ((t % 20) >= 6), np.where(busy, 4e8, 2e5))
    out["pcie_rx_bytes_per_second"] = (
        np.round(np.abs(pcie_rx * (1 + rng.normal(0, 0.05, n))) / kbps) * kbps
    )
    out["pcie_tx_bytes_per_second"] = (
        np.round(np.abs(pcie_rx * 0.1 * (1 + rng.normal(0, 0.05, n))) / kbps) * kbps
    )
    nvl = np.where(kind == 1, 1.2e11 * (1 - step), 0.0)
    out["nvlink_tx_bytes_per_second"] = (
        np.round(np.abs(nvl * (1 + rng.normal(0, 0.03, n))) / MIB * 10) / 10 * MIB
    )
    out["nvlink_rx_bytes_per_second"] = (
        np.round(np.abs(nvl * (1 + rng.normal(0, 0.03, n))) / MIB * 10) / 10 * MIB
    )
    total = 81559 * MIB
    reserved = 541 * MIB
    mem_level = rng.uniform(8_000, 78_000, size=int(phase.max()) + 1)[phase]
    used = np.where(
        busy, np.round(mem_level + np.clip(_smooth(rng, n, _w(60, interval), 2.0), -50, 50)), 3
    )
    out["memory_total_bytes"] = np.full(n, float(total))
    out["memory_used_bytes"] = used * MIB
    out["memory_free_bytes"] = total - reserved - used * MIB
    out["memory_reserved_bytes"] = np.full(n, float(reserved))
    watts = 72 + work * 560 + np.where(busy, rng.normal(0, 6, n), rng.normal(0, 0.4, n))
    watts = np.round(np.clip(watts, 60, 700) * 1000) / 1000  # mW
    out["power_watts"] = watts
    out["power_limit_watts"] = np.full(n, 700.0)
    out["energy_joules"] = (
        np.round((rng.uniform(1e7, 5e8) + np.cumsum(watts) * interval) * 1000) / 1000
    )
    temp = 32 + work * 38 + _smooth(rng, n, _w(120, interval), 0.6)
    out["temperature_celsius"] = np.round(temp)
    out["memory_temperature_celsius"] = np.round(temp + 4 + _smooth(rng, n, _w(120, interval), 0.3))
    clock = np.where(busy, 1980 - np.round(np.clip(work - 0.8, 0, 1) * 600 / 15) * 15, 345)
    out["sm_clock_hertz"] = clock * 1e6
    out["memory_clock_hertz"] = np.full(n, 2619e6)
    throttled = (watts > 640).astype(np.float64)
    out["clocks_event_reasons"] = np.where(busy, throttled * 4, 1.0)
    out["pstate"] = np.where(busy, 0.0, 0.0)
    out["power_violation_seconds_total"] = np.round(np.cumsum(throttled) * interval * 1e6) / 1e6
    return out


def _w(width_s: int, interval: int) -> int:
    """A smoothing width in samples for a width in seconds."""
    return max(1, width_s // interval)


def gpu_uuid(node: int, gpu: int) -> str:
    return f"GPU-{node:04x}{gpu:04x}-5b1c-4f2e-9a7d-{(node * 8 + gpu) * 7919:012x}"


def fleet_table(
    seed: int, n_gpus: int, start_ns: int, seconds: int, *, per_node: int = 8, interval: int = 1
) -> pa.Table:
    """A GPU table: `n_gpus` GPUs (nodes of `per_node`) every `interval` s (default 1 s) for
    `seconds` from `start_ns`."""
    cols: dict[str, list[np.ndarray]] = {m: [] for m in GPU_ROW_METRICS}
    ts_parts: list[np.ndarray] = []
    hosts: list[str] = []
    uuids: list[str] = []
    idx: list[str] = []
    n = seconds // interval
    tick = start_ns + np.arange(n, dtype=np.int64) * interval * NS
    rng = np.random.default_rng(seed)
    for g in range(n_gpus):
        node, local = divmod(g, per_node)
        data = gpu_day(seed, g, start_ns, seconds, interval)
        for m in GPU_ROW_METRICS:
            cols[m].append(data[m])
        jitter = rng.integers(0, 40_000, n)  # the collector reads GPUs one by one
        ts_parts.append(tick + 2_500_000 + local * 310_000 + jitter)
        hosts.append(f"node{node:03d}")
        uuids.append(gpu_uuid(node, local))
        idx.append(str(local))
    rep = np.full(n_gpus, n)
    table = {
        "ts": pa.array(np.concatenate(ts_parts)),
        "host": pa.DictionaryArray.from_arrays(
            np.repeat(np.arange(n_gpus) // per_node, rep).astype(np.int32), _uniq(hosts)
        ),
        "gpu_uuid": pa.DictionaryArray.from_arrays(
            np.repeat(np.arange(n_gpus), rep).astype(np.int32), uuids
        ),
        "gpu_index": pa.DictionaryArray.from_arrays(
            np.repeat(np.arange(n_gpus) % per_node, rep).astype(np.int32),
            [str(i) for i in range(per_node)],
        ),
        "gpu_model": pa.DictionaryArray.from_arrays(
            np.zeros(n_gpus * n, dtype=np.int32), ["NVIDIA H100 80GB HBM3"]
        ),
    }
    for m in GPU_ROW_METRICS:
        table[m] = pa.array(np.concatenate(cols[m]))
    return pa.table(table)


def _uniq(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))
