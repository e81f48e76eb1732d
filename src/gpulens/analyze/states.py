"""The interval states, one rule each: the condition that puts a row in the state and the text
that explains it.

A rule is a function `(signals, thresholds) -> Match`, named after its state: `Match.rows` is
where its condition holds, `Match.reason` builds the explaining text for the rows it decides.
`RULES` lists them in precedence order; `efficiency.classify` walks it and the first rule that
matches a row decides it (so a rule's condition need not exclude the states before it).
`Signals` holds the per-row figures several rules share, read once from the interval frame
(analyze/schema.py). docs/analysis/states.md explains each rule and its thresholds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze import peaks as peak_table
from gpulens.analyze._arrays import label_codes
from gpulens.analyze.phases import activity, floats, in_windows, warmup_windows

GIB = 2**30


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Rule thresholds; defaults from DESIGN.md's reference list (NVIDIA DCGM guidance,
    jobstats), all overridable. The string under each field is its meaning: `make docs`
    writes them into the table of docs/analysis/states.md (present/docs.py)."""

    sm_good: float = 0.8
    """SM active needed for effective use (NVIDIA DCGM: >= 0.8 is necessary, not sufficient);
    `comm_bound` and `input_bound` look below it."""
    sm_low: float = 0.5
    """SM active below which a busy GPU is `hollow_busy` (NVIDIA DCGM: < 0.5 likely means
    ineffective use)."""
    duty_busy: float = 0.8
    """Duty cycle (nvidia-smi GPU-Util) that counts as busy for `hollow_busy`."""
    busy_min: float = 0.5
    """max(duty, SM active) that counts as busy for `throttled`, `comm_bound` and
    `power_capped`."""
    idle_activity: float = 0.05
    """max(duty, SM active) at or below which an interval is idle."""
    idle_memory_bytes: float = 256 * 2**20
    """Memory in use beyond the driver's reservation that means "held"."""
    dram_bound: float = 0.5
    """DRAM active from which the GPU is `memory_bound` (NVIDIA DCGM: DRAM activity saturates
    near 0.8)."""
    mem_copy_bound: float = 0.7
    """Memory-copy utilisation that stands in for `dram_bound` where DRAM activity is
    absent."""
    pipes_low: float = 0.5
    """Every math pipe (tensor, FP32, FP16, FP64) below this for `memory_bound`."""
    tensor_min: float = 0.1
    """Tensor active below which tensor cores count as unused (`compute_fp32`,
    `low_tensor_use`); at or above it the interval is `compute_tensor`."""
    fp32_high: float = 0.3
    """FP32 pipe activity from which matrix work runs on FP32 (`compute_fp32`: no AMP/TF32)."""
    clock_throttled: float = 0.9
    """SM clock / its maximum below which a busy GPU is slowed (`throttled`,
    `power_capped`)."""
    throttle_fraction: float = 0.5
    """Share of the samples with power or thermal clock-event flags set for `throttled`."""
    power_capped_ratio: float = 0.95
    """Power draw / power limit from which a slowed, busy GPU is `power_capped`."""
    host_cpu_saturated: float = 0.9
    """Host CPU busy ratio that counts as saturated for `input_bound`."""
    data_wait_high: float = 0.2
    """Share of the step the application spends waiting for data that makes it
    `input_bound`."""
    sm_swing: float = 0.35
    """SM active max − min within an interval that shows gaps in the work (`input_bound`)."""
    comm_gap: float = 0.1
    """How far SM active lies below the job's busiest GPU for `comm_bound`."""
    jobstats_red: float = 0.15
    """jobstats: GPU utilisation below 15 % is red (low useful work in the Prometheus
    rules)."""
    jobstats_warning: float = 0.25
    """jobstats: GPU utilisation below 25 % warns (not used by a rule yet)."""
    warmup_band: float = 0.1
    """Warm-up: activity within this of the run's steady median counts as settled."""
    warmup_settle: int = 2
    """Warm-up: consecutive settled intervals that end it."""
    warmup_memory_ratio: float = 0.9
    """Warm-up: memory in use must reach this share of its steady median."""
    warmup_max_s: float = 900.0
    """Warm-up: seconds after which an unsettled warm-up is cut (`capped`)."""


