"""Work phases and what they do to one device: a kernel mix becomes rates, a phase list a schedule.

A `Phase` describes a stretch of a training step or serving loop by its kernels (duration,
launch gap, SMs covered, pipe mix, DRAM intensity) and its traffic. `phase_rows` turns phases
into a matrix of per-second rates (one row per phase, one column per quantity below), with the
clock each phase runs at after the power cap and any clock ceiling. A `Schedule` repeats the
phases periodically and integrates those rates analytically, so any window average is
(integral(t1) - integral(t0)) / (t1 - t0), with no sub-sampling.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Row = npt.NDArray[np.float64]

# Columns of a phase row: rates while in the phase (ratios are "fraction of time/cycles").
DUTY, SM, OCC, TENSOR, HMMA, IMMA, DFMA, DMMA, FP32, FP16, FP64, INT, DRAM, COPY = range(14)
PCIE_RX, PCIE_TX, NVL_TX, NVL_RX = range(14, 18)  # bytes/s
POWER, CLOCK, PCAP, TCAP = range(18, 22)  # W, fraction of max SM clock, capped-time indicators
LAUNCH, CPU, DISK, WAIT, SAMPLES = range(22, 27)  # launches/s, cores, bytes/s, flag, samples/s
NCOL = 27


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """A GPU model: inventory facts plus the constants of its power and thermal model."""

    name: str = "NVIDIA H100 80GB HBM3"
    architecture: str = "hopper"
    compute_capability: tuple[int, int] = (9, 0)
    memory_total_bytes: int = 85_520_809_984
    memory_reserved_bytes: int = 577_765_376
    power_limit_w: float = 700.0
    max_sm_clock_mhz: int = 1980
    max_mem_clock_mhz: int = 2619
    idle_sm_clock_mhz: int = 345
    clock_step_mhz: int = 15
    idle_power_w: float = 70.0
    clocks_up_power_w: float = 45.0  # extra draw when clocks are up with a context and no kernel
    dynamic_power_w: float = 890.0  # draw of a fully busy activity index at max clock
    ambient_c: float = 30.0
    thermal_resistance_c_per_w: float = 0.06
    thermal_time_constant_s: float = 45.0
    slowdown_temp_c: float = 87.0


H100 = DeviceSpec()


@dataclass(frozen=True, slots=True)
class Phase:
    """One stretch of a work cycle and its kernel mix.

    Kernels of `kernel_us` are launched back to back with `gap_us` between them (no kernels
    when `kernel_us` is 0). `sm_cover` is the share of SMs a kernel covers; the pipe fields
    (`tensor`, `fp32`...) are per active SM cycle, `dram` per busy cycle. `copy` is the share
    of time a copy engine moves data. Traffic is in bytes/s.
    """

    name: str
    seconds: float
    kernel_us: float = 0.0
    gap_us: float = 0.0
    sm_cover: float = 0.0
    occupancy: float = 0.0
    tensor: float = 0.0
    tensor_pipe: int = HMMA
    fp32: float = 0.0
    fp16: float = 0.0
    fp64: float = 0.0
    integer: float = 0.0
    dram: float = 0.0
    copy: float = 0.0
    pcie_rx: float = 0.0
    pcie_tx: float = 0.0
    nvlink: float = 0.0
    cpu_cores: float = 0.0
    disk_read: float = 0.0
    data_wait: bool = False

    def busy(self) -> float:
        """Fraction of the phase with a kernel executing."""
        if self.kernel_us <= 0:
            return 0.0
        return self.kernel_us / (self.kernel_us + self.gap_us)

    def launches_per_second(self) -> float:
        if self.kernel_us <= 0:
            return 0.0
        return 1e6 / (self.kernel_us + self.gap_us)


def activity_index(row: Row) -> float:
    """How hard the chip works (0..~1): weights are the relative power cost of each unit."""
    return float(
        0.42 * row[TENSOR]
        + 0.30 * row[FP32]
        + 0.15 * row[FP16]
        + 0.35 * row[FP64]
        + 0.10 * row[INT]
        + 0.25 * row[DRAM]
        + 0.18 * row[SM]
        + 0.02 * (row[NVL_TX] + row[NVL_RX]) / 1e11
    )


def _activity_row(ph: Phase, samples_rate: float) -> Row:
    row = np.zeros(NCOL)
    busy = ph.busy()
    sm = busy * ph.sm_cover
    row[DUTY] = busy
    row[SM] = sm
    row[OCC] = sm * ph.occupancy
    row[TENSOR] = sm * ph.tensor
    row[ph.tensor_pipe] = sm * ph.tensor
    row[FP32] = sm * ph.fp32
    row[FP16] = sm * ph.fp16
    row[FP64] = sm * ph.fp64
    row[INT] = sm * ph.integer
    row[DRAM] = min(0.8, busy * ph.dram)
    row[COPY] = min(1.0, busy * min(1.0, ph.dram * 1.25) + ph.copy)
    row[PCIE_RX] = ph.pcie_rx
    row[PCIE_TX] = ph.pcie_tx + 0.02 * ph.pcie_rx
    row[NVL_TX] = ph.nvlink
    row[NVL_RX] = ph.nvlink
    row[LAUNCH] = ph.launches_per_second()
    row[CPU] = ph.cpu_cores
    row[DISK] = ph.disk_read
    row[WAIT] = 1.0 if ph.data_wait else 0.0
    row[SAMPLES] = samples_rate
    return row


def phase_rows(
    phases: Sequence[Phase],
    device: DeviceSpec,
    *,
    samples_rate: float = 0.0,
    idle_clocks: bool = False,
    clock_ceiling: float = 1.0,
    thermal: bool = False,
    power_limit_w: float | None = None,
) -> Row:
    """Rows of per-second rates, with each phase's clock and power after the caps.

    The power cap lowers a phase's clock until its draw fits `power_limit_w` (PCAP = 1 while
    it binds); `clock_ceiling` (a thermal slowdown or locked clocks) applies on top, and with
    `thermal` every phase counts as thermally throttled (TCAP = 1).
    """
    limit = device.power_limit_w if power_limit_w is None else power_limit_w
    rows = np.zeros((len(phases), NCOL))
    for k, ph in enumerate(phases):
        row = _activity_row(ph, samples_rate)
        if idle_clocks:
            row[CLOCK] = device.idle_sm_clock_mhz / device.max_sm_clock_mhz
            row[POWER] = device.idle_power_w
        else:
            slope = device.clocks_up_power_w + device.dynamic_power_w * activity_index(row)
            clock = 1.0
            if device.idle_power_w + slope > limit:
                clock = (limit - device.idle_power_w) / slope
            row[PCAP] = 1.0 if clock < min(1.0, clock_ceiling) else 0.0
            clock = min(clock, clock_ceiling)
            row[CLOCK] = clock
            row[POWER] = device.idle_power_w + slope * clock
        row[TCAP] = 1.0 if thermal else 0.0
        rows[k] = row
    return rows


def mean_power_ceiling(mean_power: Callable[[float], float], target_w: float, top: float) -> float:
    """The clock ceiling (at most `top`) at which `mean_power(ceiling)` equals `target_w`."""
    lo, hi = 0.05, top
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_power(mid) < target_w else (lo, mid)
    return lo


class Schedule:
    """Phases repeated with a fixed period; `integral(u)` of every rate from phase-time 0 to u."""

    __slots__ = ("durations", "mean", "offsets", "per_period", "period", "phases", "rows")

    def __init__(self, phases: Sequence[Phase], rows: Row) -> None:
        if not phases:
            raise ValueError("a schedule needs at least one phase")
        self.phases = tuple(phases)
        self.durations = np.array([p.seconds for p in phases], dtype=np.float64)
        self.offsets = np.concatenate(([0.0], np.cumsum(self.durations)[:-1]))
        self.period = float(self.durations.sum())
        self.rows = rows
        self.per_period: Row = self.durations @ rows
        self.mean: Row = self.per_period / self.period

    def integral(self, u: float) -> Row:
        """∫ rates dt over phase-time [0, u]."""
        n = math.floor(u / self.period)
        r = u - n * self.period
        into = r - self.offsets  # seconds into each phase, clipped to [0, duration] in place
        np.maximum(into, 0.0, out=into)
        np.minimum(into, self.durations, out=into)
        total: Row = self.per_period * n
        total += into @ self.rows
        return total

    def phase_at(self, u: float) -> Phase:
        """The phase running at phase-time `u`."""
        r = u % self.period
        k = int(np.searchsorted(self.offsets, r, side="right")) - 1
        return self.phases[max(0, k)]
