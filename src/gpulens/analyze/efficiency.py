"""What each GPU interval was doing: one state, the evidence, and the useful work done.

`classify(frame)` adds to an interval frame (analyze/schema.py):
- `state`: one of `schema.STATES`, by the first rule that matches (`states.RULES`, one
  function per state in analyze/states.py), in this order:
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

import numpy as np
import pyarrow as pa

from gpulens.analyze import peaks as peak_table
from gpulens.analyze._arrays import label_codes
from gpulens.analyze.phases import floats
from gpulens.analyze.states import RULES, Reason, Rows, Signals, Strs, num, text
from gpulens.analyze.states import Thresholds as Thresholds  # the rules' thresholds, exported

_STATE_NAMES = pa.array([name for name, _ in RULES], type=pa.string())
_DEFAULTS = Thresholds()


def classify(frame: pa.Table, thresholds: Thresholds = _DEFAULTS) -> pa.Table:
    """The frame with `state`, `state_reason`, `tier` and `power_capped` added."""
    th = thresholds
    n = frame.num_rows
    s = Signals.of(frame, th)
    which = np.full(n, -1, dtype=np.int64)  # the rule that decided each row
    reasons: list[Reason] = []
    for _, rule in RULES:  # precedence order: the first rule that matches decides
        match = rule(s, th)
        which[match.rows & (which < 0)] = len(reasons)
        reasons.append(match.reason)
    # a reason text is built only for the rows whose state it explains
    reason = _scatter(n, [(np.flatnonzero(which == i), r) for i, r in enumerate(reasons)])
    capped_known = ~np.isnan(s.power) & ~np.isnan(s.limit) & ~np.isnan(s.clock_ratio)
    capped = s.busy & capped_known & (s.power >= th.power_capped_ratio * s.limit) & s.slow
    if capped.any():
        reason = _with_capped_note(n, reason, capped, s)
    tier = np.where(s.profiling, "profiling", np.where(np.isnan(s.duty), "none", "basic"))
    out = frame
    for name, values in (
        ("state", _STATE_NAMES.take(pa.array(which))),
        ("state_reason", reason),
        ("tier", pa.array(tier, type=pa.string())),
        ("power_capped", pa.array(capped, mask=~capped_known)),
    ):
        if name in out.column_names:
            out = out.drop_columns([name])
        out = out.append_column(name, values)
    return out


def _with_capped_note(n: int, reason: Strs, capped: np.ndarray, s: Signals) -> Strs:
    """`reason` with "; power-capped: ..." appended on the `capped` rows."""

    def capped_text(ix: Rows) -> Strs:
        cap_note = text(
            "; power-capped: ", num(s.power[ix], 1), " W of ", num(s.limit[ix], 1), " W, SM clock ",
            num(s.clock[ix] / 1e6, 0), " of ", num(s.max_clock[ix] / 1e6, 0), " MHz",
        )  # fmt: skip
        return text(reason.take(pa.array(ix)), cap_note)

    rows, others = np.flatnonzero(capped), np.flatnonzero(~capped)
    return _scatter(n, [(rows, capped_text), (others, lambda ix: reason.take(pa.array(ix)))])


def _scatter(n: int, parts: list[tuple[Rows, Callable[[Rows], Strs]]]) -> Strs:
    """A string array of `n` rows assembled from `parts`: (row indices, text builder for those
    rows); every row is in exactly one part (empty parts are skipped)."""
    if n == 0:
        return pa.array([], type=pa.string())
    chunks: list[pa.Array] = []
    order: list[Rows] = []
    for ix, build in parts:
        if ix.size == 0:
            continue
        piece = build(ix)
        if isinstance(piece, pa.Scalar):
            piece = pa.repeat(piece, ix.size)
        elif isinstance(piece, pa.ChunkedArray):
            piece = piece.combine_chunks()
        chunks.append(piece.cast(pa.string()))
        order.append(ix)
    where = np.concatenate(order)
    inverse = np.empty(n, dtype=np.int64)
    inverse[where] = np.arange(n)
    return pa.concat_arrays(chunks).take(pa.array(inverse))


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
    code, models = label_codes(frame, "gpu_model")
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
