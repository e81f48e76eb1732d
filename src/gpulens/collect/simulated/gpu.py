"""A placed job and one simulated GPU read out in NVML's units.

`SimGpu.snap(t)` computes the GPU's state at t once (window [t - 1 s, t], counters at t) and
keeps it, so the twenty-odd binding calls of one tick, the dcgm exposition and the host
collector all read the same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpulens.collect.nvml.binding import DeviceInfo
from gpulens.collect.simulated.phases import (
    CLOCK,
    COPY,
    DUTY,
    NVL_RX,
    NVL_TX,
    PCAP,
    POWER,
    TCAP,
    Row,
)
from gpulens.collect.simulated.physics import GpuModel, Stage
from gpulens.collect.simulated.workloads import JobSpec

WINDOW_NS = 1_000_000_000  # NVML's utilisation sample period and DCGM's default 1 Hz
HBM_ABOVE_CORE_C = 4.0  # HBM stacks run a few degrees above the core on H100 boards
GPU_IDLE, APP_CLOCKS, SW_POWER_CAP, SW_THERMAL = 0x001, 0x002, 0x004, 0x020


@dataclass(frozen=True, slots=True)
class PlacedJob:
    """A job on its host: identity, GPUs and start time (seconds after the fleet start)."""

    index: int
    job_id: str
    spec: JobSpec
    host: str
    slot: int  # the job's number on its host, used for PIDs
    gpu_indices: tuple[int, ...]
    uuids: tuple[str, ...]
    start_s: float
    user: str
    labels: Mapping[str, str] = field(default_factory=dict)

    def pid(self, rank: int, epoch: int) -> int:
        """Host PID of `rank` in restart `epoch` (deterministic; decoded by `decode_pid`)."""
        return 10_000 * (self.slot + 1) + 16 * (epoch % 500) + rank


def decode_pid(pid: int) -> tuple[int, int]:
    """(job slot on the host, rank) a simulated PID stands for; slot -1 when none."""
    if pid < 10_000:
        return -1, 0
    return pid // 10_000 - 1, pid % 16


@dataclass(frozen=True, slots=True)
class Snap:
    """A GPU's state at `t_ns`: window means over the last second and counters at t."""

    t_ns: int
    mean: Row
    total: Row
    stage: Stage | None
    epoch: int
    offset_s: float

    @property
    def process(self) -> bool:
        return self.stage is not None and self.stage.spec.process

    @property
    def idle_clocks(self) -> bool:
        return self.stage is None or self.stage.spec.idle_clocks


class SimGpu:
    """One GPU of the fleet: inventory, its physics model and the job rank it runs."""

    def __init__(
        self,
        info: DeviceInfo,
        host: str,
        model: GpuModel,
        job: PlacedJob | None,
        rank: int,
        locked_mhz: int | None,
    ) -> None:
        self.info = info
        self.host = host
        self.model = model
        self.job = job
        self.rank = rank
        self.locked_mhz = locked_mhz
        self._snap: Snap | None = None

    @property
    def uuid(self) -> str:
        return self.info.uuid

    def snap(self, t_ns: int) -> Snap:
        s = self._snap
        if s is not None and s.t_ns == t_ns:
            return s
        model = self.model
        mean = model.window(t_ns - WINDOW_NS, t_ns)
        stage, epoch, offset = model.locate((t_ns - model.start_ns) / 1e9)
        s = Snap(t_ns, mean, model.integral(t_ns), stage, epoch, offset)
        self._snap = s
        return s

    # -- NVML-unit readouts -------------------------------------------------------------------
    def utilization(self, t_ns: int) -> tuple[int, int]:
        mean = self.snap(t_ns).mean
        return round(100 * float(mean[DUTY])), round(100 * float(mean[COPY]))

    def memory_used(self, t_ns: int) -> int:
        s = self.snap(t_ns)
        if s.stage is None or not s.stage.spec.process:
            return 0
        return int(s.stage.memory(s.offset_s))

    def power_mw(self, t_ns: int) -> int:
        return round(float(self.snap(t_ns).mean[POWER]) * 1000)

    def energy_mj(self, t_ns: int) -> int:
        return int(float(self.snap(t_ns).total[POWER]) * 1000)

    def temperature_c(self, t_ns: int) -> int:
        return round(self.model.temperature(t_ns))

    def memory_temperature_c(self, t_ns: int) -> int:
        return round(self.model.temperature(t_ns) + HBM_ABOVE_CORE_C)

    def nvlink_kib(self, t_ns: int) -> tuple[int, int]:
        """NVLink data (TX, RX) KiB counters: the integral of the simulated NVLink traffic."""
        total = self.snap(t_ns).total
        return int(float(total[NVL_TX]) / 1024), int(float(total[NVL_RX]) / 1024)

    def sm_clock_mhz(self, t_ns: int) -> int:
        return self.model.clock_mhz(self.snap(t_ns).mean)

    def reasons(self, t_ns: int) -> int:
        s = self.snap(t_ns)
        if s.idle_clocks:
            return GPU_IDLE
        bits = 0
        if s.mean[PCAP] > 0:
            bits |= SW_POWER_CAP
        if s.mean[TCAP] > 0:
            bits |= SW_THERMAL
        if self.locked_mhz is not None:
            bits |= APP_CLOCKS
        return bits

    def pstate(self, t_ns: int) -> int:
        return 8 if self.snap(t_ns).idle_clocks else 0

    def violation_ns(self, t_ns: int, thermal: bool) -> int:
        return int(float(self.snap(t_ns).total[TCAP if thermal else PCAP]) * 1e9)

    def pid(self, t_ns: int) -> int | None:
        """The PID of the job's process on this GPU at t, or None when none runs."""
        s = self.snap(t_ns)
        if self.job is None or not s.process:
            return None
        return self.job.pid(self.rank, s.epoch)

    def clock_fraction(self, t_ns: int) -> float:
        return float(self.snap(t_ns).mean[CLOCK])
