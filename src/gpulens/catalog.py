"""Every metric gpulens knows, declared once: name, kind, unit, type, help and source ids.

The name carries the base unit (`power_watts`, `sm_active_ratio`). `nvml` names the NVML call or
field, `gpm` the NVML GPM metric id (Hopper+), `dcgm` the DCGM field id and `dcgm_name` the
name dcgm-exporter prints for it before DCGM 4.6 renamed the fields (ids never change, names
did, so sources map by id). `resolution` is the precision the store keeps: finer than any source
reports, coarse enough to compress. docs/metrics.md is generated from this table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from gpulens.model import Kind

MetricType = Literal["gauge", "counter"]


@dataclass(frozen=True, slots=True)
class Metric:
    """One catalog entry."""

    name: str
    kind: Kind
    unit: str
    type: MetricType
    help: str
    nvml: str | None = None
    gpm: int | None = None
    dcgm: int | None = None
    dcgm_name: str | None = None
    resolution: float = 1e-4
    rate: str | None = None


def _g(name: str, unit: str, help: str, **kw: object) -> Metric:
    return Metric(name, Kind.GPU, unit, "gauge", help, **kw)  # type: ignore[arg-type]


def _gc(name: str, unit: str, help: str, **kw: object) -> Metric:
    return Metric(name, Kind.GPU, unit, "counter", help, **kw)  # type: ignore[arg-type]


_RATIO = "ratio"

GPU_METRICS: tuple[Metric, ...] = (
    # Duty cycle: "some kernel ran during the sample window" (nvidia-smi GPU-Util).
    _g(
        "gpu_util_ratio",
        _RATIO,
        "Duty cycle: fraction of the sample period in which at least one "
        "kernel was executing (nvidia-smi GPU-Util). Not useful work.",
        nvml="nvmlDeviceGetUtilizationRates.gpu",
        dcgm=203,
        dcgm_name="DCGM_FI_DEV_GPU_UTIL",
        resolution=0.001,
    ),
    _g(
        "mem_copy_util_ratio",
        _RATIO,
        "Fraction of the sample period in which device memory was "
        "being read or written (time-based, not bandwidth).",
        nvml="nvmlDeviceGetUtilizationRates.memory",
        dcgm=204,
        dcgm_name="DCGM_FI_DEV_MEM_COPY_UTIL",
        resolution=0.001,
    ),
    _g(
        "enc_util_ratio",
        _RATIO,
        "NVENC video encoder utilisation.",
        nvml="nvmlDeviceGetEncoderUtilization",
        dcgm=206,
        dcgm_name="DCGM_FI_DEV_ENC_UTIL",
        resolution=0.001,
    ),
    _g(
        "dec_util_ratio",
        _RATIO,
        "NVDEC video decoder utilisation.",
        nvml="nvmlDeviceGetDecoderUtilization",
        dcgm=207,
        dcgm_name="DCGM_FI_DEV_DEC_UTIL",
        resolution=0.001,
    ),
    # Profiling ("useful work"): DCGM DCP fields, NVML GPM on Hopper+.
    _g(
        "graphics_active_ratio",
        _RATIO,
        "Fraction of time the graphics/compute engine was busy "
        "(profiling analogue of the duty cycle; works per MIG instance).",
        nvml="GPM GRAPHICS_UTIL",
        gpm=1,
        dcgm=1001,
        dcgm_name="DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    ),
    _g(
        "sm_active_ratio",
        _RATIO,
        "Fraction of cycles an SM had at least one warp assigned, "
        "averaged over all SMs. >= 0.8 is needed for effective use; < 0.5 is likely ineffective.",
        nvml="GPM SM_UTIL",
        gpm=2,
        dcgm=1002,
        dcgm_name="DCGM_FI_PROF_SM_ACTIVE",
    ),
    _g(
        "sm_occupancy_ratio",
        _RATIO,
        "Resident warps as a fraction of the theoretical maximum, per elapsed cycle.",
        nvml="GPM SM_OCCUPANCY",
        gpm=3,
        dcgm=1003,
        dcgm_name="DCGM_FI_PROF_SM_OCCUPANCY",
    ),
    _g(
        "tensor_active_ratio",
        _RATIO,
        "Fraction of cycles any tensor pipe was active (1.0 = a "
        "tensor instruction every other cycle).",
        nvml="GPM ANY_TENSOR_UTIL",
        gpm=5,
        dcgm=1004,
        dcgm_name="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    ),
    _g(
        "dram_active_ratio",
        _RATIO,
        "Fraction of cycles the device memory interface was sending "
        "or receiving data (about 0.8 is the practical maximum).",
        nvml="GPM DRAM_BW_UTIL",
        gpm=10,
        dcgm=1005,
        dcgm_name="DCGM_FI_PROF_DRAM_ACTIVE",
    ),
    _g(
        "fp64_active_ratio",
        _RATIO,
        "Fraction of cycles the FP64 (non-tensor) pipe was active.",
        nvml="GPM FP64_UTIL",
        gpm=11,
        dcgm=1006,
        dcgm_name="DCGM_FI_PROF_PIPE_FP64_ACTIVE",
    ),
    _g(
        "fp32_active_ratio",
        _RATIO,
        "Fraction of cycles the FP32/FMA pipe was active.",
        nvml="GPM FP32_UTIL",
        gpm=12,
        dcgm=1007,
        dcgm_name="DCGM_FI_PROF_PIPE_FP32_ACTIVE",
    ),
    _g(
        "fp16_active_ratio",
        _RATIO,
        "Fraction of cycles the FP16 pipe was active (not HMMA).",
        nvml="GPM FP16_UTIL",
        gpm=13,
        dcgm=1008,
        dcgm_name="DCGM_FI_PROF_PIPE_FP16_ACTIVE",
    ),
    _g(
        "int_active_ratio",
        _RATIO,
        "Fraction of cycles the integer pipe was active.",
        nvml="GPM INTEGER_UTIL",
        gpm=4,
        dcgm=1016,
        dcgm_name="DCGM_FI_PROF_PIPE_INT_ACTIVE",
    ),
    _g(
        "tensor_hmma_active_ratio",
        _RATIO,
        "Half-precision (FP16/BF16) tensor pipe activity.",
        nvml="GPM HMMA_TENSOR_UTIL",
        gpm=7,
        dcgm=1014,
        dcgm_name="DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
    ),
    _g(
        "tensor_imma_active_ratio",
        _RATIO,
        "Integer (INT8) tensor pipe activity.",
        nvml="GPM IMMA_TENSOR_UTIL",
        gpm=9,
        dcgm=1013,
        dcgm_name="DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
    ),
    _g(
        "tensor_dfma_active_ratio",
        _RATIO,
        "FP64 tensor pipe activity.",
        nvml="GPM DFMA_TENSOR_UTIL",
        gpm=6,
        dcgm=1015,
        dcgm_name="DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE",
    ),
    _g(
        "tensor_dmma_active_ratio",
        _RATIO,
        "DMMA tensor pipe activity (GPM only).",
        nvml="GPM DMMA_TENSOR_UTIL",
        gpm=8,
    ),
    _g(
        "pcie_tx_bytes_per_second",
        "bytes/s",
        "PCIe transmit rate seen from the GPU (device to host), header and payload.",
        nvml="GPM PCIE_TX_PER_SEC | nvmlDeviceGetPcieThroughput",
        gpm=20,
        dcgm=1009,
        dcgm_name="DCGM_FI_PROF_PCIE_TX_BYTES",
        resolution=1024.0,
    ),
    _g(
        "pcie_rx_bytes_per_second",
        "bytes/s",
        "PCIe receive rate seen from the GPU (host to device: input pipelines show up here).",
        nvml="GPM PCIE_RX_PER_SEC | nvmlDeviceGetPcieThroughput",
        gpm=21,
        dcgm=1010,
        dcgm_name="DCGM_FI_PROF_PCIE_RX_BYTES",
        resolution=1024.0,
    ),
    _g(
        "nvlink_tx_bytes_per_second",
        "bytes/s",
        "NVLink transmit rate over all links.",
        nvml="GPM NVLINK_TOTAL_TX_PER_SEC",
        gpm=61,
        dcgm=1011,
        dcgm_name="DCGM_FI_PROF_NVLINK_TX_BYTES",
        resolution=1024.0,
    ),
    _g(
        "nvlink_rx_bytes_per_second",
        "bytes/s",
        "NVLink receive rate over all links.",
        nvml="GPM NVLINK_TOTAL_RX_PER_SEC",
        gpm=60,
        dcgm=1012,
        dcgm_name="DCGM_FI_PROF_NVLINK_RX_BYTES",
        resolution=1024.0,
    ),
    _gc(
        "nvlink_tx_bytes_total",
        "bytes",
        "NVLink data transmitted over all links (payload, no protocol overhead), a counter; "
        "its rate fills nvlink_tx_bytes_per_second where GPM does not give it.",
        nvml="NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
        resolution=1024.0,
        rate="nvlink_tx_bytes_per_second",
    ),
    _gc(
        "nvlink_rx_bytes_total",
        "bytes",
        "NVLink data received over all links (payload, no protocol overhead), a counter; "
        "its rate fills nvlink_rx_bytes_per_second where GPM does not give it.",
        nvml="NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX",
        resolution=1024.0,
        rate="nvlink_rx_bytes_per_second",
    ),
    # Memory.
    _g(
        "memory_total_bytes",
        "bytes",
        "Device memory visible to the driver.",
        nvml="nvmlDeviceGetMemoryInfo.total",
        dcgm=250,
        dcgm_name="DCGM_FI_DEV_FB_TOTAL",
        resolution=1.0,
    ),
    _g(
        "memory_free_bytes",
        "bytes",
        "Device memory free.",
        nvml="nvmlDeviceGetMemoryInfo.free",
        dcgm=251,
        dcgm_name="DCGM_FI_DEV_FB_FREE",
        resolution=1.0,
    ),
    _g(
        "memory_used_bytes",
        "bytes",
        "Device memory allocated (v2 API: excludes the driver's reservation).",
        nvml="nvmlDeviceGetMemoryInfo.used",
        dcgm=252,
        dcgm_name="DCGM_FI_DEV_FB_USED",
        resolution=1.0,
    ),
    _g(
        "memory_reserved_bytes",
        "bytes",
        "Device memory reserved by driver and firmware.",
        nvml="nvmlDeviceGetMemoryInfo_v2.reserved",
        dcgm=253,
        dcgm_name="DCGM_FI_DEV_FB_RESERVED",
        resolution=1.0,
    ),
    # Power, energy, thermals.
    _g(
        "power_watts",
        "W",
        "Board power draw (1 s average on Ampere and newer except GA100).",
        nvml="nvmlDeviceGetPowerUsage",
        dcgm=155,
        dcgm_name="DCGM_FI_DEV_POWER_USAGE",
        resolution=0.01,
    ),
    _g(
        "power_instant_watts",
        "W",
        "Instantaneous board power draw.",
        nvml="NVML_FI_DEV_POWER_INSTANT",
        dcgm=157,
        dcgm_name="DCGM_FI_DEV_POWER_USAGE_INSTANT",
        resolution=0.01,
    ),
    _g(
        "power_limit_watts",
        "W",
        "Power limit the driver enforces after all limiters.",
        nvml="nvmlDeviceGetEnforcedPowerLimit",
        dcgm=164,
        dcgm_name="DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        resolution=0.01,
    ),
    _gc(
        "energy_joules",
        "J",
        "Energy consumed since the driver was loaded (counter).",
        nvml="nvmlDeviceGetTotalEnergyConsumption",
        dcgm=156,
        dcgm_name="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        resolution=0.001,
        rate="energy_watts",
    ),
    _g(
        "energy_watts",
        "W",
        "Mean power over the interval from the energy counter (rate of energy_joules).",
        resolution=0.01,
    ),
    _g(
        "temperature_celsius",
        "°C",
        "GPU core temperature.",
        nvml="nvmlDeviceGetTemperature",
        dcgm=150,
        dcgm_name="DCGM_FI_DEV_GPU_TEMP",
        resolution=1.0,
    ),
    _g(
        "memory_temperature_celsius",
        "°C",
        "HBM temperature (absent on GDDR parts).",
        nvml="NVML_FI_DEV_MEMORY_TEMP",
        dcgm=140,
        dcgm_name="DCGM_FI_DEV_MEMORY_TEMP",
        resolution=1.0,
    ),
    _g(
        "slowdown_temperature_celsius",
        "°C",
        "Temperature at which the GPU slows down.",
        nvml="nvmlDeviceGetTemperatureThreshold(SLOWDOWN)",
        dcgm=158,
        dcgm_name="DCGM_FI_DEV_SLOWDOWN_TEMP",
        resolution=1.0,
    ),
    _g(
        "fan_speed_ratio",
        _RATIO,
        "Fan speed as a fraction of its maximum (absent on passively cooled boards).",
        nvml="nvmlDeviceGetFanSpeed",
        dcgm=191,
        dcgm_name="DCGM_FI_DEV_FAN_SPEED",
        resolution=0.01,
    ),
    _g(
        "pstate",
        "state",
        "Performance state (0 = maximum performance, 15 = minimum).",
        nvml="nvmlDeviceGetPerformanceState",
        dcgm=190,
        dcgm_name="DCGM_FI_DEV_PSTATE",
        resolution=1.0,
    ),
    # Clocks and clock-event (throttle) reasons.
    _g(
        "sm_clock_hertz",
        "Hz",
        "SM clock.",
        nvml="nvmlDeviceGetClockInfo(SM)",
        dcgm=100,
        dcgm_name="DCGM_FI_DEV_SM_CLOCK",
        resolution=1e6,
    ),
    _g(
        "memory_clock_hertz",
        "Hz",
        "Memory clock.",
        nvml="nvmlDeviceGetClockInfo(MEM)",
        dcgm=101,
        dcgm_name="DCGM_FI_DEV_MEM_CLOCK",
        resolution=1e6,
    ),
    _g(
        "sm_clock_max_hertz",
        "Hz",
        "Maximum SM clock.",
        nvml="nvmlDeviceGetMaxClockInfo(SM)",
        dcgm=113,
        dcgm_name="DCGM_FI_DEV_MAX_SM_CLOCK",
        resolution=1e6,
    ),
    _g(
        "memory_clock_max_hertz",
        "Hz",
        "Maximum memory clock.",
        nvml="nvmlDeviceGetMaxClockInfo(MEM)",
        dcgm=114,
        dcgm_name="DCGM_FI_DEV_MAX_MEM_CLOCK",
        resolution=1e6,
    ),
    _g(
        "clocks_event_reasons",
        "bitmask",
        "Why clocks are below maximum (see CLOCK_EVENT_REASONS for the bits).",
        nvml="nvmlDeviceGetCurrentClocksEventReasons",
        dcgm=112,
        dcgm_name="DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        resolution=1.0,
    ),
    _g(
        "throttle_power_ratio",
        _RATIO,
        "Set (1) when clocks are held down by the power cap, power brake "
        "or a hardware slowdown (from clocks_event_reasons).",
        resolution=1.0,
    ),
    _g(
        "throttle_thermal_ratio",
        _RATIO,
        "Set (1) when clocks are held down by temperature (software or hardware thermal slowdown).",
        resolution=1.0,
    ),
    _gc(
        "power_violation_seconds_total",
        "s",
        "Time clocks were held down by the power cap.",
        nvml="nvmlDeviceGetViolationStatus(POWER)",
        dcgm=240,
        dcgm_name="DCGM_FI_DEV_POWER_VIOLATION",
        resolution=1e-6,
        rate="power_violation_ratio",
    ),
    _gc(
        "thermal_violation_seconds_total",
        "s",
        "Time clocks were held down by temperature.",
        nvml="nvmlDeviceGetViolationStatus(THERMAL)",
        dcgm=241,
        dcgm_name="DCGM_FI_DEV_THERMAL_VIOLATION",
        resolution=1e-6,
        rate="thermal_violation_ratio",
    ),
    _g(
        "power_violation_ratio",
        _RATIO,
        "Fraction of the interval clocks were held down by the "
        "power cap (rate of power_violation_seconds_total).",
        resolution=0.001,
    ),
    _g(
        "thermal_violation_ratio",
        _RATIO,
        "Fraction of the interval clocks were held down by "
        "temperature (rate of thermal_violation_seconds_total).",
        resolution=0.001,
    ),
    # Reliability.
    _gc(
        "pcie_replay_total",
        "count",
        "PCIe replays (link health).",
        nvml="nvmlDeviceGetPcieReplayCounter",
        dcgm=202,
        dcgm_name="DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        resolution=1.0,
    ),
    _gc(
        "ecc_sbe_volatile_total",
        "count",
        "Single-bit ECC errors since the driver loaded.",
        nvml="nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE)",
        dcgm=310,
        dcgm_name="DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        resolution=1.0,
    ),
    _gc(
        "ecc_dbe_volatile_total",
        "count",
        "Double-bit ECC errors since the driver loaded.",
        nvml="nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)",
        dcgm=311,
        dcgm_name="DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        resolution=1.0,
    ),
    _g(
        "xid_last",
        "xid",
        "The last XID error number reported.",
        nvml="nvmlEventSetWait",
        dcgm=230,
        dcgm_name="DCGM_FI_DEV_XID_ERRORS",
        resolution=1.0,
    ),
    _gc(
        "remapped_rows_uncorrectable_total",
        "count",
        "Rows remapped after uncorrectable errors.",
        nvml="nvmlDeviceGetRemappedRows",
        dcgm=393,
        dcgm_name="DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        resolution=1.0,
    ),
    _gc(
        "remapped_rows_correctable_total",
        "count",
        "Rows remapped after correctable errors.",
        nvml="nvmlDeviceGetRemappedRows",
        dcgm=394,
        dcgm_name="DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        resolution=1.0,
    ),
    _g(
        "row_remap_pending",
        "bool",
        "Set (1) when a row remapping waits for a GPU reset to take effect.",
        nvml="nvmlDeviceGetRemappedRows",
        resolution=1.0,
    ),
    _g(
        "row_remap_failure",
        "bool",
        "Set (1) when a row remapping failed (the GPU needs service).",
        nvml="nvmlDeviceGetRemappedRows",
        dcgm=395,
        dcgm_name="DCGM_FI_DEV_ROW_REMAP_FAILURE",
        resolution=1.0,
    ),
)


def _p(name: str, unit: str, help: str, **kw: object) -> Metric:
    return Metric(name, Kind.PROCESS, unit, "gauge", help, **kw)  # type: ignore[arg-type]


PROCESS_METRICS: tuple[Metric, ...] = (
    _p(
        "process_memory_used_bytes",
        "bytes",
        "GPU memory the process holds on this device.",
        nvml="nvmlDeviceGetComputeRunningProcesses.usedGpuMemory",
        resolution=1.0,
    ),
    _p(
        "process_sm_util_ratio",
        _RATIO,
        "Share of time the process had a kernel on the GPU (time share, not SM activity).",
        nvml="nvmlDeviceGetProcessUtilization.smUtil",
        resolution=0.001,
    ),
    _p(
        "process_mem_util_ratio",
        _RATIO,
        "Share of time the process read or wrote device memory.",
        nvml="nvmlDeviceGetProcessUtilization.memUtil",
        resolution=0.001,
    ),
    _p(
        "process_enc_util_ratio",
        _RATIO,
        "Process share of the video encoder.",
        nvml="nvmlDeviceGetProcessUtilization.encUtil",
        resolution=0.001,
    ),
    _p(
        "process_dec_util_ratio",
        _RATIO,
        "Process share of the video decoder.",
        nvml="nvmlDeviceGetProcessUtilization.decUtil",
        resolution=0.001,
    ),
    Metric(
        "process_cpu_seconds_total",
        Kind.PROCESS,
        "s",
        "counter",
        "Host CPU time the process used (user + system).",
        resolution=0.001,
        rate="process_cpu_cores",
    ),
    _p(
        "process_cpu_cores",
        "cores",
        "Host CPU the process uses, in cores (1.5 = one and a half).",
        resolution=0.001,
    ),
    _p("process_rss_bytes", "bytes", "Resident host memory of the process.", resolution=1.0),
    Metric(
        "process_read_bytes_total",
        Kind.PROCESS,
        "bytes",
        "counter",
        "Bytes the process read from storage.",
        resolution=1.0,
        rate="process_read_bytes_per_second",
    ),
    Metric(
        "process_write_bytes_total",
        Kind.PROCESS,
        "bytes",
        "counter",
        "Bytes the process wrote to storage.",
        resolution=1.0,
        rate="process_write_bytes_per_second",
    ),
    _p("process_read_bytes_per_second", "bytes/s", "Process storage read rate.", resolution=1.0),
    _p("process_write_bytes_per_second", "bytes/s", "Process storage write rate.", resolution=1.0),
)


def _h(name: str, unit: str, help: str, **kw: object) -> Metric:
    return Metric(name, Kind.HOST, unit, "gauge", help, **kw)  # type: ignore[arg-type]


HOST_METRICS: tuple[Metric, ...] = (
    _h(
        "host_cpu_util_ratio",
        _RATIO,
        "Host CPU busy fraction over all cores (per core when the reading carries a `cpu` label).",
        resolution=0.001,
    ),
    _h("host_cpu_iowait_ratio", _RATIO, "Host CPU fraction waiting on I/O.", resolution=0.001),
    _h("host_cpu_count", "cores", "Logical CPUs.", resolution=1.0),
    _h("host_load1", "tasks", "One-minute load average.", resolution=0.01),
    _h("host_memory_used_bytes", "bytes", "Host memory in use.", resolution=1.0),
    _h("host_memory_total_bytes", "bytes", "Host memory installed.", resolution=1.0),
    Metric(
        "host_cpu_seconds_total",
        Kind.HOST,
        "s",
        "counter",
        "CPU time busy (not idle, not iowait), summed over cores.",
        resolution=0.001,
    ),
    Metric(
        "host_disk_read_bytes_total",
        Kind.HOST,
        "bytes",
        "counter",
        "Bytes read from storage.",
        resolution=1.0,
        rate="host_disk_read_bytes_per_second",
    ),
    Metric(
        "host_disk_write_bytes_total",
        Kind.HOST,
        "bytes",
        "counter",
        "Bytes written to storage.",
        resolution=1.0,
        rate="host_disk_write_bytes_per_second",
    ),
    Metric(
        "host_disk_reads_total",
        Kind.HOST,
        "ops",
        "counter",
        "Storage read operations.",
        resolution=1.0,
        rate="host_disk_read_iops",
    ),
    Metric(
        "host_disk_writes_total",
        Kind.HOST,
        "ops",
        "counter",
        "Storage write operations.",
        resolution=1.0,
        rate="host_disk_write_iops",
    ),
    Metric(
        "host_network_rx_bytes_total",
        Kind.HOST,
        "bytes",
        "counter",
        "Bytes received.",
        resolution=1.0,
        rate="host_network_rx_bytes_per_second",
    ),
    Metric(
        "host_network_tx_bytes_total",
        Kind.HOST,
        "bytes",
        "counter",
        "Bytes sent.",
        resolution=1.0,
        rate="host_network_tx_bytes_per_second",
    ),
    _h(
        "host_disk_read_bytes_per_second",
        "bytes/s",
        "Storage read rate (per `device`).",
        resolution=1.0,
    ),
    _h(
        "host_disk_write_bytes_per_second",
        "bytes/s",
        "Storage write rate (per `device`).",
        resolution=1.0,
    ),
    _h("host_disk_read_iops", "ops/s", "Storage reads per second.", resolution=0.1),
    _h("host_disk_write_iops", "ops/s", "Storage writes per second.", resolution=0.1),
    _h("host_network_rx_bytes_per_second", "bytes/s", "Network receive rate.", resolution=1.0),
    _h("host_network_tx_bytes_per_second", "bytes/s", "Network transmit rate.", resolution=1.0),
)


def _a(name: str, unit: str, help: str, **kw: object) -> Metric:
    return Metric(name, Kind.APP, unit, "gauge", help, **kw)  # type: ignore[arg-type]


APP_METRICS: tuple[Metric, ...] = (
    _a(
        "app_tokens_per_second",
        "tokens/s",
        "Tokens processed per second (training or serving).",
        resolution=0.1,
    ),
    _a(
        "app_samples_per_second",
        "samples/s",
        "Samples or requests processed per second.",
        resolution=0.01,
    ),
    _a("app_step_seconds", "s", "Mean training step (or batch) time.", resolution=1e-5),
    _a(
        "app_data_wait_ratio",
        _RATIO,
        "Fraction of the step spent waiting for input data.",
        resolution=0.001,
    ),
    _a("app_latency_p50_seconds", "s", "Median request latency.", resolution=1e-5),
    _a("app_latency_p99_seconds", "s", "99th-percentile request latency.", resolution=1e-5),
    # measured inside the serving process (gpulens.torch.inference), per engine and window,
    # warm-up calls left out of the latency figures
    _a("app_requests", "requests", "Calls served after warm-up in the window.", resolution=1.0),
    _a(
        "app_requests_per_second",
        "requests/s",
        "Calls served after warm-up per second of the window.",
        resolution=1e-3,
    ),
    _a("app_latency_mean_seconds", "s", "Mean request latency.", resolution=1e-6),
    _a("app_latency_min_seconds", "s", "Fastest request.", resolution=1e-6),
    _a("app_latency_p25_seconds", "s", "25th-percentile request latency.", resolution=1e-6),
    _a("app_latency_p75_seconds", "s", "75th-percentile request latency.", resolution=1e-6),
    _a("app_latency_p90_seconds", "s", "90th-percentile request latency.", resolution=1e-6),
    _a("app_latency_p95_seconds", "s", "95th-percentile request latency.", resolution=1e-6),
    _a("app_latency_max_seconds", "s", "Slowest request.", resolution=1e-6),
    _a(
        "app_busy_ratio",
        _RATIO,
        "Share of the window spent inside calls (summed latency over the window, at most 1).",
        resolution=1e-4,
    ),
    _a(
        "app_warmup_requests",
        "requests",
        "Calls of the window counted as the engine's warm-up (not in the latency figures).",
        resolution=1.0,
    ),
    _a("app_warmup_seconds", "s", "Time spent in those warm-up calls.", resolution=1e-6),
    _a("app_batch_size", "samples", "Batch size in use.", resolution=1.0),
    _a(
        "app_kernel_launches_per_second",
        "launches/s",
        "CUDA kernel launches per second.",
        resolution=1.0,
    ),
    _a("app_model_parameters", "parameters", "Model parameters N (for MFU).", resolution=1.0),
    _a("app_model_layers", "layers", "Transformer layers L (for MFU).", resolution=1.0),
    _a("app_model_hidden_size", "units", "Hidden size H (for MFU).", resolution=1.0),
    _a("app_sequence_length", "tokens", "Sequence length T (for MFU).", resolution=1.0),
    # measured inside the training process (gpulens.torch and its callbacks), per window
    _a("app_steps", "steps", "Training steps in the reading's window.", resolution=1.0),
    _a(
        "app_data_wait_seconds",
        "s",
        "Mean time per step blocked in the data loader's iterator.",
        resolution=1e-6,
    ),
    _a("app_forward_seconds", "s", "Mean forward time per step.", resolution=1e-6),
    _a(
        "app_backward_seconds",
        "s",
        "Mean time per step from the end of the forward to the optimizer (loss and backward).",
        resolution=1e-6,
    ),
    _a("app_optimizer_seconds", "s", "Mean optimizer step time per step.", resolution=1e-6),
    _a(
        "app_step_flops",
        "FLOP",
        "Model FLOPs of one step, counted once with torch's FlopCounterMode.",
        resolution=1.0,
    ),
    _a("app_flops_per_second", "FLOP/s", "Model FLOPs achieved per second.", resolution=1.0),
    _a(
        "app_peak_flops_per_second",
        "FLOP/s",
        "Dense datasheet peak of the GPU for the step's precision (the MFU denominator).",
        resolution=1.0,
    ),
    _a(
        "app_mfu_ratio",
        _RATIO,
        "Model FLOPs utilisation: achieved model FLOP/s over the GPU's dense peak.",
        resolution=1e-4,
    ),
    _a(
        "app_memory_max_allocated_bytes",
        "bytes",
        "Most GPU memory held by tensors since the process started (max_memory_allocated).",
        resolution=1.0,
    ),
    _a(
        "app_memory_reserved_bytes",
        "bytes",
        "GPU memory held by the caching allocator (torch.cuda.memory_reserved).",
        resolution=1.0,
    ),
    _a(
        "app_memory_fragmentation_bytes",
        "bytes",
        "Reserved minus allocated GPU memory: cached by the allocator, unused by tensors.",
        resolution=1.0,
    ),
    _a("app_loader_workers", "processes", "DataLoader worker processes.", resolution=1.0),
    _a(
        "app_loader_cpu_ratio",
        _RATIO,
        "CPU busy share of the DataLoader workers (mean over workers, 1 = each a full core).",
        resolution=0.001,
    ),
)


def _s(name: str, type_: MetricType, unit: str, help: str) -> Metric:
    return Metric(name, Kind.HOST, unit, type_, help, resolution=1e-6 if unit == "s" else 1.0)


# gpulens' own health, written as host readings labelled source="gpulens" (and collector=...).
SELF_METRICS: tuple[Metric, ...] = (
    _s("gpulens_collector_up", "gauge", "bool",
       "1 when the collector's last run succeeded, else 0 (failed, timed out, still running)."),
    _s("gpulens_collector_last_success_timestamp_seconds", "gauge", "s",
       "When the collector's last successful run was (Unix time)."),
    _s("gpulens_collector_endpoint_up", "gauge", "bool",
       "Per endpoint of a collector that reads several (a dcgm-exporter URL): 1 when its last "
       "scrape succeeded."),
    _s("gpulens_collector_endpoint_errors_total", "counter", "count",
       "Per endpoint: failed scrapes (down, refused, past the deadline or byte limit, not an "
       "exposition)."),
    _s("gpulens_collector_endpoint_last_success_timestamp_seconds", "gauge", "s",
       "Per endpoint: when its last good scrape was taken (Unix time)."),
    _s("gpulens_collector_call_errors_total", "counter", "count",
       "Per call of a collector that makes many per tick (NVML) and error (NVML's return code "
       "by name: timeout, unknown, ...): failed calls, each leaving its metrics out of the tick. "
       "A call not supported or a GPU lost is not counted: it is an event."),
    _s("gpulens_collector_duration_seconds", "gauge", "s", "Wall time of the last run."),
    _s("gpulens_collector_readings", "gauge", "readings", "Readings the last run gave."),
    _s("gpulens_collector_readings_total", "counter", "readings", "Readings the collector gave."),
    _s("gpulens_collector_errors_total", "counter", "count", "Runs that raised an error."),
    _s("gpulens_collector_timeouts_total", "counter", "count", "Runs that overran the timeout."),
    _s("gpulens_collector_skipped_total", "counter", "count",
       "Ticks skipped because the previous run was still going."),
    _s("gpulens_ticks_total", "counter", "count", "Ticks run."),
    _s("gpulens_ticks_missed_total", "counter", "count",
       "Grid points skipped because a tick overran the interval."),
    _s("gpulens_tick_lag_seconds", "gauge", "s", "How late the last tick started."),
    _s("gpulens_flushes_total", "counter", "count", "Times the sink was flushed on a tick."),
    _s("gpulens_sink_errors_total", "counter", "count",
       "Ticks whose append or flush to the store failed (rows stay buffered)."),
    _s("gpulens_store_rows_written_total", "counter", "rows", "Rows the store writer wrote."),
    _s("gpulens_store_written_bytes_total", "counter", "bytes", "Segment bytes written."),
    _s("gpulens_store_segments_written_total", "counter", "count", "Segments the writer wrote."),
    _s("gpulens_store_flush_errors_total", "counter", "count", "Failed flushes (disk full...)."),
    _s("gpulens_store_dropped_rows_total", "counter", "rows",
       "Rows dropped because the buffer overflowed while flushes kept failing."),
    _s("gpulens_store_rejected_rows_total", "counter", "rows", "Rows rejected as malformed."),
    _s("gpulens_store_buffered_rows", "gauge", "rows", "Rows waiting for the next flush."),
    _s("gpulens_store_max_buffered_rows", "gauge", "rows",
       "The buffer's bound while flushes fail (store.max_buffered_rows): beyond it the oldest "
       "rows are dropped."),
    _s("gpulens_store_last_flush_seconds", "gauge", "s", "Duration of the last flush."),
)  # fmt: skip


ALL_METRICS: tuple[Metric, ...] = (
    GPU_METRICS + PROCESS_METRICS + HOST_METRICS + APP_METRICS + SELF_METRICS
)

METRICS: Mapping[str, Metric] = MappingProxyType({m.name: m for m in ALL_METRICS})
BY_DCGM_ID: Mapping[int, Metric] = MappingProxyType(
    {m.dcgm: m for m in ALL_METRICS if m.dcgm is not None}
)
BY_GPM_ID: Mapping[int, Metric] = MappingProxyType(
    {m.gpm: m for m in ALL_METRICS if m.gpm is not None}
)

# Clock-event ("throttle") reason bits, NVML nvmlClocksEventReason* = DCGM field 112.
CLOCK_EVENT_REASONS: Mapping[int, str] = MappingProxyType(
    {
        0x001: "gpu_idle",
        0x002: "applications_clocks_setting",
        0x004: "sw_power_cap",
        0x008: "hw_slowdown",
        0x010: "sync_boost",
        0x020: "sw_thermal_slowdown",
        0x040: "hw_thermal_slowdown",
        0x080: "hw_power_brake_slowdown",
        0x100: "display_clock_setting",
    }
)
POWER_REASON_BITS = 0x004 | 0x008 | 0x080
THERMAL_REASON_BITS = 0x020 | 0x040


def rate_pairs() -> Mapping[str, str]:
    """Counter metric name → the gauge metric its rate is stored as."""
    return {m.name: m.rate for m in ALL_METRICS if m.rate is not None}


def reason_names(bitmask: int) -> list[str]:
    """The named clock-event reasons set in `bitmask`, lowest bit first."""
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if bitmask & bit]


def metrics_of(kind: Kind) -> tuple[Metric, ...]:
    """The catalog entries of one reading kind, in declaration order."""
    return tuple(m for m in ALL_METRICS if m.kind is kind)


def get(name: str) -> Metric:
    """The catalog entry called `name`; KeyError names the unknown metric."""
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}: not in gpulens.catalog") from None
