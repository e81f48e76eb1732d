"""What each GPU interval was doing: one state, the evidence, and the useful work done.

`classify(frame)` adds to an interval frame (analyze/schema.py):
- `state`: one of `schema.STATES`, by the first rule that matches, in this order:
  1. `warmup`: inside the job's warm-up window (analyze/phases.py);
  2. `unknown`: no activity metric at all (neither duty cycle nor profiling activity);
  3. `idle_unallocated`: no process, memory at most `idle_memory_bytes`, activity ≈ 0;
  4. `idle_allocated`: a process or memory held, activity ≈ 0;
  5. `throttled`: busy, SM clock below `clock_throttled` of its maximum, and a power or thermal
     clock-event flag set in at least `throttle_fraction` of the samples;
  6. `comm_bound` (profiling): one of ≥ 2 GPUs of a job in the same interval, busy, SM active
     below `sm_good` and at least `comm_gap` below the job's busiest GPU (it waits for a peer);
  7. `input_bound`: a live process, activity below `sm_good`, and either the application's
     data wait ≥ `data_wait_high` (when it reports one, that decides) or, without it, the host
     CPU saturated while the GPU shows gaps (SM swinging by `sm_swing`, or duty below busy);
  8. `hollow_busy` (profiling): duty ≥ `duty_busy` but SM active < `sm_low` (SM active absent:
     graphics-engine active, an upper bound of it, stands in);
  9. `memory_bound` (profiling): DRAM active ≥ `dram_bound` (or memory-copy ≥ `mem_copy_bound`
     when DRAM activity is absent) while every math pipe is below `pipes_low`;
  10. `compute_fp32` (profiling): FP32 pipe ≥ `fp32_high` while tensor < `tensor_min`;
  11. `compute_tensor` (profiling): tensor pipe ≥ `tensor_min`;
  12. `busy`: kernels ran, and the metrics at hand say no more (duty cycle only, or no pipe
      stands out).
- `state_reason`: the numbers behind it, e.g. "duty 0.94 but SM active 0.30 < 0.5";
- `tier`: "profiling" (SM, graphics-engine or tensor activity present), "basic" (duty cycle
  only) or "none";
- `power_capped`: busy, power ≥ `power_capped_ratio` of the limit and the SM clock below
  `clock_throttled` of its maximum, flags or not (limit and maximum clock from the frame, else
  from the datasheet in analyze/peaks.py); null when a figure is missing. Shown in the reason.

`useful_work(frame)` adds `achieved_tflops` and `useful_ratio`; `mfu` is PaLM's model FLOPs
utilisation. docs/analysis/states.md explains each rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze import peaks as peak_table
from gpulens.analyze.phases import activity, floats, in_windows, warmup_windows

GIB = 2**30


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Rule thresholds; defaults from DESIGN.md's reference list (NVIDIA DCGM guidance,
    jobstats), all overridable."""

    sm_good: float = 0.8  # DCGM: SM active >= 0.8 is necessary for effective use
    sm_low: float = 0.5  # DCGM: < 0.5 likely means ineffective use
    duty_busy: float = 0.8  # duty cycle that counts as "busy" for hollow_busy
    busy_min: float = 0.5  # activity that counts as busy for throttling and comm_bound
    idle_activity: float = 0.05  # activity at or below this is idle
    idle_memory_bytes: float = 256 * 2**20  # memory beyond the driver's that means "held"
    dram_bound: float = 0.5  # DCGM: DRAM activity saturates near 0.8
    mem_copy_bound: float = 0.7
    pipes_low: float = 0.5
    tensor_min: float = 0.1
    fp32_high: float = 0.3
    clock_throttled: float = 0.9
    throttle_fraction: float = 0.5
    power_capped_ratio: float = 0.95
    host_cpu_saturated: float = 0.9
    data_wait_high: float = 0.2
    sm_swing: float = 0.35
    comm_gap: float = 0.1
    jobstats_red: float = 0.15  # jobstats: GPU util < 15% is red (for rules built on states)
    jobstats_warning: float = 0.25  # jobstats: < 25% warns
    warmup_band: float = 0.1
    warmup_settle: int = 2
    warmup_memory_ratio: float = 0.9
    warmup_max_s: float = 900.0


