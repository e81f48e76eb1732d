"""The registry, error isolation, ordering and the run helper."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pytest

from gpulens.findings.columns import in_states
from gpulens.findings.engine import RULES, FindingThresholds, build_context, run_rules
from gpulens.findings.model import Finding, Impact, Severity
from gpulens.findings.runs import qualifying, runs

from .helpers import IDLE, frame, series

ALL = {
    "snapshot_state",
    "idle_allocated", "hollow_busy", "memory_bound", "input_bound", "comm_bound", "straggler",
    "low_tensor_use", "throttled", "memory_leak", "overprovisioned", "engine_migration",
    "baseline_regression", "unfair_share",
}  # fmt: skip


def test_every_rule_is_registered() -> None:
    assert set(RULES) == ALL


def test_a_rule_that_raises_is_an_error_record_not_a_crash() -> None:
    def broken(ctx: object) -> Iterable[Finding]:
        raise RuntimeError("boom")

    ctx = build_context(frame(series(10)))
    out = run_rules(ctx, rules={"broken": broken, **RULES})
    assert out == []
    assert [(e.rule_id, e.error, e.message) for e in ctx.errors] == [
        ("broken", "RuntimeError", "boom")
    ]
    with pytest.raises(ValueError, match="unknown finding rule"):
        run_rules(ctx, only=["nope"])


def test_findings_are_sorted_by_waste_then_severity() -> None:
    def make(rule: str, hours: float, level: Severity) -> Finding:
        return Finding(rule, level, {}, (0, 1), "", impact=Impact(wasted_gpu_hours=hours))

    def fake(ctx: object) -> list[Finding]:
        return [
            make("a", 1.0, Severity.INFO),
            make("b", 5.0, Severity.WARNING),
            make("c", 1.0, Severity.CRITICAL),
        ]

    out = run_rules(build_context(frame(series(2))), rules={"fake": fake})
    assert [f.rule_id for f in out] == ["b", "c", "a"]


def test_runs_split_at_gaps_and_need_the_minimum_duration() -> None:
    rows = series(20, **IDLE) + series(5, first=20) + series(15, first=25, **IDLE)
    ctx = build_context(frame(rows), thresholds=FindingThresholds(min_duration_s=16 * 60))
    mask = in_states(ctx, "idle_allocated")
    found = runs(ctx, mask)
    assert [(r.duration_s, r.rows.size, r.whole) for r in found] == [
        (1200.0, 20, False),
        (900.0, 15, False),
    ]
    assert [r.duration_s for r in qualifying(ctx, "x", mask)] == [1200.0]
    # a run covering everything the frame shows of its job counts however short it is
    ctx = build_context(frame(series(3, **IDLE)))
    (only,) = qualifying(ctx, "x", in_states(ctx, "idle_allocated"))
    assert only.whole and np.array_equal(only.rows, [0, 1, 2])
