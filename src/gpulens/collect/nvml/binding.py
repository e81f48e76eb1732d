"""The NVML binding protocol: the narrow slice of NVML gpulens calls, in NVML's own units.

Two implementations exist: `pynvml_binding.PynvmlBinding` (the only module that imports
nvidia-ml-py) for real GPUs, and `gpulens.collect.simulated.SimulatedBinding` for the simulated
fleet. Everything above this protocol (the collector, the parse, the rates) is the same code
for both, so the demo and the tests exercise the path real GPUs take.

Units are NVML's: percent, mW, mJ, MHz, °C, bytes, KB/s, KiB (NVLink counters), MiB/s (GPM),
microsecond timestamps.
A call a device cannot answer raises `NvmlNotSupported`; a device that fell off the bus raises
`NvmlGpuLost`; anything else raises `NvmlError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class NvmlError(Exception):
    """An NVML call failed; `code` is NVML's return code when known."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


#: NVML return codes → the short name an error count is labelled with (`error_name`)
ERROR_NAMES: dict[int, str] = {
    1: "uninitialized",
    2: "invalid_argument",
    3: "not_supported",
    4: "no_permission",
    6: "not_found",
    7: "insufficient_size",
    8: "insufficient_power",
    9: "driver_not_loaded",
    10: "timeout",
    11: "irq_issue",
    12: "library_not_found",
    13: "function_not_found",
    14: "corrupted_inforom",
    15: "gpu_lost",
    16: "reset_required",
    17: "operating_system",
    18: "lib_rm_version_mismatch",
    19: "in_use",
    20: "memory",
    21: "no_data",
    23: "insufficient_resources",
    999: "unknown",
}


def error_name(exc: Exception) -> str:
    """A short, bounded name for an NVML failure: NVML's return code by name ("timeout",
    "unknown", ...), "other" for a code not named here, "error" when there is no code."""
    code = getattr(exc, "code", None)
    if code is None:
        return "error"
    return ERROR_NAMES.get(code, "other")


class NvmlNotSupported(NvmlError):
    """The device or driver does not support this call (a capability that is off)."""


class NvmlGpuLost(NvmlError):
    """The GPU is no longer reachable (fell off the bus, XID 79...)."""


class NvmlLibraryMissing(NvmlError):
    """libnvidia-ml or the Python bindings cannot be loaded."""


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """Static facts about one device (a whole GPU or a MIG instance), read once."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    memory_total_bytes: int
    power_limit_mw: int | None
    max_sm_clock_mhz: int | None
    max_memory_clock_mhz: int | None
    architecture: str
    compute_capability: tuple[int, int] | None
    mig_mode: bool = False
    parent_uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    mig_profile: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    """nvmlMemory_v2: bytes; `reserved` is None with the v1 API (then `used` includes it)."""

    total: int
    free: int
    used: int
    reserved: int | None = None


@dataclass(frozen=True, slots=True)
class Utilization:
    """nvmlUtilization_t: percent of the last sample period."""

    gpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """A process running on a device (host PID namespace)."""

    pid: int
    used_gpu_memory: int | None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class ProcessUtilSample:
    """nvmlProcessUtilizationSample_t: per-process utilisation in percent at `timestamp_us`."""

    pid: int
    timestamp_us: int
    sm_util: int
    mem_util: int
    enc_util: int = 0
    dec_util: int = 0


@dataclass(frozen=True, slots=True)
class RemappedRows:
    """nvmlDeviceGetRemappedRows: rows remapped so far, and the pending / failure flags."""

    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


@dataclass(frozen=True, slots=True)
class NvlinkCounters:
    """NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX summed over the device's links: KiB counters."""

    tx_kib: int
    rx_kib: int


@dataclass(frozen=True, slots=True)
class XidEvent:
    """An XID (or other critical) event from the event set."""

    device_uuid: str
    xid: int
    timestamp_us: int


class GpmSample(Protocol):
    """An opaque GPM counter sample; metrics are computed between two of them."""


# Clock ids (nvmlClockType_t).
CLOCK_GRAPHICS = 0
CLOCK_SM = 1
CLOCK_MEM = 2

# PCIe counters (nvmlPcieUtilCounter_t).
PCIE_TX = 0
PCIE_RX = 1

# Violation policies (nvmlPerfPolicyType_t).
PERF_POLICY_POWER = 0
PERF_POLICY_THERMAL = 1

