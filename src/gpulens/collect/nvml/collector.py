"""NvmlCollector: GPU, MIG and per-process readings from an NVML binding (real or simulated).

Inventory and capability set-up happen once; each tick walks a prepared list of readers per
device. A call that raises `NvmlNotSupported` switches that capability off for the device for
good (its metrics stay absent, never 0). `NvmlGpuLost` emits one event and retires the device.
Any other `NvmlError` leaves that call's metrics out of this tick and is counted in `errors`.

Process identity is asked every tick (the resolver caches per pid and start time, so a reused
PID gets the new process's labels); when the resolver also has `jobs_for_gpu`, GPU readings
and process readings without a `job_id` get the batch job(s) holding the GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType
from typing import Any

from gpulens import units
from gpulens.collect.nvml import parse
from gpulens.collect.nvml.binding import (
    CLOCK_MEM,
    CLOCK_SM,
    ECC_CORRECTED,
    ECC_UNCORRECTED,
    PCIE_RX,
    PCIE_TX,
    PERF_POLICY_POWER,
    PERF_POLICY_THERMAL,
    TEMPERATURE_THRESHOLD_SLOWDOWN,
    DeviceInfo,
    GpmSample,
    NvmlBinding,
    NvmlError,
    NvmlGpuLost,
    NvmlLibraryMissing,
    NvmlNotSupported,
    ProcessInfo,
    ProcessUtilSample,
    error_name,
)
from gpulens.collect.procs.identity import NoIdentity, ProcessIdentity
from gpulens.errors import CollectError, SourceUnavailable
from gpulens.model import FrozenLabels, Kind, Reading

_NO_IDENTITY: Mapping[str, str] = MappingProxyType({})
_INSTALL_HINT = (
    "install an NVIDIA driver (it provides libnvidia-ml.so) and the Python bindings with "
    "`pip install nvidia-ml-py`, or run with the simulated fleet"
)

Values = dict[str, float]
Reader = Callable[[Values], None]
Convert = Callable[[Any], "float | None"]

# Single-value calls: capability, metric, binding method, extra argument, parse function.
_SCALAR_READS: tuple[tuple[str, str, str, int | None, Convert], ...] = (
    ("power", "power_watts", "power_usage_mw", None, parse.power_watts),
    ("energy_counter", "energy_joules", "total_energy_mj", None, parse.energy_joules),
    ("temperature", "temperature_celsius", "temperature_c", None, parse.temperature_celsius),
    ("fan", "fan_speed_ratio", "fan_speed_percent", None, parse.fan_speed_ratio),
    ("sm_clock", "sm_clock_hertz", "clock_mhz", CLOCK_SM, parse.clock_hertz),
    ("memory_clock", "memory_clock_hertz", "clock_mhz", CLOCK_MEM, parse.clock_hertz),
    ("pstate", "pstate", "performance_state", None, parse.pstate),
    ("power_violation", "power_violation_seconds_total", "violation_time_ns", PERF_POLICY_POWER,
     parse.violation_seconds),
    ("thermal_violation", "thermal_violation_seconds_total", "violation_time_ns",
     PERF_POLICY_THERMAL, parse.violation_seconds),
    ("encoder", "enc_util_ratio", "encoder_utilization_percent", None, parse.util_ratio),
    ("decoder", "dec_util_ratio", "decoder_utilization_percent", None, parse.util_ratio),
    ("memory_temperature", "memory_temperature_celsius", "memory_temperature_c", None,
     parse.memory_temperature_celsius),
    ("power_limit", "power_limit_watts", "enforced_power_limit_mw", None, parse.power_limit_watts),
    ("ecc_corrected", "ecc_sbe_volatile_total", "total_ecc_errors", ECC_CORRECTED,
     parse.count_total),
    ("ecc_uncorrected", "ecc_dbe_volatile_total", "total_ecc_errors", ECC_UNCORRECTED,
     parse.count_total),
    ("pcie_replay", "pcie_replay_total", "pcie_replay_counter", None, parse.count_total),
)  # fmt: skip

# Process label cache entry: (what the resolver returned, job from the GPU, labels built).
_ProcEntry = tuple[Mapping[str, str], str, FrozenLabels]


@dataclass(slots=True, eq=False)
class _Device:
    """What the collector keeps per device between ticks."""

    info: DeviceInfo
    labels: Mapping[str, str]
    static: Values
    caps: dict[str, bool]
    readers: list[tuple[str, Reader]] = field(default_factory=list)
    has_mig_children: bool = False
    lost: bool = False
    gpm_prev: GpmSample | None = None
    proc_since_us: int = 0
    proc_labels: dict[int, _ProcEntry] = field(default_factory=dict)
    job_file: str | None = None  # the hpc job mapping file name: "0", or "0.1" for a MIG GI
    job: str = ""
    job_labels: Mapping[str, str] | None = None
    energy_j: float | None = None
    power_prev: tuple[int, float] | None = None
    xid_last: float | None = None


class NvmlCollector:
    """Reads every GPU and MIG instance a binding exposes, plus the processes running on them.

    `version_check_s`: how often (in collect time) driver/NVML/CUDA versions are re-read;
    a change emits an event.
    """

    def __init__(
        self,
        binding: NvmlBinding,
        host: str,
        identity: ProcessIdentity | None = None,
        name: str = "nvml",
        *,
        version_check_s: float = 300.0,
    ) -> None:
        self.name = name
        self.errors: dict[str, int] = {}
        # (call, NVML error name) -> failures: what /metrics shows per call
        self._call_errors: dict[tuple[str, str], int] = {}
        self._binding = binding
        self._host = host
        self._identity: ProcessIdentity = identity if identity is not None else NoIdentity()
        jobs = getattr(self._identity, "jobs_for_gpu", None)
        self._jobs_for_gpu: Callable[[str], Sequence[str]] | None = jobs if callable(jobs) else None
        self._version_check_ns = units.s_to_ns(version_check_s)
        self._host_labels: Mapping[str, str] = MappingProxyType({"host": host, "source": name})
        self._versions: dict[str, str] | None = None
        self._next_version_check = 0
        self._xid_supported = True
        self._closed = False
        self._open()
        self._devices = self._inventory()
        self._by_uuid = {d.info.uuid: d for d in self._devices}

    # -- set-up ---------------------------------------------------------------------------------
    def _open(self) -> None:
        try:
            self._binding.init()
        except NvmlLibraryMissing as exc:
            raise SourceUnavailable(f"NVML cannot be loaded ({exc}); {_INSTALL_HINT}.") from exc
        except NvmlError as exc:
            raise SourceUnavailable(
                f"NVML failed to initialise ({exc}); expected a loaded NVIDIA driver: check "
                f"`nvidia-smi` works on this host, or {_INSTALL_HINT}."
            ) from exc

    def _inventory(self) -> list[_Device]:
        b = self._binding
        try:
            count = b.device_count()
            devices: list[_Device] = []
            for index in range(count):
                parent = self._new_device(b.device_info(index), None)
                migs = [self._new_device(m, index) for m in b.mig_devices(index)]
                parent.has_mig_children = bool(migs)
                devices.append(parent)
                devices.extend(migs)
        except NvmlError as exc:
            raise SourceUnavailable(
                f"NVML inventory failed ({exc}); expected to list the GPUs: check `nvidia-smi`."
            ) from exc
        for dev in devices:
            dev.readers = self._readers(dev)
        return devices

    def _new_device(self, info: DeviceInfo, parent_index: int | None) -> _Device:
        labels = FrozenLabels(parse.device_labels(self._host, info, parent_index))
        caps = dict.fromkeys(
            (
                k
                for k in parse.CAPABILITY_METRICS
                if k not in ("energy_power_integral", "xid_events")
            ),
            True,
        )
        caps["energy_power_integral"] = False
        try:
            caps["gpm"] = bool(self._binding.gpm_supported(info.uuid))
        except NvmlNotSupported:
            caps["gpm"] = False
        except NvmlError as exc:
            self._count("gpm", exc)
            caps["gpm"] = False
        job_file = str(info.index) if parent_index is None else None
        if parent_index is not None and info.gpu_instance_id is not None:
            job_file = f"{parent_index}.{info.gpu_instance_id}"
        dev = _Device(info, labels, parse.static_values(info), caps, job_file=job_file)
        dev.job_labels = labels
        return dev

    def _readers(self, dev: _Device) -> list[tuple[str, Reader]]:
        """The per-tick calls of one device, built once; order matters (GPM before PCIe)."""
        b, uuid = self._binding, dev.info.uuid

        def scalar(key: str, read: Callable[[], float], conv: Convert) -> Reader:
            def reader(v: Values) -> None:
                value = conv(read())
                if value is not None:
                    v[key] = value

            return reader

        def utilization(v: Values) -> None:
            v.update(parse.utilization_values(b.utilization(uuid)))

        def memory(v: Values) -> None:
            v.update(parse.memory_values(b.memory_info(uuid)))

        def clocks_event_reasons(v: Values) -> None:
            v.update(parse.clock_event_values(b.clocks_event_reasons(uuid)))

        def gpm(v: Values) -> None:
            sample = b.gpm_sample(uuid)
            prev, dev.gpm_prev = dev.gpm_prev, sample
            if prev is None:
                return  # first-sample rule: a GPM metric needs two samples
            got = parse.gpm_values(b.gpm_metrics(prev, sample, parse.GPM_METRIC_IDS))
            if got and "sm_active_ratio" not in dev.caps:
                for metric in parse.GPM_METRIC_NAMES:  # once: which GPM metrics this GPU has
                    dev.caps[metric] = metric in got
            v.update(got)

        def slowdown(v: Values) -> None:
            """A fixed threshold: read until it answers once, then kept as a static value."""
            value = parse.temperature_celsius(
                b.temperature_threshold_c(uuid, TEMPERATURE_THRESHOLD_SLOWDOWN)
            )
            if value is None:
                return
            v["slowdown_temperature_celsius"] = dev.static["slowdown_temperature_celsius"] = value
            dev.readers = [(c, r) for c, r in dev.readers if r is not slowdown]

        def remapped_rows(v: Values) -> None:
            v.update(parse.remapped_rows_values(b.remapped_rows(uuid)))

        def nvlink(v: Values) -> None:
            v.update(parse.nvlink_values(b.nvlink_throughput_kib(uuid)))

        def pcie(v: Values) -> None:
            if "pcie_rx_bytes_per_second" in v:
                return  # GPM gave the rates this tick; they beat a 20 ms snapshot
            for key, counter in (("pcie_tx_bytes_per_second", PCIE_TX),
                                 ("pcie_rx_bytes_per_second", PCIE_RX)):  # fmt: skip
                value = parse.pcie_bytes_per_second(b.pcie_throughput_kbps(uuid, counter))
                if value is not None:
                    v[key] = value

        table: list[tuple[str, Reader]] = [("utilization", utilization), ("memory", memory)]
        for cap, key, method, arg, conv in _SCALAR_READS:
            call = getattr(b, method)
            read = partial(call, uuid) if arg is None else partial(call, uuid, arg)
            table.append((cap, scalar(key, read, conv)))
        table += [
            ("clocks_event_reasons", clocks_event_reasons),
            ("slowdown_temperature", slowdown),
            ("remapped_rows", remapped_rows),
            ("nvlink_counters", nvlink),
            ("gpm", gpm),
            ("pcie_throughput", pcie),
        ]
        if dev.caps.get("power_limit", False):
            dev.static.pop("power_limit_watts", None)  # read live each tick instead
        return [(cap, reader) for cap, reader in table if dev.caps.get(cap, False)]

    # -- public ---------------------------------------------------------------------------------
    def capabilities(self) -> dict[str, dict[str, bool]]:
        """Per device uuid: capability → available (parse.CAPABILITY_METRICS: what each gives)."""
        out: dict[str, dict[str, bool]] = {}
        for dev in self._devices:
            caps = dict(dev.caps)
            caps["xid_events"] = self._xid_supported
            out[dev.info.uuid] = caps
        return out

    @property
    def lost(self) -> list[str]:
        """UUIDs of devices that fell off the bus and are no longer read."""
        return [d.info.uuid for d in self._devices if d.lost]

    def collect(self, now_ns: int) -> list[Reading]:
        """GPU, process and event readings observed at `now_ns`."""
        if self._closed:
            raise CollectError(f"collector {self.name!r} is closed; create a new one to collect")
        out: list[Reading] = []
        if now_ns >= self._next_version_check:
            self._check_versions(now_ns, out)
        if self._xid_supported:
            self._poll_xids(now_ns, out)
        errors_before = sum(self.errors.values())
        for dev in self._devices:
            if not dev.lost:
                self._collect_device(dev, now_ns, out)
        if not out and sum(self.errors.values()) > errors_before:
            raise CollectError(
                f"NVML answered no call on any of {len(self._devices)} devices at {now_ns}; "
                f"errors so far: {self.errors}. Check `nvidia-smi` on host {self._host!r}."
            )
        return out

    def close(self) -> None:
        """Shut NVML down once; later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self._binding.shutdown()
        except NvmlError as exc:
            self._count("shutdown", exc)

    # -- per tick -------------------------------------------------------------------------------
    def _collect_device(self, dev: _Device, now_ns: int, out: list[Reading]) -> None:
        values: Values = dict(dev.static)
        off: list[str] = []
        for cap, reader in dev.readers:
            try:
                reader(values)
            except NvmlNotSupported:
                off.append(cap)
            except NvmlGpuLost as exc:
                self._mark_lost(dev, now_ns, exc, out)
                return
            except NvmlError as exc:
                self._count(cap, exc)
        if off:
            self._switch_off(dev, off, now_ns, out)
        if dev.caps["energy_power_integral"]:
            self._integrate_energy(dev, now_ns, values)
        if dev.xid_last is not None:
            values["xid_last"] = dev.xid_last
        if self._jobs_for_gpu is not None:
            self._update_job(dev)
        if len(values) > len(dev.static):
            out.append(Reading(Kind.GPU, now_ns, dev.job_labels or dev.labels, values))
        if not dev.has_mig_children and (dev.caps["processes"] or dev.caps["graphics_processes"]):
            self._collect_processes(dev, now_ns, out)

    def _update_job(self, dev: _Device) -> None:
        """The batch job(s) holding the device, from the resolver's hpc job mapping."""
        assert self._jobs_for_gpu is not None
        if dev.job_file is None:
            return
        try:
            job = ",".join(self._jobs_for_gpu(dev.job_file))
        except Exception:  # a resolver never breaks a collection
            self._count("jobs_for_gpu")
            return
        if job != dev.job or dev.job_labels is None:
            dev.job = job
            dev.job_labels = FrozenLabels({**dev.labels, "job_id": job}) if job else dev.labels

    def _process_list(
        self,
        dev: _Device,
        cap: str,
        read: Callable[[str], Sequence[ProcessInfo]],
        now_ns: int,
        out: list[Reading],
    ) -> Sequence[ProcessInfo] | None:
        """One NVML process list; None when it failed (capability off, lost, or an error)."""
        try:
            return read(dev.info.uuid)
        except NvmlNotSupported:
            self._switch_off(dev, [cap], now_ns, out)
        except NvmlGpuLost as exc:
            self._mark_lost(dev, now_ns, exc, out)
        except NvmlError as exc:
            self._count(cap, exc)
        return None

    def _collect_processes(self, dev: _Device, now_ns: int, out: list[Reading]) -> None:
        b, uuid = self._binding, dev.info.uuid
        procs: Sequence[ProcessInfo] = ()
        answered = False
        if dev.caps["processes"]:
            got = self._process_list(dev, "processes", b.compute_processes, now_ns, out)
            if dev.lost:
                return
            if got is not None:
                procs, answered = got, True
        if dev.caps["graphics_processes"]:
            graphics = self._process_list(
                dev, "graphics_processes", b.graphics_processes, now_ns, out
            )
            if dev.lost:
                return
            if graphics is not None:
                answered = True
                if graphics:
                    procs = parse.merge_processes(procs, graphics) if procs else graphics
        if not answered:
            return
        latest: dict[int, ProcessUtilSample] | None = None
        if procs and dev.caps["process_utilization"]:
            try:
                latest = parse.latest_samples(b.process_utilization(uuid, dev.proc_since_us))
            except NvmlNotSupported:
                self._switch_off(dev, ["process_utilization"], now_ns, out)
            except NvmlGpuLost as exc:
                self._mark_lost(dev, now_ns, exc, out)
                return
            except NvmlError as exc:
                self._count("process_utilization", exc)
            if latest:
                dev.proc_since_us = max(
                    dev.proc_since_us, *(s.timestamp_us for s in latest.values())
                )
        known = dev.proc_labels
        seen: dict[int, _ProcEntry] = {}
        identify = self._identity.identify
        job = dev.job
        for proc in procs:
            pid = proc.pid
            try:
                ident = identify(pid)
            except Exception:  # a resolver never breaks a collection
                self._count("identity")
                ident = _NO_IDENTITY
            entry = known.get(pid)
            if entry is None or entry[1] != job or (entry[0] is not ident and entry[0] != ident):
                entry = (ident, job, self._process_labels(dev, pid, ident, job))
            seen[pid] = entry
            values = parse.process_memory_values(proc)
            if latest is not None:
                values.update(parse.process_util_values(latest.get(pid)))
            out.append(Reading(Kind.PROCESS, now_ns, entry[2], values))
        dev.proc_labels = seen

    @staticmethod
    def _process_labels(dev: _Device, pid: int, ident: Mapping[str, str], job: str) -> FrozenLabels:
        """Device labels, pid, then what the resolver knows (device labels win on a clash);
        `job_id` from the GPU's job mapping only when the process has none of its own."""
        labels = dict(dev.labels)
        labels["pid"] = str(pid)
        for key, value in ident.items():
            labels.setdefault(key, value)
        if job and "job_id" not in labels:
            labels["job_id"] = job
        return FrozenLabels(labels)

    def _integrate_energy(self, dev: _Device, now_ns: int, values: Values) -> None:
        """Trapezoidal integral of power_watts; starts after the first interval, like a rate."""
        watts = values.get("power_watts")
        if watts is None:
            return
        prev = dev.power_prev
        dev.power_prev = (now_ns, watts)
        if prev is None or now_ns <= prev[0]:
            return
        joules = (prev[1] + watts) / 2.0 * units.ns_to_s(now_ns - prev[0])
        dev.energy_j = joules if dev.energy_j is None else dev.energy_j + joules
        values["energy_joules"] = dev.energy_j

    def _switch_off(self, dev: _Device, caps: list[str], now_ns: int, out: list[Reading]) -> None:
        for cap in caps:
            dev.caps[cap] = False
        dev.readers = [(c, r) for c, r in dev.readers if dev.caps.get(c, False)]
        if "energy_counter" in caps and dev.caps["power"]:
            dev.caps["energy_power_integral"] = True
            out.append(parse.energy_method_event(now_ns, dev.labels))
        if "power" in caps and dev.caps["energy_power_integral"]:
            dev.caps["energy_power_integral"] = False
        if "power_limit" in caps:  # fall back to the limit read with the inventory, if any
            dev.static.update(parse.static_values(dev.info))

    def _mark_lost(self, dev: _Device, now_ns: int, exc: NvmlError, out: list[Reading]) -> None:
        dev.lost = True
        out.append(parse.gpu_lost_event(now_ns, dev.labels, str(exc)))
        for other in self._devices:  # MIG instances go with their parent
            if other.info.parent_uuid == dev.info.uuid and not other.lost:
                other.lost = True

    def _poll_xids(self, now_ns: int, out: list[Reading]) -> None:
        try:
            xids = self._binding.xid_events()
        except NvmlNotSupported:
            self._xid_supported = False
            return
        except NvmlError as exc:
            self._count("xid_events", exc)
            return
        for xid in xids:
            dev = self._by_uuid.get(xid.device_uuid)
            labels = (
                dev.labels if dev is not None else {"host": self._host, "gpu_uuid": xid.device_uuid}
            )
            if dev is not None:
                dev.xid_last = float(xid.xid)
            ts = units.us_to_ns(xid.timestamp_us) if xid.timestamp_us > 0 else now_ns
            out.append(parse.xid_event(ts, xid.xid, xid.device_uuid, labels))

    def _check_versions(self, now_ns: int, out: list[Reading]) -> None:
        self._next_version_check = now_ns + self._version_check_ns
        b = self._binding
        current: dict[str, str] = {}
        for key, read in (
            ("driver_version", b.driver_version),
            ("nvml_version", b.nvml_version),
            ("cuda_driver_version", lambda: parse.cuda_version(b.cuda_driver_version())),
        ):
            try:
                current[key] = str(read())
            except NvmlError as exc:
                self._count(key, exc)
        out.extend(parse.version_events(now_ns, current, self._versions, self._host_labels))
        self._versions = {**(self._versions or {}), **current}

    def call_errors(self) -> dict[tuple[str, str], int]:
        """Failed calls so far by (call, NVML error name): the calls left out of a tick."""
        return dict(self._call_errors)

    def _count(self, key: str, exc: Exception | None = None) -> None:
        self.errors[key] = self.errors.get(key, 0) + 1
        error = error_name(exc) if exc is not None else "error"
        self._call_errors[key, error] = self._call_errors.get((key, error), 0) + 1
