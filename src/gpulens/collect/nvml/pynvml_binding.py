"""The real NVML binding: the only module that imports nvidia-ml-py (module `pynvml`).

It implements `NvmlBinding` and translates NVML's errors into the binding's exceptions:
NOT_SUPPORTED / FUNCTION_NOT_FOUND → NvmlNotSupported, GPU_IS_LOST → NvmlGpuLost,
LIBRARY_NOT_FOUND / DRIVER_NOT_LOADED (or no bindings installed) → NvmlLibraryMissing.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from gpulens.collect.nvml.binding import (
    DeviceInfo,
    GpmSample,
    MemoryInfo,
    NvlinkCounters,
    NvmlError,
    NvmlGpuLost,
    NvmlLibraryMissing,
    NvmlNotSupported,
    ProcessInfo,
    ProcessUtilSample,
    RemappedRows,
    Utilization,
    XidEvent,
)

T = TypeVar("T")

_ARCHITECTURES = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada",
    9: "hopper",
    10: "blackwell",
    13: "rubin",
}
_NOT_SUPPORTED = {3, 13}  # NOT_SUPPORTED, FUNCTION_NOT_FOUND
_GPU_LOST = {15}
_LIBRARY = {9, 12}  # DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND
_NO_DATA = {0, 6}  # SUCCESS with nothing to return, NOT_FOUND
_MIG_PROFILE = re.compile(r"(\d+g\.\d+gb(?:\+\w+)?)", re.IGNORECASE)
_XID_EVENT_TYPES = 0x0000000000000008 | 0x0000000000000004  # XID critical | double-bit ECC
_NO_ID = 0xFFFFFFFF  # NVML's "not applicable" GPU/compute instance id, and the all-links scope
# Field ids (nvml.h; the same numbers as pynvml's NVML_FI_* constants).
_FI_MEMORY_TEMP = 82
_FI_NVLINK_LINK_COUNT = 91
_FI_NVLINK_DATA_TX = 138
_FI_NVLINK_DATA_RX = 139
# nvmlValueType_t → the member of the c_nvmlValue_t union that holds the value.
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _load() -> Any:
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise NvmlLibraryMissing(
            "the NVML Python bindings are not installed: pip install nvidia-ml-py"
        ) from exc
    return pynvml


def _translate(exc: Exception, call: str) -> NvmlError:
    """NVML's exception → the binding's exception family, by NVML return code."""
    return _error(getattr(exc, "value", None), f"{call}: {exc}")


def _error(code: int | None, message: str) -> NvmlError:
    """The binding's exception for NVML return `code`."""
    if code in _NOT_SUPPORTED:
        return NvmlNotSupported(message, code)
    if code in _GPU_LOST:
        return NvmlGpuLost(message, code)
    if code in _LIBRARY:
        return NvmlLibraryMissing(
            f"{message}: install the NVIDIA driver (libnvidia-ml.so) on this machine", code
        )
    return NvmlError(message, code)


