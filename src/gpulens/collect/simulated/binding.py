"""SimulatedBinding: the NVML binding protocol answered by the simulated GPUs of one host.

Every call answers for `clock.now_ns()` in NVML's units. Like NVML it must be initialised
first, addresses devices by UUID, has no fan and no video encoder on an H100 SXM board
(NvmlNotSupported) and computes GPM metrics between two samples, here analytically over the
samples' window. Health counters (ECC, PCIe replays, remapped rows) stay at a real 0; NVLink
data counters integrate the simulated NVLink traffic; there are no graphics processes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpulens.clock import Clock
from gpulens.collect.nvml.binding import (
    CLOCK_GRAPHICS,
    CLOCK_MEM,
    CLOCK_SM,
    PCIE_RX,
    PCIE_TX,
    PERF_POLICY_POWER,
    PERF_POLICY_THERMAL,
    TEMPERATURE_THRESHOLD_SHUTDOWN,
    TEMPERATURE_THRESHOLD_SLOWDOWN,
    DeviceInfo,
    GpmSample,
    MemoryInfo,
    NvlinkCounters,
    NvmlError,
    NvmlNotSupported,
    ProcessInfo,
    ProcessUtilSample,
    RemappedRows,
    Utilization,
    XidEvent,
)
from gpulens.collect.simulated import phases as col
from gpulens.collect.simulated.gpu import WINDOW_NS, SimGpu
from gpulens.collect.simulated.phases import Row

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_FOUND = 6
SHUTDOWN_ABOVE_SLOWDOWN_C = 5
_MIB = 1024 * 1024

# GPM metric id → (phase column, scale to NVML's unit: percent or MiB/s).
GPM_COLUMNS: Mapping[int, tuple[int, float]] = {
    1: (col.DUTY, 100.0),
    2: (col.SM, 100.0),
    3: (col.OCC, 100.0),
    4: (col.INT, 100.0),
    5: (col.TENSOR, 100.0),
    6: (col.DFMA, 100.0),
    7: (col.HMMA, 100.0),
    8: (col.DMMA, 100.0),
    9: (col.IMMA, 100.0),
    10: (col.DRAM, 100.0),
    11: (col.FP64, 100.0),
    12: (col.FP32, 100.0),
    13: (col.FP16, 100.0),
    20: (col.PCIE_TX, 1 / _MIB),
    21: (col.PCIE_RX, 1 / _MIB),
    60: (col.NVL_RX, 1 / _MIB),
    61: (col.NVL_TX, 1 / _MIB),
}


@dataclass(frozen=True, slots=True)
class SimGpmSample(GpmSample):
    """A GPM sample: which device, and when."""

    uuid: str
    t_ns: int


class SimulatedBinding:
    """Implements `gpulens.collect.nvml.binding.NvmlBinding` for one simulated host."""

    def __init__(self, gpus: Sequence[SimGpu], clock: Clock, driver: str, gpm: bool = True):
        self._gpus = list(gpus)
        self._by_uuid = {g.uuid: g for g in gpus}
        self._clock = clock
        self._driver = driver
        self._gpm = gpm
        self._inits = 0

    # -- library --------------------------------------------------------------------------------
    def init(self) -> None:
        self._inits += 1

    def shutdown(self) -> None:
        self._require()
        self._inits -= 1

    def driver_version(self) -> str:
        self._require()
        return self._driver

    def nvml_version(self) -> str:
        self._require()
        return "12.550.90.07"

    def cuda_driver_version(self) -> int:
        self._require()
        return 12040

    def _require(self) -> None:
        if self._inits <= 0:
            raise NvmlError("NVML is not initialised: call init() first", NVML_ERROR_UNINITIALIZED)

    def _gpu(self, uuid: str) -> SimGpu:
        if self._inits <= 0:
            self._require()
        try:
            return self._by_uuid[uuid]
        except KeyError:
            raise NvmlError(f"no device with UUID {uuid!r}", NVML_ERROR_NOT_FOUND) from None

    # -- inventory ------------------------------------------------------------------------------
    def device_count(self) -> int:
        self._require()
        return len(self._gpus)

    def device_info(self, index: int) -> DeviceInfo:
        self._require()
        if not 0 <= index < len(self._gpus):
            raise NvmlError(
                f"device index {index} out of range 0..{len(self._gpus) - 1}",
                NVML_ERROR_INVALID_ARGUMENT,
            )
        return self._gpus[index].info

    def mig_devices(self, index: int) -> Sequence[DeviceInfo]:
        self.device_info(index)
        return []

    # -- per tick ---------------------------------------------------------------------------------
    def utilization(self, uuid: str) -> Utilization:
        gpu, memory = self._gpu(uuid).utilization(self._clock.now_ns())
        return Utilization(gpu, memory)

    def memory_info(self, uuid: str) -> MemoryInfo:
        g = self._gpu(uuid)
        used = g.memory_used(self._clock.now_ns())
        total, reserved = g.info.memory_total_bytes, g.model.device.memory_reserved_bytes
        return MemoryInfo(total, total - reserved - used, used, reserved)

    def power_usage_mw(self, uuid: str) -> int:
        return self._gpu(uuid).power_mw(self._clock.now_ns())

    def total_energy_mj(self, uuid: str) -> int:
        return self._gpu(uuid).energy_mj(self._clock.now_ns())

    def temperature_c(self, uuid: str) -> int:
        return self._gpu(uuid).temperature_c(self._clock.now_ns())

    def fan_speed_percent(self, uuid: str) -> int:
        self._gpu(uuid)
        raise NvmlNotSupported("an H100 SXM board has no fan", 3)

    def clock_mhz(self, uuid: str, clock: int) -> int:
        g = self._gpu(uuid)
        if clock == CLOCK_MEM:
            return g.model.device.max_mem_clock_mhz
        if clock in (CLOCK_GRAPHICS, CLOCK_SM):
            return g.sm_clock_mhz(self._clock.now_ns())
        raise NvmlNotSupported(f"clock type {clock} is not simulated", 3)

    def clocks_event_reasons(self, uuid: str) -> int:
        return self._gpu(uuid).reasons(self._clock.now_ns())

    def performance_state(self, uuid: str) -> int:
        return self._gpu(uuid).pstate(self._clock.now_ns())

    def pcie_throughput_kbps(self, uuid: str, counter: int) -> int:
        g = self._gpu(uuid)
        if counter not in (PCIE_TX, PCIE_RX):
            raise NvmlError(f"unknown PCIe counter {counter}", NVML_ERROR_INVALID_ARGUMENT)
        column = col.PCIE_TX if counter == PCIE_TX else col.PCIE_RX
        return int(float(g.snap(self._clock.now_ns()).mean[column]) / 1024)

    def encoder_utilization_percent(self, uuid: str) -> int:
        self._gpu(uuid)
        raise NvmlNotSupported("an H100 has no NVENC video encoder", 3)

    def decoder_utilization_percent(self, uuid: str) -> int:
        self._gpu(uuid)
        return 0  # NVDEC is there; no simulated workload decodes video

    def memory_temperature_c(self, uuid: str) -> int:
        return self._gpu(uuid).memory_temperature_c(self._clock.now_ns())

    def temperature_threshold_c(self, uuid: str, threshold: int) -> int:
        slowdown = self._gpu(uuid).model.device.slowdown_temp_c
        if threshold == TEMPERATURE_THRESHOLD_SLOWDOWN:
            return round(slowdown)
        if threshold == TEMPERATURE_THRESHOLD_SHUTDOWN:
            return round(slowdown) + SHUTDOWN_ABOVE_SLOWDOWN_C
        raise NvmlNotSupported(f"temperature threshold {threshold} is not simulated", 3)

    def enforced_power_limit_mw(self, uuid: str) -> int:
        return round(self._gpu(uuid).model.device.power_limit_w * 1000)

    def total_ecc_errors(self, uuid: str, error_type: int) -> int:
        self._gpu(uuid)
        return 0

    def pcie_replay_counter(self, uuid: str) -> int:
        self._gpu(uuid)
        return 0

    def remapped_rows(self, uuid: str) -> RemappedRows:
        self._gpu(uuid)
        return RemappedRows(0, 0, pending=False, failure=False)

    def nvlink_throughput_kib(self, uuid: str) -> NvlinkCounters:
        tx, rx = self._gpu(uuid).nvlink_kib(self._clock.now_ns())
        return NvlinkCounters(tx, rx)

    def violation_time_ns(self, uuid: str, policy: int) -> int:
        g = self._gpu(uuid)
        if policy not in (PERF_POLICY_POWER, PERF_POLICY_THERMAL):
            raise NvmlNotSupported(f"violation policy {policy} is not simulated", 3)
        return g.violation_ns(self._clock.now_ns(), thermal=policy == PERF_POLICY_THERMAL)

    def compute_processes(self, uuid: str) -> Sequence[ProcessInfo]:
        g = self._gpu(uuid)
        now = self._clock.now_ns()
        pid = g.pid(now)
        if pid is None or g.job is None:
            return []
        return [ProcessInfo(pid, g.memory_used(now), name=g.job.spec.process_name)]

    def graphics_processes(self, uuid: str) -> Sequence[ProcessInfo]:
        self._gpu(uuid)
        return []

    def process_utilization(self, uuid: str, since_us: int) -> Sequence[ProcessUtilSample]:
        g = self._gpu(uuid)
        now = self._clock.now_ns()
        pid = g.pid(now)
        start = since_us * 1000 if since_us > 0 else now - WINDOW_NS
        start = max(start, now - 10 * WINDOW_NS)
        if pid is None or start >= now:
            return []
        mean = g.snap(now).mean if now - start == WINDOW_NS else g.model.window(start, now)
        sm, mem = round(100 * float(mean[col.DUTY])), round(100 * float(mean[col.COPY]))
        if sm == 0 and mem == 0:
            return []
        return [ProcessUtilSample(pid, now // 1000, sm, mem)]

    def xid_events(self) -> Sequence[XidEvent]:
        self._require()
        return []

    # -- GPM --------------------------------------------------------------------------------------
    def gpm_supported(self, uuid: str) -> bool:
        self._gpu(uuid)
        return self._gpm

    def gpm_sample(self, uuid: str) -> GpmSample:
        self._gpu(uuid)
        if not self._gpm:
            raise NvmlNotSupported("GPM is switched off in this simulated fleet", 3)
        return SimGpmSample(uuid, self._clock.now_ns())

    def gpm_metrics(
        self, first: GpmSample, second: GpmSample, metric_ids: Sequence[int]
    ) -> Mapping[int, float]:
        if not isinstance(first, SimGpmSample) or not isinstance(second, SimGpmSample):
            raise NvmlError("GPM samples must come from this binding", NVML_ERROR_INVALID_ARGUMENT)
        if first.uuid != second.uuid or second.t_ns <= first.t_ns:
            raise NvmlError(
                f"GPM samples must be of one device and in time order, got {first} and {second}",
                NVML_ERROR_INVALID_ARGUMENT,
            )
        return gpm_values(self._gpu(first.uuid), first.t_ns, second.t_ns, metric_ids)


_GPM_PLANS: dict[tuple[int, ...], tuple[list[int], npt.NDArray[np.intp], Row]] = {}


def gpm_values(gpu: SimGpu, t0_ns: int, t1_ns: int, ids: Sequence[int]) -> dict[int, float]:
    """GPM metrics of `gpu` over [t0, t1] in NVML's units; unknown ids are left out."""
    key = tuple(ids)
    plan = _GPM_PLANS.get(key)
    if plan is None:
        known = [m for m in key if m in GPM_COLUMNS]
        columns = np.array([GPM_COLUMNS[m][0] for m in known], dtype=np.intp)
        scales = np.array([GPM_COLUMNS[m][1] for m in known], dtype=np.float64)
        plan = _GPM_PLANS[key] = (known, columns, scales)
    known, columns, scales = plan
    mean = gpu.snap(t1_ns).mean if t1_ns - t0_ns == WINDOW_NS else gpu.model.window(t0_ns, t1_ns)
    return dict(zip(known, (mean[columns] * scales).tolist(), strict=True))
