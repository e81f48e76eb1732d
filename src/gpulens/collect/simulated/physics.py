"""One simulated GPU over time: a job timeline of stages, thermal lag, caps and counters.

A GPU runs nothing until its job starts, then the job's stages in order (warm-up, steady
state, and for a job that dies and restarts, a down time after which the stage list repeats).
Every stage is a periodic `Schedule`; the integral of every rate from a fixed origin is
closed-form, so window averages, the energy counter and the violation counters at time t depend
only on t. Temperature follows a first-order lag toward the equilibrium of each stage's mean
power; when it would pass the slowdown temperature the stage splits in two and the second part
runs under a clock ceiling that holds the mean power at the thermal equilibrium (SW_THERMAL).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpulens.collect.simulated import noise
from gpulens.collect.simulated.phases import (
    CLOCK,
    COPY,
    DUTY,
    NCOL,
    NVL_RX,
    NVL_TX,
    PCIE_RX,
    PCIE_TX,
    POWER,
    DeviceSpec,
    Phase,
    Row,
    Schedule,
    mean_power_ceiling,
    phase_rows,
)

ORIGIN_S = -3 * 86_400.0  # counters (energy) count from "driver load", 3 days before the fleet
_CACHE = 32

# Relative per-second jitter amplitude per column (real counters wobble from step to step).
_AMP = np.zeros(NCOL)
_AMP[: COPY + 1] = 0.02
_AMP[DUTY] = 0.004
_AMP[[PCIE_RX, PCIE_TX, NVL_TX, NVL_RX]] = 0.05
_AMP[POWER] = 0.012
_RATIO_COLS = slice(0, COPY + 1)


@dataclass(frozen=True, slots=True)
class StageSpec:
    """A stretch of a job with one periodic schedule.

    `seconds` None runs until the end of time. Process memory is `memory_bytes`, ramping from
    `memory_from` across the stage when given, growing by `leak_bytes_per_second` otherwise.
    `samples_per_period` is the work (samples, requests) one period completes.
    """

    name: str
    seconds: float | None
    phases: tuple[Phase, ...]
    memory_bytes: float = 0.0
    memory_from: float | None = None
    leak_bytes_per_second: float = 0.0
    process: bool = True
    idle_clocks: bool = False
    samples_per_period: float = 0.0


@dataclass(frozen=True, slots=True)
class Stage:
    """A stage placed on the timeline (seconds from the job start, within one epoch)."""

    spec: StageSpec
    start: float
    end: float
    schedule: Schedule
    phase0: float
    i0: Row
    cum: Row
    temp0: float
    temp_eq: float
    thermal: bool

    def memory(self, u: float) -> float:
        """Process memory `u` seconds into the stage (bytes, 2 MiB allocator granularity)."""
        s = self.spec
        if s.memory_from is not None and math.isfinite(self.end):
            frac = min(1.0, u / (self.end - self.start))
            value = s.memory_from + (s.memory_bytes - s.memory_from) * frac
        else:
            value = s.memory_bytes + s.leak_bytes_per_second * u
        return float(int(value) // 2_097_152 * 2_097_152)


IDLE_PHASE = Phase("idle", 1.0)


class GpuModel:
    """The closed-form history of one GPU; `integral`, `window` and friends answer for any t."""

    def __init__(
        self,
        device: DeviceSpec,
        entity_key: int,
        job_start_s: float | None,
        stages: Sequence[StageSpec] = (),
        clock_ceiling: float = 1.0,
        start_ns: int = 0,
    ) -> None:
        self.device = device
        self.start_ns = start_ns
        self.key = entity_key
        self.job_start_s = job_start_s
        self.clock_ceiling = clock_ceiling
        idle_rows = phase_rows([IDLE_PHASE], device, idle_clocks=True)
        self.idle = Schedule([IDLE_PHASE], idle_rows)
        self.idle_temp = device.ambient_c + device.thermal_resistance_c_per_w * device.idle_power_w
        self.stages: list[Stage] = self._place(stages) if job_start_s is not None else []
        finite = bool(self.stages) and math.isfinite(self.stages[-1].end)
        self.epoch_s: float | None = self.stages[-1].end if finite else None
        last = self.stages[-1] if self.stages else None
        self.epoch_integral: Row = (
            last.cum + last.schedule.integral(last.phase0 + last.end - last.start) - last.i0
            if last is not None and finite
            else np.zeros(NCOL)
        )
        self._cache: dict[int, Row] = {}
        start = 0.0 if job_start_s is None else job_start_s
        self._job_base: Row = self.idle.mean * (start - ORIGIN_S)  # idle integral to job start

    # -- construction -------------------------------------------------------------------------
    def _place(self, specs: Sequence[StageSpec]) -> list[Stage]:
        dev, tau = self.device, self.device.thermal_time_constant_s
        t, temp, cum = 0.0, self.idle_temp, np.zeros(NCOL)
        out: list[Stage] = []

        def add(
            spec: StageSpec, end: float, sched: Schedule, phase0: float, eq: float, thermal: bool
        ) -> None:
            nonlocal t, cum
            i0 = sched.integral(phase0)
            out.append(Stage(spec, t, end, sched, phase0, i0, cum, temp, eq, thermal))
            if math.isfinite(end):
                cum = cum + sched.integral(phase0 + end - t) - i0
            t = end

        for spec in specs:
            dur = math.inf if spec.seconds is None else spec.seconds
            rate = spec.samples_per_period / sum(p.seconds for p in spec.phases)

            def rows(
                ceiling: float, thermal: bool, spec: StageSpec = spec, rate: float = rate
            ) -> Row:
                return phase_rows(
                    spec.phases,
                    dev,
                    samples_rate=rate,
                    idle_clocks=spec.idle_clocks,
                    clock_ceiling=ceiling,
                    thermal=thermal,
                )

            sched = Schedule(spec.phases, rows(self.clock_ceiling, False))
            eq = dev.ambient_c + dev.thermal_resistance_c_per_w * float(sched.mean[POWER])
            hit = math.inf
            if eq > dev.slowdown_temp_c:
                hit = (
                    0.0
                    if temp >= dev.slowdown_temp_c
                    else tau * math.log((eq - temp) / (eq - dev.slowdown_temp_c))
                )
            if hit >= dur:
                add(spec, t + dur, sched, 0.0, eq, False)
                temp = eq + (temp - eq) * math.exp(-dur / tau)
                continue
            if hit > 0:
                add(spec, t + hit, sched, 0.0, eq, False)
            target = (dev.slowdown_temp_c - dev.ambient_c) / dev.thermal_resistance_c_per_w

            def mean_power(ceiling: float, s: Schedule = sched) -> float:
                return float(s.durations @ rows(ceiling, True)[:, POWER]) / s.period

            ceiling = mean_power_ceiling(
                mean_power,
                target,
                self.clock_ceiling,
            )
            hot = Schedule(spec.phases, rows(ceiling, True))
            temp = dev.slowdown_temp_c
            add(spec, t - hit + dur, hot, hit % hot.period, temp, True)
        return out

    # -- queries --------------------------------------------------------------------------------
    def locate(self, x: float) -> tuple[Stage | None, int, float]:
        """(stage, epoch index, seconds into the stage) at `x` seconds from the fleet start."""
        if self.job_start_s is None or x < self.job_start_s:
            return None, 0, 0.0
        tau = x - self.job_start_s
        n = 0
        if self.epoch_s is not None:
            n = math.floor(tau / self.epoch_s)
            tau -= n * self.epoch_s
        for stage in self.stages:
            if tau < stage.end:
                return stage, n, tau - stage.start
        last = self.stages[-1]
        return last, n, tau - last.start

    def integral(self, t_ns: int) -> Row:
        """∫ of every rate from the counters' origin to `t_ns` (cached for recent times)."""
        hit = self._cache.get(t_ns)
        if hit is not None:
            return hit
        x = (t_ns - self.start_ns) / 1e9
        value = self._integral(x)
        if len(self._cache) >= _CACHE:
            del self._cache[next(iter(self._cache))]
        self._cache[t_ns] = value
        return value

    def _integral(self, x: float) -> Row:
        if self.job_start_s is None or x < self.job_start_s:
            return self.idle.mean * max(0.0, x - ORIGIN_S)
        base = self._job_base
        stage, n, u = self.locate(x)
        assert stage is not None
        if n:
            base = base + n * self.epoch_integral
        inner: Row = stage.schedule.integral(stage.phase0 + u) - stage.i0
        return base + stage.cum + inner

    def window(self, t0_ns: int, t1_ns: int) -> Row:
        """Mean rates over [t0, t1] with the per-second jitter of bucket t1 applied."""
        span = (t1_ns - t0_ns) / 1e9
        if span <= 0:
            raise ValueError(f"empty window [{t0_ns}, {t1_ns}]")
        mean = np.subtract(self.integral(t1_ns), self.integral(t0_ns))
        mean /= span  # in place: the same arithmetic as `(a - b) / span`, fewer allocations
        jitter = _AMP * noise.uniform(self.key, t1_ns // 1_000_000_000)
        jitter += 1.0
        mean *= jitter
        ratios = mean[_RATIO_COLS]
        np.minimum(ratios, 1.0, out=ratios)
        return mean

    def temperature(self, t_ns: int) -> float:
        stage, _, u = self.locate((t_ns - self.start_ns) / 1e9)
        if stage is None:
            base = self.idle_temp
        elif stage.thermal:
            base = stage.temp_eq
        else:
            tau = self.device.thermal_time_constant_s
            base = stage.temp_eq + (stage.temp0 - stage.temp_eq) * math.exp(-u / tau)
        return base + 0.4 * noise.uniform(self.key, t_ns // 1_000_000_000, 3)

    def clock_mhz(self, mean: Row) -> int:
        dev = self.device
        mhz = float(mean[CLOCK]) * dev.max_sm_clock_mhz
        return int(round(mhz / dev.clock_step_mhz) * dev.clock_step_mhz)
