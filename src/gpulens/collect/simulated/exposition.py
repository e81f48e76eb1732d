"""dcgm-exporter text exposition of a simulated host, in DCGM's names and units.

Names come from `catalog.Metric.dcgm_name`; units are DCGM's: ratios 0..1 for profiling
fields, percent for GPU_UTIL and MEM_COPY_UTIL, MiB for FB_*, W, an mJ counter for energy, ns
counters for violations, MHz for clocks. Values are the same numbers the binding answers at the
same time (profiling fields are the GPM window of the last second, as DCGM samples at 1 Hz).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpulens import catalog
from gpulens.collect.simulated import phases as col
from gpulens.collect.simulated.gpu import SimGpu

_MIB = 1024 * 1024
Value = Callable[[SimGpu, int], float]


def _mean(column: int) -> Value:
    return lambda g, t: float(g.snap(t).mean[column])


def _mib(kind: str) -> Value:
    def value(g: SimGpu, t: int) -> float:
        total, reserved = g.info.memory_total_bytes, g.model.device.memory_reserved_bytes
        used = g.memory_used(t)
        return float(
            {"total": total, "used": used, "reserved": reserved, "free": total - reserved - used}[
                kind
            ]
            // _MIB
        )

    return value


# catalog metric → (value in DCGM units, integer?, profiling field?)
FIELDS: tuple[tuple[str, Value, bool, bool], ...] = (
    ("sm_clock_hertz", lambda g, t: g.sm_clock_mhz(t), True, False),
    ("memory_clock_hertz", lambda g, t: g.model.device.max_mem_clock_mhz, True, False),
    ("temperature_celsius", lambda g, t: g.temperature_c(t), True, False),
    ("power_watts", lambda g, t: g.power_mw(t) / 1000, False, False),
    ("power_limit_watts", lambda g, t: g.model.device.power_limit_w, False, False),
    ("energy_joules", lambda g, t: g.energy_mj(t), True, False),
    ("gpu_util_ratio", lambda g, t: g.utilization(t)[0], True, False),
    ("mem_copy_util_ratio", lambda g, t: g.utilization(t)[1], True, False),
    ("memory_total_bytes", _mib("total"), True, False),
    ("memory_free_bytes", _mib("free"), True, False),
    ("memory_used_bytes", _mib("used"), True, False),
    ("memory_reserved_bytes", _mib("reserved"), True, False),
    ("pstate", lambda g, t: g.pstate(t), True, False),
    ("clocks_event_reasons", lambda g, t: g.reasons(t), True, False),
    ("power_violation_seconds_total", lambda g, t: g.violation_ns(t, False), True, False),
    ("thermal_violation_seconds_total", lambda g, t: g.violation_ns(t, True), True, False),
    ("graphics_active_ratio", _mean(col.DUTY), False, True),
    ("sm_active_ratio", _mean(col.SM), False, True),
    ("sm_occupancy_ratio", _mean(col.OCC), False, True),
    ("tensor_active_ratio", _mean(col.TENSOR), False, True),
    ("tensor_hmma_active_ratio", _mean(col.HMMA), False, True),
    ("tensor_imma_active_ratio", _mean(col.IMMA), False, True),
    ("tensor_dfma_active_ratio", _mean(col.DFMA), False, True),
    ("dram_active_ratio", _mean(col.DRAM), False, True),
    ("fp64_active_ratio", _mean(col.FP64), False, True),
    ("fp32_active_ratio", _mean(col.FP32), False, True),
    ("fp16_active_ratio", _mean(col.FP16), False, True),
    ("int_active_ratio", _mean(col.INT), False, True),
    ("pcie_tx_bytes_per_second", _mean(col.PCIE_TX), True, True),
    ("pcie_rx_bytes_per_second", _mean(col.PCIE_RX), True, True),
    ("nvlink_tx_bytes_per_second", _mean(col.NVL_TX), True, True),
    ("nvlink_rx_bytes_per_second", _mean(col.NVL_RX), True, True),
)

_HELP_UNIT = {
    "power_watts": "W",
    "energy_joules": "mJ",
    "sm_clock_hertz": "MHz",
    "memory_clock_hertz": "MHz",
    "gpu_util_ratio": "%",
    "mem_copy_util_ratio": "%",
    "memory_total_bytes": "MiB",
    "memory_free_bytes": "MiB",
    "memory_used_bytes": "MiB",
    "memory_reserved_bytes": "MiB",
    "power_violation_seconds_total": "ns",
    "thermal_violation_seconds_total": "ns",
}


def _labels(g: SimGpu, now_ns: int, driver: str) -> str:
    pairs = [
        ("gpu", str(g.info.index)),
        ("UUID", g.uuid),
        ("pci_bus_id", g.info.pci_bus_id),
        ("device", f"nvidia{g.info.index}"),
        ("modelName", g.info.name),
        ("Hostname", g.host),
        ("DCGM_FI_DRIVER_VERSION", driver),
    ]
    job = g.job
    if job is not None and now_ns >= g.model.start_ns + job.start_s * 1e9:
        pairs += [
            ("container", job.labels["container"]),
            ("namespace", job.labels["namespace"]),
            ("pod", job.labels["pod"]),
        ]
    return ",".join(f'{k}="{v}"' for k, v in pairs)


def render(gpus: Sequence[SimGpu], now_ns: int, driver: str, gpm: bool = True) -> str:
    """The exposition text for `gpus` at `now_ns`."""
    labels = [_labels(g, now_ns, driver) for g in gpus]
    lines: list[str] = []
    for name, value, integer, profiling in FIELDS:
        if profiling and not gpm:
            continue
        metric = catalog.get(name)
        dcgm = metric.dcgm_name
        assert dcgm is not None, name
        unit = _HELP_UNIT.get(name, metric.unit)
        lines.append(f"# HELP {dcgm} {metric.help.split('.')[0]} (in {unit}).")
        lines.append(f"# TYPE {dcgm} {metric.type}")
        for g, lab in zip(gpus, labels, strict=True):
            v = value(g, now_ns)
            text = str(int(v)) if integer else f"{v:.6f}"
            lines.append(f"{dcgm}{{{lab}}} {text}")
    return "\n".join(lines) + "\n"