Rows = np.ndarray  # row indices
Strs = Any  # a pyarrow string Array, ChunkedArray or Scalar (pyarrow ships no type hints)
Reason = Callable[[Rows], Strs]


def num(values: np.ndarray, digits: int = 2) -> pa.Array:
    """Numbers as short text ("0.95"), "n/a" for NaN."""
    arr = pa.array(np.round(values, digits), type=pa.float64(), from_pandas=True)
    return pc.fill_null(pc.cast(arr, pa.string()), "n/a")


def text(*parts: str | Strs) -> Strs:
    """The parts (fixed strings, or string arrays of one length) joined row by row."""
    pieces = [pa.scalar(p) if isinstance(p, str) else p for p in parts]
    return pc.binary_join_element_wise(*pieces, "")


@dataclass(frozen=True, slots=True)
class Match:
    """A rule applied to a frame: `rows` (bool per row) where its condition holds, and
    `reason`, the explaining text for the given row indices (built only for the rows the rule
    decides)."""

    rows: np.ndarray
    reason: Reason


@dataclass(frozen=True, slots=True)
class Signals:
    """The per-row figures the rules share (NaN where the frame has no value)."""

    frame: pa.Table
    duty: np.ndarray
    sm_raw: np.ndarray  # SM active as reported
    sm: np.ndarray  # SM active, else graphics-engine active (an upper bound of it)
    tensor: np.ndarray
    fp32: np.ndarray
    fp16: np.ndarray
    fp64: np.ndarray
    dram: np.ndarray
    copy: np.ndarray  # memory-copy utilisation
    act: np.ndarray  # activity: SM active, else graphics-engine active, else duty
    profiling: np.ndarray  # SM, graphics-engine or tensor activity present
    procs: np.ndarray  # processes seen (0 for none or unknown)
    mem: np.ndarray  # memory in use: the larger of the GPU's and its processes'
    held: np.ndarray  # a process, or more than `idle_memory_bytes` in use
    idle: np.ndarray  # max(duty, SM active) at most `idle_activity`
    busy: np.ndarray  # max(duty, SM active) at least `busy_min`
    clock: np.ndarray  # SM clock, Hz
    max_clock: np.ndarray  # maximum SM clock, Hz: the frame's, else the datasheet's
    limit: np.ndarray  # power limit, W: the frame's, else the datasheet's TDP
    clock_ratio: np.ndarray  # clock / max_clock
    slow: np.ndarray  # clock_ratio below `clock_throttled` (False when unknown)
    power: np.ndarray

    @classmethod
    def of(cls, frame: pa.Table, th: Thresholds) -> Signals:
        duty, sm_raw = floats(frame, "duty"), floats(frame, "sm_active")
        sm = np.where(np.isnan(sm_raw), floats(frame, "graphics_active"), sm_raw)
        tensor = floats(frame, "tensor_active")
        busy_level = np.fmax(duty, sm)  # fmax ignores one NaN
        procs = np.nan_to_num(floats(frame, "processes"))
        mem = np.fmax(floats(frame, "memory_used_bytes"), floats(frame, "process_memory_bytes"))
        clock = floats(frame, "sm_clock_hz")
        max_clock, limit = _clock_facts(frame)
        clock_ratio = clock / max_clock
        return cls(
            frame=frame,
            duty=duty,
            sm_raw=sm_raw,
            sm=sm,
            tensor=tensor,
            fp32=floats(frame, "fp32_active"),
            fp16=floats(frame, "fp16_active"),
            fp64=floats(frame, "fp64_active"),
            dram=floats(frame, "dram_active"),
            copy=floats(frame, "mem_copy"),
            act=activity(frame),
            profiling=~np.isnan(sm) | ~np.isnan(tensor),
            procs=procs,
            mem=mem,
            held=(procs > 0) | (np.nan_to_num(mem) > th.idle_memory_bytes),
            idle=np.nan_to_num(busy_level, nan=1.0) <= th.idle_activity,
            busy=np.nan_to_num(busy_level) >= th.busy_min,
            clock=clock,
            max_clock=max_clock,
            limit=limit,
            clock_ratio=clock_ratio,
            slow=np.nan_to_num(clock_ratio, nan=1.0) < th.clock_throttled,
            power=floats(frame, "power_w"),
        )


