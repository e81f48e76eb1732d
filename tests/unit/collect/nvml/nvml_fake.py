"""A tiny in-test NVML binding for the error and MIG paths the simulated fleet does not produce.

Every per-tick call answers a fixed plausible value unless `fail[(uuid, method)]` (or
`fail[("*", method)]`) names an exception to raise. Calls are counted in `calls`.

MIG instances (the devices in `migs`) answer like NVML does for a MIG handle: memory,
processes and GPM (sampled through the parent with the GPU instance id, recorded in
`mig_samples`); every other per-tick call raises NvmlNotSupported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpulens.collect.nvml.binding import (
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

# What NVML answers for a MIG device handle; the rest is NOT_SUPPORTED there.
MIG_ANSWERS = frozenset({"memory_info", "compute_processes", "graphics_processes", "gpm_sample"})
GPU_GPM = {2: 55.0, 5: 14.0, 10: 30.0, 20: 100.0, 21: 200.0}
MIG_GPM = {1: 60.0, 2: 40.0, 5: 20.0}  # per GPU instance: no PCIe / NVLink rates


def info(index: int, *, arch: str = "hopper", **kw: object) -> DeviceInfo:
    fields: dict[str, object] = {
        "index": index,
        "uuid": f"GPU-{index:04d}",
        "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": f"0000:{index:02x}:00.0",
        "memory_total_bytes": 80 * 2**30,
        "power_limit_mw": 700_000,
        "max_sm_clock_mhz": 1980,
        "max_memory_clock_mhz": 2619,
        "architecture": arch,
        "compute_capability": (9, 0),
    }
    fields.update(kw)
    return DeviceInfo(**fields)  # type: ignore[arg-type]


@dataclass
class _Sample:
    n: int
    uuid: str = ""


@dataclass
class FakeBinding:
    devices: list[DeviceInfo] = field(default_factory=lambda: [info(0), info(1)])
    migs: dict[int, list[DeviceInfo]] = field(default_factory=dict)
    fail: dict[tuple[str, str], NvmlError] = field(default_factory=dict)
    init_error: NvmlError | None = None
    processes: dict[str, list[ProcessInfo]] = field(default_factory=dict)
    graphics: dict[str, list[ProcessInfo]] = field(default_factory=dict)
    samples: dict[str, list[ProcessUtilSample]] = field(default_factory=dict)
    xids: list[XidEvent] = field(default_factory=list)
    power_mw: int = 350_000
    power_limit_mw: int = 700_000
    nvlink_kib: tuple[int, int] = (1_000, 2_000)
    mig_samples: list[tuple[str, int]] = field(default_factory=list)
    gpm: bool = True
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    since: list[tuple[str, int]] = field(default_factory=list)
    driver: str = "550.54.15"
    shutdowns: int = 0
    _n: int = 0

    def _call(self, uuid: str, method: str) -> None:
        self.calls[(uuid, method)] += 1
        exc = self.fail.get((uuid, method)) or self.fail.get(("*", method))
        if exc is not None:
            raise exc
        if method not in MIG_ANSWERS and self._mig(uuid) is not None:
            raise NvmlNotSupported(f"{method} is not supported on MIG device {uuid}", 3)

    def _mig(self, uuid: str) -> DeviceInfo | None:
        for migs in self.migs.values():
            for m in migs:
                if m.uuid == uuid:
                    return m
        return None

    # library
    def init(self) -> None:
        if self.init_error is not None:
            raise self.init_error

    def shutdown(self) -> None:
        self.shutdowns += 1

    def driver_version(self) -> str:
        return self.driver

    def nvml_version(self) -> str:
        return "12.550.54.15"

    def cuda_driver_version(self) -> int:
        return 12040

    # inventory
    def device_count(self) -> int:
        return len(self.devices)

    def device_info(self, index: int) -> DeviceInfo:
        return self.devices[index]

    def mig_devices(self, index: int) -> Sequence[DeviceInfo]:
        return self.migs.get(index, [])

    # per tick
    def utilization(self, uuid: str) -> Utilization:
        self._call(uuid, "utilization")
        return Utilization(gpu=97, memory=40)

    def memory_info(self, uuid: str) -> MemoryInfo:
        self._call(uuid, "memory_info")
        return MemoryInfo(total=80 * 2**30, free=10 * 2**30, used=69 * 2**30, reserved=2**30)

    def power_usage_mw(self, uuid: str) -> int:
        self._call(uuid, "power_usage_mw")
        return self.power_mw

    def total_energy_mj(self, uuid: str) -> int:
        self._call(uuid, "total_energy_mj")
        return 1_000_000

    def temperature_c(self, uuid: str) -> int:
        self._call(uuid, "temperature_c")
        return 61

    def fan_speed_percent(self, uuid: str) -> int:
        self._call(uuid, "fan_speed_percent")
        return 35

    def clock_mhz(self, uuid: str, clock: int) -> int:
        self._call(uuid, "clock_mhz")
        return 1755

    def clocks_event_reasons(self, uuid: str) -> int:
        self._call(uuid, "clocks_event_reasons")
        return 0x004

    def performance_state(self, uuid: str) -> int:
        self._call(uuid, "performance_state")
        return 0

    def pcie_throughput_kbps(self, uuid: str, counter: int) -> int:
        self._call(uuid, "pcie_throughput_kbps")
        return 1000

    def encoder_utilization_percent(self, uuid: str) -> int:
        self._call(uuid, "encoder_utilization_percent")
        return 67

    def decoder_utilization_percent(self, uuid: str) -> int:
        self._call(uuid, "decoder_utilization_percent")
        return 5

    def memory_temperature_c(self, uuid: str) -> int:
        self._call(uuid, "memory_temperature_c")
        return 70

    def temperature_threshold_c(self, uuid: str, threshold: int) -> int:
        self._call(uuid, "temperature_threshold_c")
        return 87

    def enforced_power_limit_mw(self, uuid: str) -> int:
        self._call(uuid, "enforced_power_limit_mw")
        return self.power_limit_mw

    def total_ecc_errors(self, uuid: str, error_type: int) -> int:
        self._call(uuid, "total_ecc_errors")
        return 3 if error_type == 0 else 0

    def pcie_replay_counter(self, uuid: str) -> int:
        self._call(uuid, "pcie_replay_counter")
        return 12

    def remapped_rows(self, uuid: str) -> RemappedRows:
        self._call(uuid, "remapped_rows")
        return RemappedRows(correctable=2, uncorrectable=0, pending=True, failure=False)

    def nvlink_throughput_kib(self, uuid: str) -> NvlinkCounters:
        self._call(uuid, "nvlink_throughput_kib")
        return NvlinkCounters(*self.nvlink_kib)

    def violation_time_ns(self, uuid: str, policy: int) -> int:
        self._call(uuid, "violation_time_ns")
        return 5_000_000_000

    def compute_processes(self, uuid: str) -> Sequence[ProcessInfo]:
        self._call(uuid, "compute_processes")
        return self.processes.get(uuid, [])

    def graphics_processes(self, uuid: str) -> Sequence[ProcessInfo]:
        self._call(uuid, "graphics_processes")
        return self.graphics.get(uuid, [])

    def process_utilization(self, uuid: str, since_us: int) -> Sequence[ProcessUtilSample]:
        self._call(uuid, "process_utilization")
        self.since.append((uuid, since_us))
        return [s for s in self.samples.get(uuid, []) if s.timestamp_us > since_us]

    def xid_events(self) -> Sequence[XidEvent]:
        self._call("*", "xid_events")
        out, self.xids = self.xids, []
        return out

    # GPM
    def gpm_supported(self, uuid: str) -> bool:
        return self.gpm

    def gpm_sample(self, uuid: str) -> GpmSample:
        self._call(uuid, "gpm_sample")
        mig = self._mig(uuid)
        if mig is not None:  # nvmlGpmMigSampleGet(parent, gpu_instance_id, sample)
            assert mig.parent_uuid is not None and mig.gpu_instance_id is not None
            self.mig_samples.append((mig.parent_uuid, mig.gpu_instance_id))
        self._n += 1
        return _Sample(self._n, uuid)

    def gpm_metrics(
        self, first: GpmSample, second: GpmSample, metric_ids: Sequence[int]
    ) -> Mapping[int, float]:
        self._call("*", "gpm_metrics")
        assert isinstance(first, _Sample) and isinstance(second, _Sample)
        assert first.uuid == second.uuid and first.n < second.n
        return dict(MIG_GPM if self._mig(first.uuid) is not None else GPU_GPM)
