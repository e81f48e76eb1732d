"""The helper the state-based rules share: runs of intervals in a state, and their finding.

A run is a maximal stretch of consecutive intervals of one job (or, for rows without a job,
one GPU entity) whose rows match a rule's mask; the job's GPUs are taken together, so a
4-GPU job gives one finding, not four. A run counts when it lasts the rule's minimum duration
(`FindingThresholds.duration_for`), or when it covers everything the frame shows of that job
or GPU outside its warm-up (a single snapshot, such as one scraped dcgm-exporter page, is then
judged on its one interval). `finding` turns a run into a `Finding` with its subject labels,
window, impact (from the waste annotation) and a severity from impact and duration; the
duration-based rules pass the severity of their ladder instead (`FindingThresholds.level`).

A run's duration is the time its intervals cover, not the count of whole intervals: an
interval that holds fewer samples than the GPU's full intervals (the job started or the
recording stopped inside it) counts for that share of its length. A spell of a given length
then measures the same whatever the phase of the interval grid against it, up to the one
interval where the state changes. `with_edges` reads that interval too: the duration-ladder
rules pass `qualifying` a signal that tells their state from its surroundings, and each run's
first and last intervals and their outside neighbours count in its duration for the share of
their covered seconds the signal puts in the state, so the ladder's severity does not depend
on the grid's phase either. Evidence means (`mean`) weight each interval by the seconds it
covers, so a partly sampled interval counts for its samples, not for its whole length; a
run's means leave out its boundary intervals that hold a mix of both states.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpulens.analyze._arrays import split_at
from gpulens.findings.columns import (
    covered,
    ends,
    floats,
    in_states,
    label_codes,
    owner_codes,
    starts,
    step0,
)
from gpulens.findings.context import Context
from gpulens.findings.model import Evidence, Finding, Impact, Severity
from gpulens.numbers import is_nan

SUBJECT_LABELS: tuple[str, ...] = (
    "job_id",
    "user",
    "project",
    "team",
    "engine",
    "process_name",
    "namespace",
    "pod",
    "host",
    "gpu_model",
    "gpu_uuid",
    "gpu_index",
    "mig_instance",
)
GB = 1e9


@dataclass(frozen=True, slots=True)
class Run:
    """Rows (indices into ctx.frame) of one owner in a state, over [start_ns, end_ns);
    `covered_s`: the seconds its intervals cover (None: the whole window); `weighted`: the
    rows its evidence means read and the seconds each counts for (None: `rows` by the seconds
    they cover; `with_edges` sets it)."""

    rows: np.ndarray
    start_ns: int
    end_ns: int
    whole: bool  # covers all the owner's non-warm-up intervals
    covered_s: float | None = None
    weighted: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def duration_s(self) -> float:
        if self.covered_s is not None:
            return self.covered_s
        return (self.end_ns - self.start_ns) / 1e9


def _encode(values: Sequence[str]) -> np.ndarray:
    seen: dict[str, int] = {}
    return np.fromiter(
        (seen.setdefault(v, len(seen)) for v in values), dtype=np.int64, count=len(values)
    )


def _spans(own: np.ndarray, start: np.ndarray, end: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per owner code (0 .. own.max()), the [first start, last end] of its `rows` as an
    (owners, 2) array; owners without rows get [int64 max, int64 min]."""
    size = int(own.max()) + 1 if own.size else 0
    lo = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(size, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, own[rows], start[rows])
    np.maximum.at(hi, own[rows], end[rows])
    return np.stack([lo, hi], axis=1)