class PynvmlBinding:
    """NVML through nvidia-ml-py. Devices are addressed by UUID after `init()`."""

    def __init__(self) -> None:
        self._nv = _load()
        self._handles: dict[str, Any] = {}
        self._mig_parent: dict[str, tuple[Any, int]] = {}  # MIG uuid → (parent handle, GI id)
        self._nvlink_request: dict[str, list[tuple[int, int]]] = {}
        self._event_set: Any = None

    # -- error translation --------------------------------------------------------------------
    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except self._nv.NVMLError as exc:
            raise _translate(exc, getattr(fn, "__name__", "nvml")) from None

    def _h(self, uuid: str) -> Any:
        try:
            return self._handles[uuid]
        except KeyError:
            raise NvmlError(f"unknown device {uuid!r}: call device_info() first") from None

    @staticmethod
    def _text(value: str | bytes) -> str:
        return value.decode() if isinstance(value, bytes) else value

    # -- library ------------------------------------------------------------------------------
    def init(self) -> None:
        self._call(self._nv.nvmlInit)

    def shutdown(self) -> None:
        if self._event_set is not None:
            with contextlib.suppress(NvmlError):
                self._call(self._nv.nvmlEventSetFree, self._event_set)
            self._event_set = None
        self._call(self._nv.nvmlShutdown)

    def driver_version(self) -> str:
        return self._text(self._call(self._nv.nvmlSystemGetDriverVersion))

    def nvml_version(self) -> str:
        return self._text(self._call(self._nv.nvmlSystemGetNVMLVersion))

    def cuda_driver_version(self) -> int:
        return int(self._call(self._nv.nvmlSystemGetCudaDriverVersion))

    # -- inventory ----------------------------------------------------------------------------
    def device_count(self) -> int:
        return int(self._call(self._nv.nvmlDeviceGetCount))

    def _optional(self, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return self._call(fn, *args)
        except NvmlNotSupported:
            return None

    def _info(self, handle: Any, index: int, parent: DeviceInfo | None) -> DeviceInfo:
        nv = self._nv
        uuid = self._text(self._call(nv.nvmlDeviceGetUUID, handle))
        self._handles[uuid] = handle
        name = self._text(self._call(nv.nvmlDeviceGetName, handle))
        memory = self._call(nv.nvmlDeviceGetMemoryInfo, handle)
        if parent is not None:
            match = _MIG_PROFILE.search(name)
            gi = self._optional(nv.nvmlDeviceGetGpuInstanceId, handle)
            if gi is not None:
                self._mig_parent[uuid] = (self._h(parent.uuid), int(gi))
            return DeviceInfo(
                index=index,
                uuid=uuid,
                name=name,
                pci_bus_id=parent.pci_bus_id,
                memory_total_bytes=int(memory.total),
                power_limit_mw=None,
                max_sm_clock_mhz=parent.max_sm_clock_mhz,
                max_memory_clock_mhz=parent.max_memory_clock_mhz,
                architecture=parent.architecture,
                compute_capability=parent.compute_capability,
                mig_mode=True,
                parent_uuid=parent.uuid,
                gpu_instance_id=int(gi) if gi is not None else None,
                compute_instance_id=self._optional(nv.nvmlDeviceGetComputeInstanceId, handle),
                mig_profile=match.group(1) if match else None,
            )
        pci = self._call(nv.nvmlDeviceGetPciInfo, handle)
        arch = self._optional(nv.nvmlDeviceGetArchitecture, handle)
        cc = self._optional(nv.nvmlDeviceGetCudaComputeCapability, handle)
        mig = self._optional(nv.nvmlDeviceGetMigMode, handle)
        return DeviceInfo(
            index=index,
            uuid=uuid,
            name=name,
            pci_bus_id=self._text(pci.busId),
            memory_total_bytes=int(memory.total),
            power_limit_mw=self._optional(nv.nvmlDeviceGetEnforcedPowerLimit, handle),
            max_sm_clock_mhz=self._optional(nv.nvmlDeviceGetMaxClockInfo, handle, nv.NVML_CLOCK_SM),
            max_memory_clock_mhz=self._optional(
                nv.nvmlDeviceGetMaxClockInfo, handle, nv.NVML_CLOCK_MEM
            ),
            architecture=_ARCHITECTURES.get(int(arch), "unknown")
            if arch is not None
            else "unknown",
            compute_capability=(int(cc[0]), int(cc[1])) if cc is not None else None,
            mig_mode=bool(mig and mig[0] == 1),
        )

    def device_info(self, index: int) -> DeviceInfo:
        handle = self._call(self._nv.nvmlDeviceGetHandleByIndex, index)
        return self._info(handle, index, None)

    def mig_devices(self, index: int) -> Sequence[DeviceInfo]:
        nv = self._nv
        parent = self.device_info(index)
        if not parent.mig_mode:
            return []
        handle = self._h(parent.uuid)
        count = self._optional(nv.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
        out = []
        for i in range(int(count)):
            try:
                mig = self._call(nv.nvmlDeviceGetMigDeviceHandleByIndex, handle, i)
            except NvmlError:
                continue  # an empty slot
            out.append(self._info(mig, i, parent))
        return out

    # -- per tick -----------------------------------------------------------------------------
    def utilization(self, uuid: str) -> Utilization:
        u = self._call(self._nv.nvmlDeviceGetUtilizationRates, self._h(uuid))
        return Utilization(gpu=int(u.gpu), memory=int(u.memory))

    def memory_info(self, uuid: str) -> MemoryInfo:
        nv = self._nv
        handle = self._h(uuid)
        try:
            m = self._call(nv.nvmlDeviceGetMemoryInfo, handle, nv.nvmlMemory_v2)
            return MemoryInfo(int(m.total), int(m.free), int(m.used), int(m.reserved))
        except NvmlNotSupported:
            m = self._call(nv.nvmlDeviceGetMemoryInfo, handle)
            return MemoryInfo(int(m.total), int(m.free), int(m.used), None)

    def power_usage_mw(self, uuid: str) -> int:
        return int(self._call(self._nv.nvmlDeviceGetPowerUsage, self._h(uuid)))

    def total_energy_mj(self, uuid: str) -> int:
        return int(self._call(self._nv.nvmlDeviceGetTotalEnergyConsumption, self._h(uuid)))

    def temperature_c(self, uuid: str) -> int:
        nv = self._nv
        return int(self._call(nv.nvmlDeviceGetTemperature, self._h(uuid), nv.NVML_TEMPERATURE_GPU))

    def fan_speed_percent(self, uuid: str) -> int:
        return int(self._call(self._nv.nvmlDeviceGetFanSpeed, self._h(uuid)))

    def clock_mhz(self, uuid: str, clock: int) -> int:
        return int(self._call(self._nv.nvmlDeviceGetClockInfo, self._h(uuid), clock))

    def clocks_event_reasons(self, uuid: str) -> int:
        nv = self._nv
        fn = (
            getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        return int(self._call(fn, self._h(uuid)))

    def performance_state(self, uuid: str) -> int:
        return int(self._call(self._nv.nvmlDeviceGetPerformanceState, self._h(uuid)))

    def pcie_throughput_kbps(self, uuid: str, counter: int) -> int:
        return int(self._call(self._nv.nvmlDeviceGetPcieThroughput, self._h(uuid), counter))

    def encoder_utilization_percent(self, uuid: str) -> int:
        util, _period_us = self._call(self._nv.nvmlDeviceGetEncoderUtilization, self._h(uuid))
        return int(util)

    def decoder_utilization_percent(self, uuid: str) -> int:
        util, _period_us = self._call(self._nv.nvmlDeviceGetDecoderUtilization, self._h(uuid))
        return int(util)

    def _fields(self, uuid: str, request: Sequence[tuple[int, int]]) -> list[float | NvmlError]:
        """nvmlDeviceGetFieldValues: per (field id, scope id), the value or that field's error."""
        values = self._call(self._nv.nvmlDeviceGetFieldValues, self._h(uuid), list(request))
        out: list[float | NvmlError] = []
        for i, (field_id, scope) in enumerate(request):
            fv = values[i]
            code = int(fv.nvmlReturn)
            if code != 0:
                out.append(_error(code, f"field {field_id} (scope {scope}): NVML error {code}"))
                continue
            kind = int(fv.valueType)
            member = _VALUE_MEMBERS[kind] if 0 <= kind < len(_VALUE_MEMBERS) else "ullVal"
            out.append(float(getattr(fv.value, member)))
        return out

    def memory_temperature_c(self, uuid: str) -> int:
        (value,) = self._fields(uuid, [(_FI_MEMORY_TEMP, 0)])
        if isinstance(value, NvmlError):
            raise value
        return int(value)

    def temperature_threshold_c(self, uuid: str, threshold: int) -> int:
        fn = self._nv.nvmlDeviceGetTemperatureThreshold
        return int(self._call(fn, self._h(uuid), threshold))

    def enforced_power_limit_mw(self, uuid: str) -> int:
        return int(self._call(self._nv.nvmlDeviceGetEnforcedPowerLimit, self._h(uuid)))

    def total_ecc_errors(self, uuid: str, error_type: int) -> int:
        nv = self._nv
        fn = nv.nvmlDeviceGetTotalEccErrors
        return int(self._call(fn, self._h(uuid), error_type, nv.NVML_VOLATILE_ECC))

    def pcie_replay_counter(self, uuid: str) -> int:
        return int(self._call(self._nv.nvmlDeviceGetPcieReplayCounter, self._h(uuid)))

    def remapped_rows(self, uuid: str) -> RemappedRows:
        corr, unc, pending, failure = self._call(self._nv.nvmlDeviceGetRemappedRows, self._h(uuid))
        return RemappedRows(int(corr), int(unc), bool(pending), bool(failure))

    def _nvlink_plan(self, uuid: str) -> list[tuple[int, int]]:
        """Field requests for the NVLink data counters: one TX and one RX per link when the link
        count is known, else the aggregate scope (UINT_MAX sums every link)."""
        plan = self._nvlink_request.get(uuid)
        if plan is not None:
            return plan
        (count,) = self._fields(uuid, [(_FI_NVLINK_LINK_COUNT, 0)])
        links = [_NO_ID]
        if not isinstance(count, NvmlError) and count > 0:
            links = list(range(int(count)))
        plan = [(f, link) for link in links for f in (_FI_NVLINK_DATA_TX, _FI_NVLINK_DATA_RX)]
        self._nvlink_request[uuid] = plan
        return plan

    def nvlink_throughput_kib(self, uuid: str) -> NvlinkCounters:
        plan = self._nvlink_plan(uuid)
        totals = {_FI_NVLINK_DATA_TX: 0.0, _FI_NVLINK_DATA_RX: 0.0}
        answered = set()
        first_error: NvmlError | None = None
        for (field_id, _link), value in zip(plan, self._fields(uuid, plan), strict=True):
            if isinstance(value, NvmlError):
                first_error = first_error or value
                continue  # an inactive link
            totals[field_id] += value
            answered.add(field_id)
        if len(answered) < 2:
            raise first_error or NvmlNotSupported(f"{uuid}: no NVLink throughput counters", 3)
        return NvlinkCounters(int(totals[_FI_NVLINK_DATA_TX]), int(totals[_FI_NVLINK_DATA_RX]))

    def violation_time_ns(self, uuid: str, policy: int) -> int:
        v = self._call(self._nv.nvmlDeviceGetViolationStatus, self._h(uuid), policy)
        return int(v.violationTime)

    def compute_processes(self, uuid: str) -> Sequence[ProcessInfo]:
        return _processes(self._call(self._nv.nvmlDeviceGetComputeRunningProcesses, self._h(uuid)))

    def graphics_processes(self, uuid: str) -> Sequence[ProcessInfo]:
        fn = self._nv.nvmlDeviceGetGraphicsRunningProcesses
        return _processes(self._call(fn, self._h(uuid)))

    def process_utilization(self, uuid: str, since_us: int) -> Sequence[ProcessUtilSample]:
        try:
            samples = self._nv.nvmlDeviceGetProcessUtilization(self._h(uuid), since_us)
        except self._nv.NVMLError as exc:
            if getattr(exc, "value", None) in _NO_DATA:
                return []
            raise _translate(exc, "nvmlDeviceGetProcessUtilization") from None
        return [
            ProcessUtilSample(
                pid=int(s.pid),
                timestamp_us=int(s.timeStamp),
                sm_util=int(s.smUtil),
                mem_util=int(s.memUtil),
                enc_util=int(s.encUtil),
                dec_util=int(s.decUtil),
            )
            for s in samples
        ]

    def xid_events(self) -> Sequence[XidEvent]:
        nv = self._nv
        if self._event_set is None:
            self._event_set = self._call(nv.nvmlEventSetCreate)
            for handle in self._handles.values():
                try:
                    self._call(
                        nv.nvmlDeviceRegisterEvents, handle, _XID_EVENT_TYPES, self._event_set
                    )
                except NvmlError:
                    continue  # MIG handles and some boards cannot register events
        events: list[XidEvent] = []
        while True:
            try:
                data = nv.nvmlEventSetWait_v2(self._event_set, 0)
            except nv.NVMLError:
                return events  # TIMEOUT: nothing waiting
            uuid = self._text(self._call(nv.nvmlDeviceGetUUID, data.device))
            events.append(XidEvent(device_uuid=uuid, xid=int(data.eventData), timestamp_us=0))

    # -- GPM ----------------------------------------------------------------------------------
    def gpm_supported(self, uuid: str) -> bool:
        mig = self._mig_of(uuid)
        handle = mig[0] if mig is not None else self._h(uuid)  # GPM support is the parent's
        try:
            support = self._call(self._nv.nvmlGpmQueryDeviceSupport, handle)
        except NvmlNotSupported:
            return False
        return bool(support.isSupportedDevice)

    def gpm_sample(self, uuid: str) -> GpmSample:
        nv = self._nv
        handle = self._h(uuid)
        mig = self._mig_of(uuid)
        sample = self._call(nv.nvmlGpmSampleAlloc)
        try:
            if mig is None:
                self._call(nv.nvmlGpmSampleGet, handle, sample)
            else:
                parent, gi = mig  # a MIG sample: the parent's handle and the GPU instance id
                self._call(nv.nvmlGpmMigSampleGet, parent, gi, sample)
        except NvmlError:
            self._call(nv.nvmlGpmSampleFree, sample)
            raise
        return _OwnedSample(sample, lambda: self._call(nv.nvmlGpmSampleFree, sample))

    def _mig_of(self, uuid: str) -> tuple[Any, int] | None:
        """(parent handle, GPU instance id) of a MIG instance, None for a whole GPU; cached."""
        found = self._mig_parent.get(uuid)
        if found is not None:
            return found
        nv = self._nv
        handle = self._h(uuid)
        try:
            if not self._call(nv.nvmlDeviceIsMigDeviceHandle, handle):
                return None
            parent = self._call(nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, handle)
            gi = int(self._call(nv.nvmlDeviceGetGpuInstanceId, handle))
        except NvmlNotSupported:
            return None
        self._mig_parent[uuid] = (parent, gi)
        return parent, gi

    def gpm_metrics(
        self, first: GpmSample, second: GpmSample, metric_ids: Sequence[int]
    ) -> Mapping[int, float]:
        nv = self._nv
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(metric_ids)
        request.sample1 = first.handle  # type: ignore[attr-defined]
        request.sample2 = second.handle  # type: ignore[attr-defined]
        for i, metric_id in enumerate(metric_ids):
            request.metrics[i].metricId = metric_id
        self._call(nv.nvmlGpmMetricsGet, request)
        out: dict[int, float] = {}
        for i, metric_id in enumerate(metric_ids):
            metric = request.metrics[i]
            if metric.nvmlReturn == nv.NVML_SUCCESS:
                out[metric_id] = float(metric.value)
        return out


def _processes(procs: Sequence[Any]) -> list[ProcessInfo]:
    """nvmlProcessInfo_v3 objects → ProcessInfo (usedGpuMemory None = not available)."""
    out = []
    for p in procs:
        used = getattr(p, "usedGpuMemory", None)
        gi = getattr(p, "gpuInstanceId", None)
        ci = getattr(p, "computeInstanceId", None)
        out.append(
            ProcessInfo(
                pid=int(p.pid),
                used_gpu_memory=int(used) if used is not None else None,
                gpu_instance_id=int(gi) if gi is not None and gi != _NO_ID else None,
                compute_instance_id=int(ci) if ci is not None and ci != _NO_ID else None,
            )
        )
    return out


class _OwnedSample:
    """A GPM sample that frees its NVML buffer when garbage-collected."""

    def __init__(self, handle: Any, free: Callable[[], object]) -> None:
        self.handle = handle
        self._free = free

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._free()
