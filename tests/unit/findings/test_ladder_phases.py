"""The duration-ladder rules read the intervals where their state changes for their share: a
spell just under or just over the 60-minute warning step keeps its severity, and its evidence
its figures, whatever the phase of the 60 s interval grid against it.

Each spell starts at minute 10 plus the phase and lasts 59 min 30 s or 60 min 30 s inside a
healthy busy hour and a half; the two intervals where the state changes hold a mix of the
spell's figures and the busy ones (as the store's 60 s aggregates of 1 s samples do). Counting
whole intervals, such a spell covers 59, 60 or 61 of them with the phase: info or warning by
where the grid fell. comm_bound (a job's GPUs against each other) shares the helper and is
left to tests/integration/test_findings_deterministic.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpulens.findings.model import Severity

from .helpers import BASE, findings, series

PHASES_S = [0, 7, 19, 30, 44, 59]
# rule: (the spell's figures, the evidence figures they give)
SPELLS: dict[str, dict[str, float]] = {
    "hollow_busy": {"duty": 0.95, "sm_active": 0.3, "tensor_active": 0.05},
    "memory_bound": {"dram_active": 0.8, "tensor_active": 0.2, "sm_active": 0.7},
    "input_bound": {"sm_active": 0.4, "tensor_active": 0.2, "data_wait": 0.5, "host_cpu": 0.5},
    "low_tensor_use": {"tensor_active": 0.01, "fp32_active": 0.7, "sm_active": 0.9},
    "throttled": {"sm_clock_hz": 1.5e9, "throttle_thermal": 1.0, "temperature_c": 88.0},
}


def _spell(rule: str, phase_s: int, length_s: int) -> list[dict[str, Any]]:
    begin, end = 600 + phase_s, 600 + phase_s + length_s
    state = SPELLS[rule]
    rows = []
    for m in range(90):
        share = max(0, min(m * 60 + 60, end) - max(m * 60, begin)) / 60
        mixed = {k: share * v + (1 - share) * float(BASE[k]) for k, v in state.items()}
        rows += series(1, first=m, **mixed)
    return rows


@pytest.mark.parametrize("rule", sorted(SPELLS))
@pytest.mark.parametrize("phase_s", PHASES_S)
@pytest.mark.parametrize(
    ("length_s", "expected"), [(59 * 60 + 30, Severity.INFO), (60 * 60 + 30, Severity.WARNING)]
)
def test_a_spell_near_the_warning_step_keeps_its_severity_at_any_phase(
    rule: str, phase_s: int, length_s: int, expected: Severity
) -> None:
    (f,), _ = findings(_spell(rule, phase_s, length_s), rule)
    assert f.severity is expected
    # the evidence reads the intervals wholly in the state, not the mixed ones
    evidence = {e.metric: e.value for e in f.evidence}
    for metric, value in SPELLS[rule].items():
        if metric in evidence:
            assert evidence[metric] == pytest.approx(value, rel=1e-6)


def test_a_partly_sampled_interval_weighs_its_samples_in_the_evidence() -> None:
    # 20 hollow minutes, the last (the recording stopped 10 s into it) at SM active 0.4: the
    # mean weighs it for its 10 s, not for a whole minute
    rows = series(20, samples=60, **SPELLS["hollow_busy"])
    rows[-1] = {**rows[-1], "samples": 10, "sm_active": 0.4}
    (f,), _ = findings(rows, "hollow_busy")
    evidence = {e.metric: e.value for e in f.evidence}
    assert evidence["sm_active"] == pytest.approx((19 * 60 * 0.3 + 10 * 0.4) / (19 * 60 + 10))
