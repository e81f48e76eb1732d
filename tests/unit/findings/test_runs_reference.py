"""The rule helpers (runs, their subject, impact and means, stragglers) against references
that walk one owner, one run or one row at a time, on random frames."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from gpulens.findings.columns import equals, floats, in_states, label_codes, owner_codes, starts
from gpulens.findings.context import Context
from gpulens.findings.peers import stragglers
from gpulens.findings.runs import SUBJECT_LABELS, impact, mean, nanmean, qualifying, runs, subject

MIN = 60 * 1_000_000_000
STATES = ["busy", "comm_bound", "warmup", "idle_allocated", None]


def _frame(rng: np.random.Generator, n: int) -> pa.Table:
    def maybe(p: float, values: np.ndarray) -> pa.Array:
        return pa.array(np.where(rng.random(n) < p, np.nan, values), from_pandas=True)

    return pa.table(
        {
            "start_ns": rng.integers(0, 30, n) * MIN,
            "step_s": maybe(0.02, rng.choice([60.0, 120.0], n)),
            "job_id": [None if x == 0 else f"j{x}" for x in rng.integers(0, 4, n)],
            "user": [f"u{x}" for x in rng.integers(0, 2, n)],
            "host": [f"h{x}" for x in rng.integers(0, 2, n)],
            "gpu_uuid": [None if x == 0 else f"GPU-{x}" for x in rng.integers(0, 4, n)],
            "gpu_index": [str(x) for x in rng.integers(0, 4, n)],
            "state": [STATES[i] for i in rng.choice(5, n, p=[0.3, 0.4, 0.1, 0.1, 0.1])],
            "sm_active": maybe(0.1, np.round(rng.random(n), 2)),
            "graphics_active": maybe(0.5, rng.random(n)),
            "wasted_s": maybe(0.1, rng.random(n) * 60),
            "gpu_s": maybe(0.05, np.full(n, 60.0)),
            "total_cost": maybe(0.1, rng.random(n)),
            "energy_kwh": maybe(0.1, rng.random(n)),
            "co2e_kg": maybe(0.1, rng.random(n)),
        }
    )


def _runs_reference(ctx: Context, mask: np.ndarray) -> list[tuple[list[int], int, int, bool]]:
    """Owner by owner: its intervals in the state grouped by start, cut at gaps."""
    own, start = owner_codes(ctx), starts(ctx)
    step = np.nan_to_num(floats(ctx, "step_s"))
    end = start + np.round(step * 1e9).astype(np.int64)
    steady = ~in_states(ctx, "warmup")
    out = []
    for o in np.unique(own[mask]).tolist():
        mine = own == o
        hit = np.flatnonzero(mine & mask)
        base = np.flatnonzero(mine & steady)
        first = int(start[base].min()) if base.size else int(start[hit].min())
        last = int(end[base].max()) if base.size else int(end[hit].max())
        buckets = sorted({int(start[i]) for i in hit})
        bucket_end = {b: max(int(end[i]) for i in hit if start[i] == b) for b in buckets}
        parts = [[buckets[0]]]
        for prev, b in pairwise(buckets):
            if b > bucket_end[prev] + (bucket_end[prev] - prev) // 2:
                parts.append([])
            parts[-1].append(b)
        for part in parts:
            a, b = part[0], bucket_end[part[-1]]
            rows = sorted(int(i) for i in hit if a <= start[i] < b)
            if rows:  # none when the intervals have no length (no step)
                out.append((rows, a, b, a <= first and b >= last))
    return sorted(out, key=lambda r: (r[1], r[0][0]))


@pytest.mark.parametrize("seed", range(30))
def test_runs_match_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ctx = Context(frame=_frame(rng, int(rng.integers(1, 200))))
    for state in ("comm_bound", "busy", "idle_allocated"):
        mask = in_states(ctx, state)
        got = [(r.rows.tolist(), r.start_ns, r.end_ns, r.whole) for r in runs(ctx, mask)]
        assert got == _runs_reference(ctx, mask)


@pytest.mark.parametrize("seed", range(30))
def test_subject_impact_and_means_match_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    frame = _frame(rng, int(rng.integers(1, 200)))
    ctx = Context(frame=frame)
    cols = {c: frame.column(c).to_pylist() for c in frame.column_names}
    for _ in range(10):
        rows = np.sort(rng.choice(frame.num_rows, int(rng.integers(1, frame.num_rows + 1))))
        expected = {}
        for name in SUBJECT_LABELS:
            col = cols.get(name, [None] * frame.num_rows)
            values = sorted({v for i in rows if (v := col[i]) is not None})
            if values:
                expected[name] = ",".join(values)
        assert subject(ctx, rows, extra="x") == {**expected, "extra": "x"}
        x, w = floats(ctx, "sm_active")[rows], np.nan_to_num(floats(ctx, "step_s"))[rows]
        ok = ~np.isnan(x) & (w > 0)
        want = float((x[ok] * w[ok]).sum() / w[ok].sum()) if ok.any() else float("nan")
        got = mean(ctx, "sm_active", rows)
        assert got == want or (got != got and want != want)
        g = floats(ctx, "graphics_active")[rows]
        want = float(np.nanmean(g)) if (~np.isnan(g)).any() else float("nan")
        assert nanmean(g) == want or (nanmean(g) != nanmean(g) and want != want)
        lost = np.nan_to_num(floats(ctx, "wasted_s")[rows])
        gpu_s = floats(ctx, "gpu_s")[rows]
        frac = np.divide(lost, gpu_s, out=np.zeros_like(lost), where=gpu_s > 0)
        cost = impact(ctx, rows)
        assert cost.wasted_gpu_hours == float(lost.sum()) / 3600.0
        for col, value in (("total_cost", cost.cost), ("energy_kwh", cost.energy_kwh),
                           ("co2e_kg", cost.co2e_kg)):  # fmt: skip
            assert value == float(np.nansum(floats(ctx, col)[rows] * frac))
        lost_s = rng.random(rows.size) * 30
        assert impact(ctx, rows, lost_s).wasted_gpu_hours == float(lost_s.sum()) / 3600.0


def test_equals_matches_labels() -> None:
    ctx = Context(frame=pa.table({"job_id": ["a", None, "b", "a"]}))
    assert equals(ctx, "job_id", "a").tolist() == [True, False, False, True]
    assert equals(ctx, "job_id", None, "b").tolist() == [False, True, True, False]
    assert not equals(ctx, "job_id").any() and not equals(ctx, "missing", "a").any()


def _stragglers_reference(ctx: Context) -> list[tuple[Any, ...]]:
    """Run by run: the job's rows in the run's window, the busiest GPU of each interval."""
    t = ctx.thresholds
    waiting = in_states(ctx, "comm_bound")
    job = ctx.frame.column("job_id").to_pylist()
    uuid = ctx.frame.column("gpu_uuid").to_pylist()
    start = starts(ctx)
    sm_raw = floats(ctx, "sm_active")
    sm = np.where(np.isnan(sm_raw), floats(ctx, "graphics_active"), sm_raw)
    out = []
    for run in qualifying(ctx, "straggler", waiting):
        name = job[int(run.rows[0])]
        if name is None:
            continue
        rows = [
            i for i in range(len(job)) if job[i] == name and run.start_ns <= start[i] < run.end_ns
        ]
        if len({uuid[i] for i in rows}) < 2:
            continue
        buckets = sorted({int(start[i]) for i in run.rows})
        busiest: Counter[str] = Counter()
        for b in buckets:
            here = [i for i in rows if start[i] == b and sm[i] == sm[i]]
            if here:
                top = max(here, key=lambda i: (sm[i], -i))
                busiest[uuid[top] or ""] += 1
        if not busiest:
            continue
        gpu, count = busiest.most_common(1)[0]
        share = count / len(buckets)
        slow = [i for i in rows if uuid[i] == gpu]
        if share < t.straggler_min_share or (slow and np.mean(waiting[slow]) >= 0.5):
            continue
        peers = [int(i) for i in run.rows if uuid[i] != gpu]
        out.append((name, run.start_ns, slow, peers, gpu, share))
    return out


def _gangs(rng: np.random.Generator) -> pa.Table:
    """Jobs of four GPUs in step: mostly waiting, one GPU (most often the same) the busiest."""
    rows = []
    for job in range(int(rng.integers(1, 4))):
        slow = int(rng.integers(0, 4))
        for t in range(int(rng.integers(5, 30))):
            if rng.random() < 0.1:
                continue  # a gap
            for g in range(4):
                busiest = g == (slow if rng.random() < 0.8 else int(rng.integers(0, 4)))
                waiting = rng.random() < (0.2 if busiest else 0.9)
                sm = float(np.round(0.5 + 0.4 * rng.random(), 2)) if busiest else 0.3
                rows.append(
                    {
                        "start_ns": t * MIN,
                        "step_s": 60.0,
                        "job_id": f"j{job}",
                        "host": "h",
                        "gpu_uuid": f"GPU-{job}-{g}",
                        "state": "comm_bound" if waiting else "busy",
                        "sm_active": None if rng.random() < 0.05 else sm,
                    }
                )
    return pa.Table.from_pylist(rows)


@pytest.mark.parametrize("seed", range(30))
def test_stragglers_match_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ctx = Context(frame=_frames_for_stragglers(rng, seed))
    got = [(s.job_id, s.run.start_ns, s.slow_rows.tolist(), s.waiting_rows.tolist(), s.gpu_uuid,
            s.share) for s in stragglers(ctx)]  # fmt: skip
    assert got == _stragglers_reference(ctx)


def _frames_for_stragglers(rng: np.random.Generator, seed: int) -> pa.Table:
    if seed % 3:
        return _gangs(rng)
    frame = _frame(rng, int(rng.integers(1, 300)))
    uuids = pa.array([f"GPU-{x}" for x in rng.integers(0, 4, frame.num_rows)])
    return frame.drop_columns(["gpu_uuid"]).append_column("gpu_uuid", uuids)


def test_the_gangs_have_stragglers() -> None:
    stragglers_found = sum(
        len(stragglers(Context(frame=_gangs(np.random.default_rng(s))))) for s in range(10)
    )
    assert stragglers_found >= 5


def test_label_codes_are_cached_per_context() -> None:
    ctx = Context(frame=pa.table({"job_id": ["a", "b"]}))
    assert label_codes(ctx, "job_id") is label_codes(ctx, "job_id")