# Temperature thresholds (nvmlTemperatureThresholds_t).
TEMPERATURE_THRESHOLD_SHUTDOWN = 0
TEMPERATURE_THRESHOLD_SLOWDOWN = 1

# ECC error types (nvmlMemoryErrorType_t); counts are always the volatile ones.
ECC_CORRECTED = 0
ECC_UNCORRECTED = 1


@runtime_checkable
class NvmlBinding(Protocol):
    """What gpulens asks of NVML. Handles are opaque; devices are addressed by index."""

    # -- library --------------------------------------------------------------------------------
    def init(self) -> None: ...

    def shutdown(self) -> None: ...

    def driver_version(self) -> str: ...

    def nvml_version(self) -> str: ...

    def cuda_driver_version(self) -> int:
        """CUDA driver version as NVML encodes it (12040 = 12.4)."""
        ...

    # -- inventory ------------------------------------------------------------------------------
    def device_count(self) -> int: ...

    def device_info(self, index: int) -> DeviceInfo: ...

    def mig_devices(self, index: int) -> Sequence[DeviceInfo]:
        """The MIG instances of GPU `index` (empty when MIG is off)."""
        ...

    # -- per tick (whole GPUs; MIG instances answer what NVML answers for them) -------------------
    def utilization(self, uuid: str) -> Utilization: ...

    def memory_info(self, uuid: str) -> MemoryInfo: ...

    def power_usage_mw(self, uuid: str) -> int: ...

    def total_energy_mj(self, uuid: str) -> int: ...

    def temperature_c(self, uuid: str) -> int: ...

    def fan_speed_percent(self, uuid: str) -> int: ...

    def clock_mhz(self, uuid: str, clock: int) -> int: ...

    def clocks_event_reasons(self, uuid: str) -> int: ...

    def performance_state(self, uuid: str) -> int: ...

    def encoder_utilization_percent(self, uuid: str) -> int:
        """nvmlDeviceGetEncoderUtilization: NVENC busy percent over its sampling period."""
        ...

    def decoder_utilization_percent(self, uuid: str) -> int:
        """nvmlDeviceGetDecoderUtilization: NVDEC busy percent over its sampling period."""
        ...

    def memory_temperature_c(self, uuid: str) -> int:
        """Field value NVML_FI_DEV_MEMORY_TEMP (HBM); GDDR parts answer 0 or NOT_SUPPORTED."""
        ...

    def temperature_threshold_c(self, uuid: str, threshold: int) -> int:
        """nvmlDeviceGetTemperatureThreshold (TEMPERATURE_THRESHOLD_SLOWDOWN, ...)."""
        ...

    def enforced_power_limit_mw(self, uuid: str) -> int:
        """nvmlDeviceGetEnforcedPowerLimit: the limit after all limiters, read live."""
        ...

    def total_ecc_errors(self, uuid: str, error_type: int) -> int:
        """nvmlDeviceGetTotalEccErrors(error_type, VOLATILE): errors since the driver loaded."""
        ...

    def pcie_replay_counter(self, uuid: str) -> int: ...

    def remapped_rows(self, uuid: str) -> RemappedRows: ...

    def nvlink_throughput_kib(self, uuid: str) -> NvlinkCounters:
        """NVLink data TX/RX KiB counters over all links; NvmlNotSupported without NVLink."""
        ...

    def pcie_throughput_kbps(self, uuid: str, counter: int) -> int: ...

    def violation_time_ns(self, uuid: str, policy: int) -> int: ...

    def compute_processes(self, uuid: str) -> Sequence[ProcessInfo]: ...

    def graphics_processes(self, uuid: str) -> Sequence[ProcessInfo]: ...

    def process_utilization(self, uuid: str, since_us: int) -> Sequence[ProcessUtilSample]:
        """Samples newer than `since_us`; empty when there are none (NVML's NOT_FOUND)."""
        ...

    def xid_events(self) -> Sequence[XidEvent]:
        """Events waiting in the event set, polled with a zero timeout."""
        ...

    # -- GPM (Hopper and newer, whole GPUs and MIG instances) -------------------------------------
    def gpm_supported(self, uuid: str) -> bool: ...

    def gpm_sample(self, uuid: str) -> GpmSample:
        """A GPM sample of a whole GPU, or of a MIG instance (nvmlGpmMigSampleGet on its parent
        with its GPU instance id)."""
        ...

    def gpm_metrics(
        self, first: GpmSample, second: GpmSample, metric_ids: Sequence[int]
    ) -> Mapping[int, float]:
        """GPM metric values between two samples; ids the device cannot give are left out."""
        ...
