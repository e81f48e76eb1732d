"""The helper the state-based rules share: runs of intervals in a state, and their finding.

A run is a maximal stretch of consecutive intervals of one job (or, for rows without a job,
one GPU entity) whose rows match a rule's mask; the job's GPUs are taken together, so a
4-GPU job gives one finding, not four. A run counts when it lasts the rule's minimum duration
(`FindingThresholds.duration_for`), or when it covers everything the frame shows of that job
or GPU outside its warm-up (a single snapshot, such as one scraped dcgm-exporter page, is then
judged on its one interval). `finding` turns a run into a `Finding` with its subject labels,
window, impact (from the waste annotation) and a severity from impact and duration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.findings.context import Context
from gpulens.findings.model import Evidence, Finding, Impact, Severity

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


def floats(ctx: Context, name: str) -> np.ndarray:
    """Frame column `name` as float64 with NaN for null (all NaN when absent); cached."""

    def read() -> np.ndarray:
        if name not in ctx.frame.column_names:
            return np.full(ctx.frame.num_rows, np.nan)
        col = pc.cast(ctx.frame.column(name), pa.float64())
        return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)

    return ctx.cached(f"floats:{name}", read)


def strings(ctx: Context, name: str) -> list[str | None]:
    """Frame column `name` as Python strings (None for null or absent); cached."""

    def read() -> list[str | None]:
        if name not in ctx.frame.column_names:
            return [None] * ctx.frame.num_rows
        col = ctx.frame.column(name)
        if not pa.types.is_string(col.type):
            col = pc.cast(col, pa.string())
        return list(col.to_pylist())

    return ctx.cached(f"strings:{name}", read)


def label_codes(ctx: Context, name: str) -> tuple[np.ndarray, list[str | None]]:
    """(code per row, value per code) of frame column `name` as strings: equal values share a
    code, null (or an absent column) has its own, whose value is None; cached."""

    def read() -> tuple[np.ndarray, list[str | None]]:
        if name not in ctx.frame.column_names:
            return np.zeros(ctx.frame.num_rows, dtype=np.int64), [None]
        col = ctx.frame.column(name)
        if not pa.types.is_string(col.type):
            col = pc.cast(col, pa.string())
        encoded = pc.dictionary_encode(col, null_encoding="encode").combine_chunks()
        values: list[str | None] = encoded.dictionary.to_pylist()
        if not values:
            return np.zeros(ctx.frame.num_rows, dtype=np.int64), [None]
        idx = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        return idx, values

    return ctx.cached(f"codes:{name}", read)


def _step0(ctx: Context) -> np.ndarray:
    """Interval lengths in seconds with NaN as 0; cached."""
    return ctx.cached("step0", lambda: np.nan_to_num(floats(ctx, "step_s")))


def starts(ctx: Context) -> np.ndarray:
    """Interval starts (int64 ns)."""

    def read() -> np.ndarray:
        col = ctx.frame.column("start_ns")
        return np.asarray(pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)

    return ctx.cached("starts", read)


def ends(ctx: Context) -> np.ndarray:
    """Interval ends (int64 ns)."""
    return ctx.cached("ends", lambda: starts(ctx) + np.round(_step0(ctx) * 1e9).astype(np.int64))


def in_states(ctx: Context, *states: str) -> np.ndarray:
    """True for rows whose state is one of `states`."""
    code, values = label_codes(ctx, "state")
    want = set(states)
    hit = np.array([v in want for v in values], dtype=bool)
    return np.asarray(hit[code], dtype=bool)


def owners(ctx: Context) -> list[str]:
    """Per row, what runs group by: the job, else the GPU entity."""

    def build() -> list[str]:
        job, host = strings(ctx, "job_id"), strings(ctx, "host")
        uuid, mig = strings(ctx, "gpu_uuid"), strings(ctx, "mig_instance")
        return [
            f"job:{j}" if j is not None else f"gpu:{h}|{u}|{m}"
            for j, h, u, m in zip(job, host, uuid, mig, strict=True)
        ]

    return ctx.cached("owners", build)


@dataclass(frozen=True, slots=True)
class Run:
    """Rows (indices into ctx.frame) of one owner in a state, over [start_ns, end_ns)."""

    rows: np.ndarray
    start_ns: int
    end_ns: int
    whole: bool  # covers all the owner's non-warm-up intervals

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def combined_codes(ctx: Context, *names: str) -> np.ndarray:
    """Per row, an integer standing for its values of the label columns `names` together
    (equal combinations, equal codes; null is a value of its own); cached."""

    def build() -> np.ndarray:
        out = np.zeros(ctx.frame.num_rows, dtype=np.int64)
        for name in names:
            code, values = label_codes(ctx, name)
            out = out * len(values) + code
        _, inverse = np.unique(out, return_inverse=True)
        return np.asarray(inverse, dtype=np.int64).reshape(-1)

    return ctx.cached("combined:" + "|".join(names), build)


def owner_codes(ctx: Context) -> np.ndarray:
    """`owners` as integers: the job's code where there is a job, else one past every job
    code plus the GPU entity's code; cached."""

    def build() -> np.ndarray:
        job, jobs = label_codes(ctx, "job_id")
        gpu = combined_codes(ctx, "host", "gpu_uuid", "mig_instance")
        has_job = np.array([v is not None for v in jobs], dtype=bool)[job]
        return np.where(has_job, job, len(jobs) + gpu)

    return ctx.cached("owner_codes", build)


