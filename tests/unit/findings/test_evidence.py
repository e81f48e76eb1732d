"""Evidence rows state only what holds: a comparison is a condition the value meets; context
has none; a rule that fires on one of several conditions shows the one that held."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gpulens.findings.model import Evidence, Finding, which_held

from .helpers import IDLE, ddp_rows, series
from .helpers import findings as rule_findings


def _rows(f: Finding) -> dict[str, Evidence]:
    return {e.metric: e for e in f.evidence}


def _one(rows: list[dict[str, Any]], rule: str) -> dict[str, Evidence]:
    (f,), _ = rule_findings(rows, rule)
    assert all(e.holds() for e in f.evidence), f.evidence
    return _rows(f)


def test_holds() -> None:
    assert Evidence("x", 0.3, 0.5, "<").holds()
    assert not Evidence("x", 0.5, 0.5, "<").holds()
    assert Evidence("x", 0.5, 0.5, ">=").holds()
    assert Evidence("x", 0.036).holds()  # context states nothing
    assert not Evidence("x", math.nan, 0.5, "<").holds()
    assert not Evidence("x", 0.3, None, "<").holds()
    assert not Evidence("x", 0.3, 0.5, "≈").holds()


def test_which_held_keeps_the_condition_that_held() -> None:
    wait, cpu, nan = which_held(
        Evidence("data_wait", 0.05, 0.2, ">=", "share of the step"),
        Evidence("host_cpu", 0.95, 0.9, ">="),
        Evidence("swing", math.nan, 0.35, ">="),
    )
    assert cpu == Evidence("host_cpu", 0.95, 0.9, ">=")
    assert wait == Evidence("data_wait", 0.05, note="share of the step; not >= 0.2")
    assert nan.comparison == "" and nan.threshold is None and nan.note == "not measured"
    (unknown,) = which_held(Evidence("power_w", 600.0, math.nan, ">=", "limit nan W"))
    assert unknown.comparison == "" and unknown.note == "limit nan W; threshold unknown"


def test_hollow_busy_shows_tensor_activity_as_context() -> None:
    ev = _one(series(20, duty=0.95, sm_active=0.3, tensor_active=0.05), "hollow_busy")
    assert ev["tensor_active"].comparison == "" and ev["tensor_active"].threshold is None
    assert ev["sm_active"].comparison == "<" and ev["duty"].comparison == ">="


def test_input_bound_on_a_saturated_host_shows_the_host_cpu_and_the_gaps() -> None:
    rows = series(15, sm_active=0.4, sm_active_min=0.1, sm_active_max=0.7, tensor_active=0.2,
                  data_wait=None, host_cpu=0.95, duty=0.9)  # fmt: skip
    ev = _one(rows, "input_bound")
    assert ev["host_cpu"].comparison == ">=" and ev["sm_active_swing"].comparison == ">="
    assert "data_wait" not in ev  # not reported: left out
    assert ev["duty"].comparison == "" and ev["duty"].note.endswith("not < 0.8")
    # the application's data wait decides where it reports one
    ev = _one(series(15, sm_active=0.4, data_wait=0.5, host_cpu=0.5), "input_bound")
    assert ev["data_wait"].comparison == ">=" and ev["host_cpu"].comparison == ""


def test_input_bound_without_sm_activity_shows_the_activity_it_used() -> None:
    rows = series(15, sm_active=None, sm_active_min=None, sm_active_max=None,
                  tensor_active=None, graphics_active=0.4, data_wait=0.5)  # fmt: skip
    ev = _one(rows, "input_bound")
    assert ev["graphics_active"].comparison == "<" and "sm_active" not in ev


def test_low_tensor_use_on_busy_sms_shows_sm_activity_not_fp32() -> None:
    rows = series(15, tensor_active=0.05, fp32_active=0.1, sm_active=0.9)
    ev = _one(rows, "low_tensor_use")
    assert ev["sm_active"].comparison == ">=" and ev["tensor_active"].comparison == "<"
    assert ev["fp32_active"].comparison == "" and ev["fp32_active"].note.endswith("not >= 0.3")
    ev = _one(series(15, tensor_active=0.01, fp32_active=0.7, sm_active=0.9), "low_tensor_use")
    assert ev["fp32_active"].comparison == ">=" and ev["sm_active"].comparison == ">="


def test_idle_allocated_held_by_a_process_shows_the_process() -> None:
    rows = series(70, **{**IDLE, "memory_used_bytes": 1e8, "process_memory_bytes": 1e8})
    ev = _one(rows, "idle_allocated")
    assert ev["processes"].comparison == ">" and ev["memory_held_bytes"].comparison == ""
    assert ev["idle_seconds"].comparison == ">="


def test_idle_allocated_over_the_whole_window_states_no_duration() -> None:
    (f,), ctx = rule_findings(series(3, **IDLE), "idle_allocated")
    ev = _rows(f)
    need = ctx.thresholds.duration_for("idle_allocated")
    # shorter than the rule asks, reported as all the frame shows of the GPU
    assert ev["idle_seconds"].value < need and ev["idle_seconds"].comparison == ""
    assert all(e.holds() for e in f.evidence)


def test_memory_bound_without_dram_activity_shows_memory_copy() -> None:
    rows = series(20, dram_active=None, mem_copy=0.8, tensor_active=0.2, sm_active=0.7)
    ev = _one(rows, "memory_bound")
    assert ev["mem_copy"].comparison == ">=" and "dram_active" not in ev
    ev = _one(series(20, dram_active=0.8, tensor_active=0.2, sm_active=0.7), "memory_bound")
    assert ev["dram_active"].comparison == ">=" and ev["mem_copy"].comparison == ""


@pytest.mark.parametrize(
    ("changes", "held", "context"),
    [
        ({"sm_clock_hz": 1.5e9, "throttle_thermal": 1.0}, "throttle_thermal", "power_w"),
        ({"sm_clock_hz": 1.2e9, "power_w": 690.0}, "power_w", "throttle_power"),
        ({"sm_clock_hz": 1.5e9, "throttle_power": 1.0}, "throttle_power", "throttle_thermal"),
    ],
)
def test_throttled_shows_the_cause_that_held(
    changes: dict[str, Any], held: str, context: str
) -> None:
    ev = _one(series(15, **changes), "throttled")
    assert ev[held].comparison == ">=" and ev[context].comparison == ""
    assert ev["clock_ratio"].comparison == "<"


def test_straggler_compares_with_its_peers_in_context() -> None:
    slow_clock = ddp_rows([[0.6] * 15, [0.92] * 15, [0.6] * 15], [1.98e9, 1.5e9, 1.98e9])
    ev = _one(slow_clock, "straggler")
    assert ev["clock_gap"].comparison == ">=" and ev["clock_gap"].value == pytest.approx(
        1 - 1.5 / 1.98
    )
    assert ev["sm_active"].comparison == "" and "0.60" in ev["sm_active"].note
    assert ev["sm_clock_hz"].comparison == "" and "1980 MHz" in ev["sm_clock_hz"].note
    same_clock = ddp_rows([[0.6] * 15, [0.92] * 15, [0.6] * 15], [1.98e9] * 3)
    ev = _one(same_clock, "straggler")
    assert ev["clock_gap"].comparison == ""  # load, not clock: the gap is context


def test_engine_migration_states_only_the_share_as_a_condition() -> None:
    (f,), _ = rule_findings(
        series(20, duty=0.95, sm_active=0.3, tensor_active=0.05), "engine_migration"
    )
    compared = [e.metric for e in f.evidence if e.comparison]
    assert compared == ["state_share"] and all(e.holds() for e in f.evidence)