Strs = Any  # a pyarrow string Array or ChunkedArray (pyarrow ships no type hints)


def _num(values: np.ndarray, digits: int = 2) -> pa.Array:
    """Numbers as short text ("0.95"), "n/a" for NaN."""
    arr = pa.array(np.round(values, digits), type=pa.float64(), from_pandas=True)
    return pc.fill_null(pc.cast(arr, pa.string()), "n/a")


def _text(*parts: str | Strs) -> Strs:
    pieces = [pa.scalar(p) if isinstance(p, str) else p for p in parts]
    return pc.binary_join_element_wise(*pieces, "")


def _model_codes(frame: pa.Table) -> tuple[np.ndarray, list[Any]]:
    """(code per row, model per code) of `gpu_model` (None for null or a missing column)."""
    if "gpu_model" not in frame.column_names or frame.num_rows == 0:
        return np.zeros(frame.num_rows, dtype=np.int64), [None]
    col = frame.column("gpu_model")
    if pa.types.is_dictionary(col.type):
        col = pc.cast(col, col.type.value_type)
    encoded = pc.dictionary_encode(col, null_encoding="encode").combine_chunks()
    code = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return code, encoded.dictionary.to_pylist() or [None]


Ix = np.ndarray  # row indices


def _scatter(n: int, parts: list[tuple[Ix, Callable[[Ix], Strs]]]) -> Strs:
    """A string array of `n` rows assembled from `parts`: (row indices, text builder for those
    rows); every row is in exactly one part (empty parts are skipped)."""
    if n == 0:
        return pa.array([], type=pa.string())
    chunks: list[pa.Array] = []
    order: list[Ix] = []
    for ix, build in parts:
        if ix.size == 0:
            continue
        text = build(ix)
        if isinstance(text, pa.Scalar):
            text = pa.repeat(text, ix.size)
        elif isinstance(text, pa.ChunkedArray):
            text = text.combine_chunks()
        chunks.append(text.cast(pa.string()))
        order.append(ix)
    where = np.concatenate(order)
    inverse = np.empty(n, dtype=np.int64)
    inverse[where] = np.arange(n)
    return pa.concat_arrays(chunks).take(pa.array(inverse))