def _encode(values: Sequence[str]) -> np.ndarray:
    seen: dict[str, int] = {}
    return np.fromiter(
        (seen.setdefault(v, len(seen)) for v in values), dtype=np.int64, count=len(values)
    )


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
    steady = ~in_states(ctx, "warmup")
    picked = np.flatnonzero(mask | steady)
    by_owner = picked[np.argsort(own[picked], kind="stable")]  # rows ascending within an owner
    bounds = np.flatnonzero(np.diff(own[by_owner])) + 1
    out: list[Run] = []
    for idx in np.split(by_owner, bounds):
        hit = idx[mask[idx]]
        if hit.size == 0:
            continue
        base = idx[steady[idx]]
        first = int(start[base].min()) if base.size else int(start[hit].min())
        last = int(end[base].max()) if base.size else int(end[hit].max())
        hit_start = start[hit]
        order = np.argsort(hit_start, kind="stable")
        buckets, first_of = np.unique(hit_start[order], return_index=True)
        bucket_end = np.maximum.reduceat(end[hit][order], first_of)
        # a gap: the next interval starts more than half an interval after this one ends
        gap = buckets[1:] > bucket_end[:-1] + (bucket_end[:-1] - buckets[:-1]) // 2
        cuts = np.flatnonzero(gap) + 1
        for part in np.split(np.arange(buckets.size), cuts):
            a, b = int(buckets[part[0]]), int(bucket_end[part[-1]])
            rows = hit[(hit_start >= a) & (hit_start < b)]
            out.append(Run(np.sort(rows), a, b, a <= first and b >= last))
    return sorted(out, key=lambda r: (r.start_ns, int(r.rows[0])))


def qualifying(
    ctx: Context, rule_id: str, mask: np.ndarray, min_s: float | None = None
) -> list[Run]:
    """Runs of `mask` long enough for `rule_id` (or covering their owner's whole window)."""
    need = ctx.thresholds.duration_for(rule_id) if min_s is None else min_s
    whole = ctx.thresholds.whole_window
    return [r for r in runs(ctx, mask) if r.duration_s >= need or (whole and r.whole)]


def mean(ctx: Context, name: str, rows: np.ndarray) -> float:
    """Step-weighted mean of column `name` over `rows` (NaN when none is known)."""
    x, w = floats(ctx, name)[rows], _step0(ctx)[rows]
    ok = ~np.isnan(x) & (w > 0)
    return float((x[ok] * w[ok]).sum() / w[ok].sum()) if ok.any() else float("nan")


def peak(ctx: Context, name: str, rows: np.ndarray) -> float:
    """Largest known value of `name` over `rows` (NaN when none)."""
    x = floats(ctx, name)[rows]
    return float(np.nanmax(x)) if (~np.isnan(x)).any() else float("nan")


def headroom_bytes(ctx: Context, rows: np.ndarray) -> float:
    """The smallest free memory any GPU of the rows had at its peak (NaN when unknown)."""
    free = floats(ctx, "memory_total_bytes")[rows] - floats(ctx, "memory_used_bytes")[rows]
    return float(np.nanmin(free)) if (~np.isnan(free)).any() else float("nan")


def subject(ctx: Context, rows: Iterable[int], **extra: str) -> dict[str, str]:
    """The labels the rows share (several values are joined with ","), only those present."""
    picked = np.fromiter(rows, dtype=np.int64)
    out: dict[str, str] = {}
    for name in SUBJECT_LABELS:
        code, names = label_codes(ctx, name)
        values = sorted({v for c in set(code[picked].tolist()) if (v := names[c]) is not None})
        if values:
            out[name] = ",".join(values)
    out.update(extra)
    return out


def impact(ctx: Context, rows: np.ndarray, lost_s: np.ndarray | None = None) -> Impact:
    """Wasted GPU-hours of `rows` (their `wasted_s`, or `lost_s` per row when given) and that
    share of their cost, energy and carbon, from the waste annotation."""
    lost = np.nan_to_num(floats(ctx, "wasted_s")[rows] if lost_s is None else lost_s)
    gpu_s = floats(ctx, "gpu_s")[rows]
    frac = np.divide(lost, gpu_s, out=np.zeros_like(lost), where=gpu_s > 0)

    def part(col: str) -> float:
        return float(np.nansum(floats(ctx, col)[rows] * frac))

    return Impact(
        wasted_gpu_hours=float(lost.sum()) / 3600.0,
        cost=part("total_cost"),
        currency=ctx.prices.currency,
        energy_kwh=part("energy_kwh"),
        co2e_kg=part("co2e_kg"),
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
        evidence=tuple(e for e in evidence if e.value == e.value),  # unknown values left out
        impact=cost,
        recommendation=recommendation,
        docs=docs(rule_id),
    )


def gb(x: float) -> str:
    """Bytes as "12.3 GB" ("unknown" for NaN)."""
    return "unknown" if x != x else f"{x / GB:.1f} GB"


def hours(seconds: float) -> str:
    """Seconds as "1.5 h" or "12 min"."""
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"