def _owner_windows(
    ctx: Context, own: np.ndarray, hit: np.ndarray, cache: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(first start, last end) per owner code: the span of its steady (not warm-up) rows, else
    of its `hit` rows. `cache`: `own` is `owner_codes`, whose steady spans are kept."""
    start, end = starts(ctx), ends(ctx)

    def steady_spans() -> np.ndarray:
        return _spans(own, start, end, np.flatnonzero(~in_states(ctx, "warmup")))

    span = ctx.cached("owner_spans", steady_spans) if cache else steady_spans()
    known = span[:, 0] <= span[:, 1]
    hit_span = _spans(own, start, end, hit)
    return np.where(known, span[:, 0], hit_span[:, 0]), np.where(known, span[:, 1], hit_span[:, 1])


def runs(
    ctx: Context, mask: np.ndarray, owner: Sequence[str] | np.ndarray | None = None
) -> list[Run]:
    """Maximal stretches of consecutive intervals per owner where `mask` holds (`owner`: per
    row, a name or an integer code; default `owner_codes`)."""
    if not mask.any():
        return []
    if owner is None:
        own = owner_codes(ctx)
    elif isinstance(owner, np.ndarray) and owner.dtype.kind in "iu":
        own = owner.astype(np.int64, copy=False)
    else:
        own = _encode([str(o) for o in owner])
    start, end = starts(ctx), ends(ctx)
    hit = np.flatnonzero(mask)
    first, last = _owner_windows(ctx, own, hit, cache=owner is None)
    # buckets: the hit rows of one owner that share a start (by owner, start, row)
    rows = hit[np.lexsort((hit, start[hit], own[hit]))]
    o, st, en = own[rows], start[rows], end[rows]
    new_bucket = np.r_[True, (o[1:] != o[:-1]) | (st[1:] != st[:-1])]
    heads = np.flatnonzero(new_bucket)
    b_start, b_end, b_own = st[heads], np.maximum.reduceat(en, heads), o[heads]
    b_cover = np.maximum.reduceat(covered(ctx)[rows], heads)  # a job's GPUs share the time
    # a gap: the next interval starts more than half an interval after this one ends
    gap = b_start[1:] > b_end[:-1] + (b_end[:-1] - b_start[:-1]) // 2
    new_run = np.r_[True, (b_own[1:] != b_own[:-1]) | gap]
    run_of_bucket = np.cumsum(new_run) - 1
    firsts = np.flatnonzero(new_run)
    lasts = np.r_[firsts[1:], heads.size] - 1
    a, b = b_start[firsts], b_end[lasts]
    cover = np.add.reduceat(b_cover, firsts) if firsts.size else np.zeros(0)
    run_of_row = run_of_bucket[np.cumsum(new_bucket) - 1]
    inside = st < b[run_of_row]  # (all but rows of intervals without a step)
    rows, run_of_row = rows[inside], run_of_row[inside]
    by_run = np.lexsort((rows, run_of_row))  # each run's rows ascending
    rows, run_of_row = rows[by_run], run_of_row[by_run]
    cuts = np.flatnonzero(np.diff(run_of_row)) + 1
    present = run_of_row[np.r_[0, cuts]] if rows.size else np.zeros(0, dtype=np.int64)
    parts = split_at(rows, cuts) if rows.size else []
    owner_of = b_own[firsts]
    whole = (a <= first[owner_of]) & (b >= last[owner_of])
    out = [
        Run(r, int(a[k]), int(b[k]), bool(whole[k]), float(cover[k]))
        for k, r in zip(present.tolist(), parts, strict=True)
    ]
    return sorted(out, key=lambda r: (r.start_ns, int(r.rows[0])))


def qualifying(
    ctx: Context,
    rule_id: str,
    mask: np.ndarray,
    min_s: float | None = None,
    signal: np.ndarray | None = None,
    owner: np.ndarray | None = None,
) -> list[Run]:
    """Runs of `mask` long enough for `rule_id` (or covering their owner's whole window);
    with `signal`, each run `with_edges` first, so its length counts the state-change
    intervals' shares (`owner`: per row, an integer owner code; default `owner_codes`)."""
    need = ctx.thresholds.duration_for(rule_id) if min_s is None else min_s
    whole = ctx.thresholds.whole_window
    found = runs(ctx, mask, owner)
    if signal is not None and found:
        own, index = _owner_index(ctx, owner)
        found = [_with_edges(ctx, r, signal, own, index) for r in found]
    return [r for r in found if r.duration_s >= need or (whole and r.whole)]


def _bucket_index(ctx: Context, own: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted (owner, start) keys, row order) to find an owner's rows at a start."""
    key = own.astype(np.int64) * (1 << 40) + (starts(ctx) // 1_000_000_000)
    order = np.argsort(key, kind="stable")
    return key[order], order


def _rows_at(index: tuple[np.ndarray, np.ndarray], owner: int, start_ns: int) -> np.ndarray:
    keys, order = index
    key = owner * (1 << 40) + start_ns // 1_000_000_000
    lo, hi = np.searchsorted(keys, key, "left"), np.searchsorted(keys, key, "right")
    return np.asarray(order[lo:hi])


def with_edges(ctx: Context, run: Run, signal: np.ndarray, owner: np.ndarray | None = None) -> Run:
    """`run` with the intervals where its state changes counted for their share in it.

    The interval where the state changes holds a mix of both states but is classified as one,
    so a run gains or loses up to one interval with the phase of the interval grid. On each
    side, the run's boundary interval (its first, or its last) and the owner's interval just
    outside it are read as mixes of the levels of `signal` (a per-row value that tells the
    run's state from its surroundings, e.g. activity) inside the run (the interval next to the
    boundary one, or the boundary one in a one-interval run) and beyond the outside one: an
    interval at x is (outer - x) / (outer - inner) in the state, clipped to 0..1. The run's
    duration counts the boundary interval for that share of the seconds it covers and adds the
    outside one's share. Its evidence means (`weighted`) leave out a boundary interval read as
    partly outside the state: its figures mix both states, and its part in the state is taken
    to look like the rest of the run (the outside interval, classified out of the state, is
    not read either); a run of nothing but such intervals weighs them by their shares. A side
    without both outside intervals or without contrast between the levels is left as it is
    (the boundary interval counts whole). `owner`: per row, an integer owner code (the rows
    `runs` grouped the run by; default `owner_codes`)."""
    return _with_edges(ctx, run, signal, *_owner_index(ctx, owner))


def _owner_index(
    ctx: Context, owner: np.ndarray | None
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """(owner code per row, `_bucket_index` of those codes); `owner_codes`' index is cached."""
    if owner is None:
        own = owner_codes(ctx)
        return own, ctx.cached("bucket_index", _bucket_index, ctx, own)
    own = owner.astype(np.int64, copy=False)
    return own, _bucket_index(ctx, own)


def _with_edges(
    ctx: Context,
    run: Run,
    signal: np.ndarray,
    own: np.ndarray,
    index: tuple[np.ndarray, np.ndarray],
) -> Run:
    if run.rows.size == 0:
        return run
    who = int(own[run.rows[0]])
    cover, step, start = covered(ctx), step0(ctx), starts(ctx)
    at = np.unique(start[run.rows])  # the run's interval starts, ascending
    rows, weight = run.rows, cover[run.rows].copy()
    shares = weight.copy()  # the seconds in the state, for a run of mixed intervals only
    seconds = run.duration_s
    for side, sign in ((0, -1), (-1, 1)):
        mine = start[rows] == at[side]  # the run's rows in its boundary interval
        width = round(float(np.max(step[rows[mine]])) * 1e9)
        if width <= 0:
            continue
        edge_at = int(at[side]) + sign * width
        edge = _rows_at(index, who, edge_at)
        outer = _rows_at(index, who, edge_at + sign * width)
        if edge.size == 0 or outer.size == 0:
            continue
        inner = _rows_at(index, who, int(at[side - sign] if at.size > 1 else at[side]))
        bounds = _rows_at(index, who, int(at[side]))
        x_in, x_bound, x_edge, x_out = (nanmean(signal[r]) for r in (inner, bounds, edge, outer))
        contrast = x_out - x_in
        if any(is_nan(v) for v in (x_in, x_bound, x_edge, x_out)) or abs(contrast) < 1e-6:
            continue
        bound = min(1.0, max(0.0, (x_out - x_bound) / contrast)) if at.size > 1 else 1.0
        share = min(1.0, max(0.0, (x_out - x_edge) / contrast))
        seconds += share * float(np.max(cover[edge])) - (1.0 - bound) * float(
            np.max(cover[rows[mine]])
        )
        shares[mine] *= bound
        if bound < 1.0:  # a mix of both states: its part in the state looks like the rest
            weight[mine] = 0.0
    return replace(run, covered_s=seconds, weighted=(rows, weight if weight.any() else shares))


def mean(ctx: Context, name: str | np.ndarray, rows: np.ndarray | Run) -> float:
    """Mean of column `name` (or of per-row `name` values) over `rows`, each row weighted by
    the seconds its interval covers (a `Run`: over its `weighted` rows and seconds); NaN when
    none is known."""
    if isinstance(rows, Run):
        picked, weight = rows.weighted or (rows.rows, covered(ctx)[rows.rows])
    else:
        picked, weight = rows, covered(ctx)[rows]
    x = (floats(ctx, name) if isinstance(name, str) else name)[picked]
    ok = ~np.isnan(x) & (weight > 0)
    if not ok.any():
        return float("nan")
    return float(np.add.reduce(x[ok] * weight[ok]) / np.add.reduce(weight[ok]))


def nanmean(x: np.ndarray) -> float:
    """`np.nanmean(x)` (the same sum, in the same order), NaN without a warning when all are
    NaN or `x` is empty."""
    missing = np.isnan(x)
    known = x.size - int(np.count_nonzero(missing))
    if known == 0:
        return float("nan")
    return float(np.add.reduce(np.where(missing, 0.0, x)) / known)


def peak(ctx: Context, name: str, rows: np.ndarray) -> float:
    """Largest known value of `name` over `rows` (NaN when none)."""
    x = floats(ctx, name)[rows]
    return float(np.fmax.reduce(x)) if x.size else float("nan")


def headroom_bytes(ctx: Context, rows: np.ndarray) -> float:
    """The smallest free memory any GPU of the rows had at its peak (NaN when unknown)."""
    free = floats(ctx, "memory_total_bytes")[rows] - floats(ctx, "memory_used_bytes")[rows]
    return float(np.fmin.reduce(free)) if free.size else float("nan")


def _subject_labels(ctx: Context) -> tuple[list[tuple[str, list[str | None]]], np.ndarray]:
    """The subject labels with at least one value in the frame (name, value per code) and
    their codes, one row per label."""
    present, rows = [], []
    for name in SUBJECT_LABELS:
        code, names = label_codes(ctx, name)
        if any(v is not None for v in names):
            present.append((name, names))
            rows.append(code)
    matrix = np.stack(rows) if rows else np.zeros((0, ctx.frame.num_rows), dtype=np.int64)
    return present, matrix


def subject(ctx: Context, rows: Iterable[int], **extra: str) -> dict[str, str]:
    """The labels the rows share (several values are joined with ","), only those present."""
    if isinstance(rows, np.ndarray):
        picked = rows.astype(np.int64, copy=False)
    else:
        picked = np.fromiter(rows, dtype=np.int64)
    labels, matrix = ctx.cached("subject_labels", _subject_labels, ctx)
    out: dict[str, str] = {}
    if picked.size and labels:
        codes = matrix[:, picked]
        first = codes[:, 0]
        mixed = (codes != first[:, None]).any(axis=1).tolist()
        for (name, names), several, one, i in zip(
            labels, mixed, first.tolist(), range(len(labels)), strict=True
        ):
            if several:
                values = sorted({v for k in set(codes[i].tolist()) if (v := names[k]) is not None})
                if values:
                    out[name] = ",".join(values)
            elif (v := names[one]) is not None:
                out[name] = v
    out.update(extra)
    return out


def _cost_columns(ctx: Context) -> np.ndarray:
    """wasted_s (NaN as 0), gpu_s, total_cost, energy_kwh and co2e_kg, one row each."""
    cols = ("gpu_s", "total_cost", "energy_kwh", "co2e_kg")
    return np.stack([np.nan_to_num(floats(ctx, "wasted_s")), *(floats(ctx, c) for c in cols)])


def impact(ctx: Context, rows: np.ndarray, lost_s: np.ndarray | None = None) -> Impact:
    """Wasted GPU-hours of `rows` (their `wasted_s`, or `lost_s` per row when given) and that
    share of their cost, energy and carbon, from the waste annotation."""
    # one C-ordered block per call: its rows sum as the 1-D columns would, in the same order
    block = np.ascontiguousarray(ctx.cached("cost_columns", _cost_columns, ctx)[:, rows])
    if lost_s is None:
        lost = block[0]
    else:
        lost = np.asarray(lost_s, dtype=np.float64)
        if not np.isfinite(lost).all():
            lost = np.nan_to_num(lost)
    gpu_s = block[1]
    frac = np.divide(lost, gpu_s, out=np.zeros_like(lost), where=gpu_s > 0)
    parts = block[2:] * frac  # NaN counts as 0, as np.nansum
    parts[np.isnan(parts)] = 0.0
    cost, energy, co2e = np.add.reduce(parts, axis=1).tolist()
    return Impact(
        wasted_gpu_hours=float(np.add.reduce(lost)) / 3600.0,
        cost=cost,
        currency=ctx.prices.currency,
        energy_kwh=energy,
        co2e_kg=co2e,
    )


def severity(ctx: Context, cost: Impact, duration_s: float) -> Severity:
    """Critical from `critical_gpu_hours` wasted; warning from `warning_gpu_hours` or a
    duration of `warning_duration_s`; else info."""
    t = ctx.thresholds
    if cost.wasted_gpu_hours >= t.critical_gpu_hours:
        return Severity.CRITICAL
    if cost.wasted_gpu_hours >= t.warning_gpu_hours or duration_s >= t.warning_duration_s:
        return Severity.WARNING
    return Severity.INFO


def docs(rule_id: str) -> str:
    """The docs page of a rule."""
    return f"docs/findings/{rule_id}.md"


def finding(
    ctx: Context,
    rule_id: str,
    run: Run,
    summary: str,
    evidence: Sequence[Evidence],
    recommendation: str,
    cost: Impact | None = None,
    level: Severity | None = None,
    labels: Mapping[str, str] | None = None,
) -> Finding:
    """A Finding for a run: subject from its rows (plus `labels`), its window, and impact and
    severity computed from the annotation unless given."""
    cost = cost if cost is not None else impact(ctx, run.rows)
    return Finding(
        rule_id=rule_id,
        severity=level if level is not None else severity(ctx, cost, run.duration_s),
        subject=subject(ctx, run.rows, **(labels or {})),
        window=(run.start_ns, run.end_ns),
        summary=summary,
        evidence=tuple(e for e in evidence if not is_nan(e.value)),  # unknown values left out
        impact=cost,
        recommendation=recommendation,
        docs=docs(rule_id),
    )


def gb(x: float) -> str:
    """Bytes as "12.3 GB" ("unknown" for NaN)."""
    return "unknown" if is_nan(x) else f"{x / GB:.1f} GB"


def hours(seconds: float) -> str:
    """Seconds as "1.5 h" or "12 min"."""
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"