def _clock_facts(frame: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(maximum SM clock in Hz, power limit in W) per row: the frame's, else the datasheet's."""
    max_clock = floats(frame, "sm_clock_max_hz")
    limit = floats(frame, "power_limit_w")
    if not (np.isnan(max_clock).any() or np.isnan(limit).any()):
        return max_clock, limit
    code, models = _model_codes(frame)
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


def classify(frame: pa.Table, thresholds: Thresholds = Thresholds()) -> pa.Table:
    """The frame with `state`, `state_reason`, `tier` and `power_capped` added."""
    th = thresholds
    n = frame.num_rows
    duty = floats(frame, "duty")
    sm_raw = floats(frame, "sm_active")
    gr = floats(frame, "graphics_active")
    sm = np.where(np.isnan(sm_raw), gr, sm_raw)
    tensor, fp32 = floats(frame, "tensor_active"), floats(frame, "fp32_active")
    fp16, fp64 = floats(frame, "fp16_active"), floats(frame, "fp64_active")
    dram, copy = floats(frame, "dram_active"), floats(frame, "mem_copy")
    act = activity(frame)
    profiling = ~np.isnan(sm) | ~np.isnan(tensor)
    tier = np.where(profiling, "profiling", np.where(np.isnan(duty), "none", "basic"))
    busy_level = np.fmax(duty, sm)  # fmax ignores one NaN
    procs = np.nan_to_num(floats(frame, "processes"))
    mem = np.fmax(floats(frame, "memory_used_bytes"), floats(frame, "process_memory_bytes"))
    held = (procs > 0) | (np.nan_to_num(mem) > th.idle_memory_bytes)
    idle = np.nan_to_num(busy_level, nan=1.0) <= th.idle_activity

    clock = floats(frame, "sm_clock_hz")
    max_clock, limit = _clock_facts(frame)
    clock_ratio = clock / max_clock
    power = floats(frame, "power_w")
    flags = np.fmax(floats(frame, "throttle_power"), floats(frame, "throttle_thermal"))
    busy = np.nan_to_num(busy_level) >= th.busy_min
    slow = np.nan_to_num(clock_ratio, nan=1.0) < th.clock_throttled
    throttled = busy & slow & (np.nan_to_num(flags) >= th.throttle_fraction)
    capped_known = ~np.isnan(power) & ~np.isnan(limit) & ~np.isnan(clock_ratio)
    capped = busy & capped_known & (power >= th.power_capped_ratio * limit) & slow

    peers, top = _job_peers(frame, np.where(profiling, sm, np.nan))
    comm = (
        profiling
        & busy
        & (peers >= 2)
        & (np.nan_to_num(sm, nan=1.0) < th.sm_good)
        & (np.nan_to_num(top - sm) >= th.comm_gap)
    )
    host_cpu, wait = floats(frame, "host_cpu"), floats(frame, "data_wait")
    swing = floats(frame, "sm_active_max") - floats(frame, "sm_active_min")
    # The job's own data wait, where the application reports it, decides; only without it does
    # a saturated host CPU count, and then together with a sign of gaps (SM swinging within the
    # interval, or a duty cycle below busy): a busy host alone says nothing about one job.
    wait_known = ~np.isnan(wait)
    gaps = (profiling & (np.nan_to_num(swing) >= th.sm_swing)) | (
        np.nan_to_num(duty, nan=1.0) < th.duty_busy
    )
    starved = np.where(
        wait_known,
        np.nan_to_num(wait) >= th.data_wait_high,
        (np.nan_to_num(host_cpu) >= th.host_cpu_saturated) & gaps,
    )
    input_bound = (procs > 0) & (np.nan_to_num(act, nan=1.0) < th.sm_good) & starved
    hollow = profiling & (np.nan_to_num(duty) >= th.duty_busy) & (np.nan_to_num(sm) < th.sm_low)
    pipes = np.fmax(np.fmax(tensor, fp32), np.fmax(fp16, fp64))
    memory_signal = np.where(np.isnan(dram), copy >= th.mem_copy_bound, dram >= th.dram_bound)
    memory = profiling & memory_signal & (np.nan_to_num(pipes) < th.pipes_low)
    fp32_bound = (
        profiling & (np.nan_to_num(fp32) >= th.fp32_high) & (np.nan_to_num(tensor) < th.tensor_min)
    )
    compute = profiling & (np.nan_to_num(tensor) >= th.tensor_min)

    windows = warmup_windows(
        frame,
        band=th.warmup_band,
        settle=th.warmup_settle,
        memory_ratio=th.warmup_memory_ratio,
        max_warmup_s=th.warmup_max_s,
        idle_memory_bytes=th.idle_memory_bytes,
    )
    warm = in_windows(frame, windows)
    unknown = np.isnan(act)

    # Reason texts are built only for the rows whose state they explain (a row's reason is
    # the first matching rule's text); `ix` is the row indices of one rule's rows.
    def d(ix: Ix) -> Strs:
        return _num(duty[ix])

    def s(ix: Ix) -> Strs:
        return _num(sm[ix])

    def t(ix: Ix) -> Strs:
        return _num(tensor[ix])

    def a(ix: Ix) -> Strs:
        return _num(act[ix])

    def gib(ix: Ix) -> Strs:
        return _num(np.nan_to_num(mem[ix]) / GIB, 1)

    def sm_name(ix: Ix) -> Strs:
        return pa.array(np.where(np.isnan(sm_raw[ix]), "graphics-engine active", "SM active"))

    # (state, mask, reason) in precedence order; the first matching rule wins.
    rules: list[tuple[str, np.ndarray, Callable[[Ix], Strs]]] = [
        ("warmup", warm, lambda ix: _text("job warm-up: activity ", a(ix), " not yet settled")),
        ("unknown", unknown, lambda ix: _text("no duty-cycle or profiling activity reported")),
        (
            "idle_unallocated",
            idle & ~held,
            lambda ix: _text("activity ", a(ix), ", no process, ", gib(ix), " GiB in use"),
        ),
        (
            "idle_allocated",
            idle,
            lambda ix: _text("activity ", a(ix), " while holding ", gib(ix), " GiB"),
        ),
        (
            "throttled",
            throttled,
            lambda ix: _text(
                "SM clock at ",
                _num(clock_ratio[ix]),
                " of max with power/thermal flags in ",
                _num(flags[ix]),
                " of samples",
            ),
        ),
        (
            "comm_bound",
            comm,
            lambda ix: _text(
                "SM active ", s(ix), " vs ", _num(top[ix]), " on the job's busiest GPU"
            ),
        ),
        (
            "input_bound",
            input_bound,
            lambda ix: _text(
                "activity ",
                a(ix),
                " < ",
                str(th.sm_good),
                " with host CPU ",
                _num(host_cpu[ix]),
                ", data wait ",
                _num(wait[ix]),
                ", SM swing ",
                _num(swing[ix]),
            ),
        ),
        (
            "hollow_busy",
            hollow,
            lambda ix: _text(
                "duty ", d(ix), " but ", sm_name(ix), " ", s(ix), " < ", str(th.sm_low)
            ),
        ),
        (
            "memory_bound",
            memory,
            lambda ix: _text(
                "DRAM active ",
                _num(dram[ix]),
                ", mem-copy ",
                _num(copy[ix]),
                ", pipes ",
                _num(pipes[ix]),
            ),
        ),
        (
            "compute_fp32",
            fp32_bound,
            lambda ix: _text(
                "FP32 pipe ", _num(fp32[ix]), " but tensor ", t(ix), " < ", str(th.tensor_min)
            ),
        ),
        (
            "compute_tensor",
            compute,
            lambda ix: _text("tensor active ", t(ix), ", SM active ", s(ix)),
        ),
    ]

    def busy_text(ix: Ix) -> Strs:
        base = pa.array(
            np.where(
                profiling[ix],
                "kernels ran; no pipe stands out",
                "duty cycle only: kernels ran, no profiling metrics to say more",
            )
        )
        return _text(base, " (duty ", d(ix), ")")

    state = np.full(n, "busy", dtype=object)
    which = np.full(n, len(rules), dtype=np.int64)  # the rule that decided each row
    decided = np.zeros(n, dtype=bool)
    for i, (name, mask, _text_of) in enumerate(rules):
        pick = mask & ~decided
        state[pick] = name
        which[pick] = i
        decided |= mask
    builders = [text_of for _, _, text_of in rules] + [busy_text]
    reason = _scatter(n, [(np.flatnonzero(which == i), f) for i, f in enumerate(builders)])

    def capped_text(ix: Ix) -> Strs:
        cap_note = _text(
            "; power-capped: ", _num(power[ix], 1), " W of ", _num(limit[ix], 1), " W, SM clock ",
            _num(clock[ix] / 1e6, 0), " of ", _num(max_clock[ix] / 1e6, 0), " MHz",
        )  # fmt: skip
        return _text(reason.take(pa.array(ix)), cap_note)

    if capped.any():
        rows = np.flatnonzero(capped)
        others = np.flatnonzero(~capped)
        reason = _scatter(n, [(rows, capped_text), (others, lambda ix: reason.take(pa.array(ix)))])
    out = frame
    for name, values in (
        ("state", pa.array(state.astype(str), type=pa.string())),
        ("state_reason", reason),
        ("tier", pa.array(tier, type=pa.string())),
        ("power_capped", pa.array(capped, mask=~capped_known)),
    ):
        if name in out.column_names:
            out = out.drop_columns([name])
        out = out.append_column(name, values)
    return out


Lookup = Callable[[str | None], peak_table.GpuSpec | None]


def useful_work(frame: pa.Table, peaks: Lookup = peak_table.lookup) -> pa.Table:
    """The frame with `achieved_tflops` and `useful_ratio` added.

    - `achieved_tflops` = tensor_active × dense tensor peak (bf16, or fp16 before Ampere) ×
      clock factor, where the clock factor is sm_clock / the datasheet's boost clock (or
      sm_clock / sm_clock_max when the datasheet gives none). Null for an unknown model or a
      missing metric.
    - `useful_ratio` = the busiest math pipe's activity (max of tensor, FP32, FP16, FP64 pipe
      activity) × min(1, sm_clock / sm_clock_max), clipped to 0..1: the fraction of full-clock
      cycles in which the GPU's busiest arithmetic pipe issued work. It counts FP32-only work
      as useful (its low tensor use is a separate finding) and memory traffic as not. Null
      without profiling metrics: the duty cycle is never used as useful work.
    """
    code, models = _model_codes(frame)
    clock = floats(frame, "sm_clock_hz")
    clock_max = floats(frame, "sm_clock_max_hz")
    per_model = np.empty((len(models), 2))
    for m, model in enumerate(models):
        spec = peaks(model) if isinstance(model, str) else None
        head = peak_table.tensor_peak(spec) if spec is not None else None
        b = spec.boost_clock_mhz if spec is not None and spec.boost_clock_mhz else None
        per_model[m] = (head[1] if head else np.nan, b * 1e6 if b else np.nan)
    peak, boost = per_model[code, 0], per_model[code, 1]
    factor = np.where(np.isnan(boost), clock / clock_max, clock / boost)
    tensor = floats(frame, "tensor_active")
    achieved = tensor * peak * factor
    pipes = np.fmax(
        np.fmax(tensor, floats(frame, "fp32_active")),
        np.fmax(floats(frame, "fp16_active"), floats(frame, "fp64_active")),
    )
    clock_share = np.minimum(1.0, np.where(np.isnan(clock_max), clock / boost, clock / clock_max))
    clock_share = np.where(np.isnan(clock_share), 1.0, clock_share)
    ratio = np.clip(pipes * clock_share, 0.0, 1.0)
    out = frame
    for name, values in (("achieved_tflops", achieved), ("useful_ratio", ratio)):
        if name in out.column_names:
            out = out.drop_columns([name])
        out = out.append_column(name, pa.array(values, type=pa.float64(), from_pandas=True))
    return out


def mfu(
    tokens_per_s: float,
    n_params: float,
    n_gpus: int,
    peak: float,
    layers: int | None = None,
    hidden: int | None = None,
    seq: int | None = None,
) -> float:
    """Model FLOPs utilisation (PaLM, Chowdhery et al. 2022, appendix B):
    tokens/s × (6N + 12·L·H·T) / (GPUs × peak FLOP/s), with `peak` in TFLOP/s per GPU (dense).
    The attention term 12·L·H·T is added only when layers, hidden size and sequence length are
    all given (H = heads × head size)."""
    if n_gpus <= 0 or peak <= 0:
        raise ValueError(f"need n_gpus > 0 and peak > 0, got n_gpus={n_gpus}, peak={peak}")
    if tokens_per_s < 0 or n_params <= 0:
        raise ValueError(f"need tokens_per_s >= 0 and n_params > 0, got {tokens_per_s}, {n_params}")
    per_token = 6.0 * n_params
    if layers is not None and hidden is not None and seq is not None:
        per_token += 12.0 * layers * hidden * seq
    return tokens_per_s * per_token / (n_gpus * peak * 1e12)