def _clock_facts(frame: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(maximum SM clock in Hz, power limit in W) per row: the frame's, else the datasheet's."""
    max_clock = floats(frame, "sm_clock_max_hz")
    limit = floats(frame, "power_limit_w")
    if not (np.isnan(max_clock).any() or np.isnan(limit).any()):
        return max_clock, limit
    code, models = label_codes(frame, "gpu_model")
    per_model = np.empty((len(models), 2))
    for m, model in enumerate(models):
        spec = peak_table.lookup(model) if isinstance(model, str) else None
        clock = spec.boost_clock_mhz * 1e6 if spec and spec.boost_clock_mhz else np.nan
        tdp = float(spec.tdp_w) if spec and spec.tdp_w else np.nan
        per_model[m] = (clock, tdp)
    sheet_clock, sheet_limit = per_model[code, 0], per_model[code, 1]
    return (
        np.where(np.isnan(max_clock), sheet_clock, max_clock),
        np.where(np.isnan(limit), sheet_limit, limit),
    )


def _job_peers(frame: pa.Table, act: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(GPUs of the row's job in its interval, busiest activity among them) per row."""
    n = frame.num_rows
    if "job_id" not in frame.column_names or n == 0:
        return np.zeros(n), np.full(n, np.nan)
    job_col = frame.column("job_id")
    if pa.types.is_dictionary(job_col.type):
        job_col = pc.cast(job_col, job_col.type.value_type)
    has_job = np.asarray(pc.is_valid(job_col).to_numpy(zero_copy_only=False), dtype=bool)
    peers, top = np.zeros(n), np.full(n, np.nan)
    rows = np.flatnonzero(has_job)
    if rows.size == 0:
        return peers, top
    job = pc.dictionary_encode(job_col).combine_chunks().indices
    job_code = np.asarray(job.to_numpy(zero_copy_only=False)[rows], dtype=np.int64)
    start = pc.cast(frame.column("start_ns"), pa.int64()).to_numpy(zero_copy_only=False)
    _, start_code = np.unique(np.asarray(start)[rows], return_inverse=True)
    key = job_code * (int(start_code.max()) + 1) + start_code.reshape(-1)
    _, group = np.unique(key, return_inverse=True)
    group = group.reshape(-1)
    order = np.argsort(group, kind="stable")
    firsts = np.flatnonzero(np.r_[True, np.diff(group[order]) != 0])
    values = act[rows][order]
    group_top = np.fmax.reduceat(values, firsts)
    group_count = np.add.reduceat((~np.isnan(values)).astype(np.float64), firsts)
    peers[rows] = group_count[group]
    top[rows] = group_top[group]
    return peers, top


def _gib(s: Signals, ix: Rows) -> Strs:
    return num(np.nan_to_num(s.mem[ix]) / GIB, 1)


def warmup(s: Signals, th: Thresholds) -> Match:
    """Inside the job's warm-up window on that GPU (analyze/phases.py)."""
    windows = warmup_windows(
        s.frame,
        band=th.warmup_band,
        settle=th.warmup_settle,
        memory_ratio=th.warmup_memory_ratio,
        max_warmup_s=th.warmup_max_s,
        idle_memory_bytes=th.idle_memory_bytes,
    )
    return Match(
        in_windows(s.frame, windows),
        lambda ix: text("job warm-up: activity ", num(s.act[ix]), " not yet settled"),
    )


def unknown(s: Signals, th: Thresholds) -> Match:
    """No activity metric at all: neither duty cycle nor profiling activity."""
    return Match(np.isnan(s.act), lambda ix: text("no duty-cycle or profiling activity reported"))


def idle_unallocated(s: Signals, th: Thresholds) -> Match:
    """Activity ≈ 0 (at most `idle_activity`), no process, at most `idle_memory_bytes` in use."""
    return Match(
        s.idle & ~s.held,
        lambda ix: text("activity ", num(s.act[ix]), ", no process, ", _gib(s, ix), " GiB in use"),
    )


def idle_allocated(s: Signals, th: Thresholds) -> Match:
    """Activity ≈ 0 while a process or more than `idle_memory_bytes` of memory is held."""
    return Match(
        s.idle & s.held,
        lambda ix: text("activity ", num(s.act[ix]), " while holding ", _gib(s, ix), " GiB"),
    )


def throttled(s: Signals, th: Thresholds) -> Match:
    """Busy, SM clock below `clock_throttled` of its maximum, and a power or thermal
    clock-event flag set in at least `throttle_fraction` of the samples."""
    flags = np.fmax(floats(s.frame, "throttle_power"), floats(s.frame, "throttle_thermal"))

    def reason(ix: Rows) -> Strs:
        return text(
            "SM clock at ", num(s.clock_ratio[ix]), " of max with power/thermal flags in ",
            num(flags[ix]), " of samples",
        )  # fmt: skip

    return Match(s.busy & s.slow & (np.nan_to_num(flags) >= th.throttle_fraction), reason)


def comm_bound(s: Signals, th: Thresholds) -> Match:
    """(profiling) One of ≥ 2 GPUs of a job in the same interval, busy, SM active below
    `sm_good` and at least `comm_gap` below the job's busiest GPU: it waits for a peer."""
    peers, top = _job_peers(s.frame, np.where(s.profiling, s.sm, np.nan))
    rows = (
        s.profiling
        & s.busy
        & (peers >= 2)
        & (np.nan_to_num(s.sm, nan=1.0) < th.sm_good)
        & (np.nan_to_num(top - s.sm) >= th.comm_gap)
    )
    return Match(
        rows,
        lambda ix: text(
            "SM active ", num(s.sm[ix]), " vs ", num(top[ix]), " on the job's busiest GPU"
        ),
    )


def input_bound(s: Signals, th: Thresholds) -> Match:
    """A live process, activity below `sm_good`, and starved: the application's data wait
    ≥ `data_wait_high` where it reports one (that decides), else the host CPU at least
    `host_cpu_saturated` together with a sign of gaps (SM swinging by `sm_swing` within the
    interval, or a duty cycle below `duty_busy`): a busy host alone says nothing about one
    job."""
    host_cpu, wait = floats(s.frame, "host_cpu"), floats(s.frame, "data_wait")
    swing = floats(s.frame, "sm_active_max") - floats(s.frame, "sm_active_min")
    gaps = (s.profiling & (np.nan_to_num(swing) >= th.sm_swing)) | (
        np.nan_to_num(s.duty, nan=1.0) < th.duty_busy
    )
    starved = np.where(
        ~np.isnan(wait),
        np.nan_to_num(wait) >= th.data_wait_high,
        (np.nan_to_num(host_cpu) >= th.host_cpu_saturated) & gaps,
    )

    def reason(ix: Rows) -> Strs:
        return text(
            "activity ", num(s.act[ix]), " < ", str(th.sm_good), " with host CPU ",
            num(host_cpu[ix]), ", data wait ", num(wait[ix]), ", SM swing ", num(swing[ix]),
        )  # fmt: skip

    return Match((s.procs > 0) & (np.nan_to_num(s.act, nan=1.0) < th.sm_good) & starved, reason)


def hollow_busy(s: Signals, th: Thresholds) -> Match:
    """(profiling) Duty ≥ `duty_busy` but SM active < `sm_low` (tiny kernels, launch-bound);
    without SM activity, graphics-engine activity stands in."""

    def reason(ix: Rows) -> Strs:
        name = np.where(np.isnan(s.sm_raw[ix]), "graphics-engine active", "SM active")
        return text(
            "duty ", num(s.duty[ix]), " but ", pa.array(name), " ", num(s.sm[ix]), " < ",
            str(th.sm_low),
        )  # fmt: skip

    rows = s.profiling & (np.nan_to_num(s.duty) >= th.duty_busy) & (np.nan_to_num(s.sm) < th.sm_low)
    return Match(rows, reason)


def memory_bound(s: Signals, th: Thresholds) -> Match:
    """(profiling) DRAM active ≥ `dram_bound` (memory-copy ≥ `mem_copy_bound` when DRAM
    activity is absent) while every math pipe is below `pipes_low`."""
    pipes = np.fmax(np.fmax(s.tensor, s.fp32), np.fmax(s.fp16, s.fp64))
    traffic = np.where(np.isnan(s.dram), s.copy >= th.mem_copy_bound, s.dram >= th.dram_bound)

    def reason(ix: Rows) -> Strs:
        return text(
            "DRAM active ", num(s.dram[ix]), ", mem-copy ", num(s.copy[ix]), ", pipes ",
            num(pipes[ix]),
        )  # fmt: skip

    return Match(s.profiling & traffic & (np.nan_to_num(pipes) < th.pipes_low), reason)


def compute_fp32(s: Signals, th: Thresholds) -> Match:
    """(profiling) FP32 pipe ≥ `fp32_high` while tensor < `tensor_min` (no AMP or TF32)."""

    def reason(ix: Rows) -> Strs:
        return text(
            "FP32 pipe ", num(s.fp32[ix]), " but tensor ", num(s.tensor[ix]), " < ",
            str(th.tensor_min),
        )  # fmt: skip

    fp32 = np.nan_to_num(s.fp32) >= th.fp32_high
    return Match(s.profiling & fp32 & (np.nan_to_num(s.tensor) < th.tensor_min), reason)


def compute_tensor(s: Signals, th: Thresholds) -> Match:
    """(profiling) Tensor pipe ≥ `tensor_min`."""
    return Match(
        s.profiling & (np.nan_to_num(s.tensor) >= th.tensor_min),
        lambda ix: text("tensor active ", num(s.tensor[ix]), ", SM active ", num(s.sm[ix])),
    )


def busy(s: Signals, th: Thresholds) -> Match:
    """Every row: kernels ran, and the metrics at hand say no more (duty cycle only, or no
    pipe stands out). The last rule, so it decides what no other rule did."""

    def reason(ix: Rows) -> Strs:
        base = np.where(
            s.profiling[ix],
            "kernels ran; no pipe stands out",
            "duty cycle only: kernels ran, no profiling metrics to say more",
        )
        return text(pa.array(base), " (duty ", num(s.duty[ix]), ")")

    return Match(np.ones(s.frame.num_rows, dtype=bool), reason)


Rule = Callable[[Signals, Thresholds], Match]

# (state, rule) in precedence order: the first rule that matches a row decides its state.
RULES: tuple[tuple[str, Rule], ...] = (
    ("warmup", warmup),
    ("unknown", unknown),
    ("idle_unallocated", idle_unallocated),
    ("idle_allocated", idle_allocated),
    ("throttled", throttled),
    ("comm_bound", comm_bound),
    ("input_bound", input_bound),
    ("hollow_busy", hollow_busy),
    ("memory_bound", memory_bound),
    ("compute_fp32", compute_fp32),
    ("compute_tensor", compute_tensor),
    ("busy", busy),
)
