"""Findings are data: what is wrong, where, when, the evidence, what it costs, and the fix."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from gpulens.numbers import is_nan


class Severity(StrEnum):
    """How urgent a finding is."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class Evidence:
    """One measured value set against the threshold that made it count."""

    metric: str
    value: float
    threshold: float | None = None
    comparison: str = ""  # e.g. "<", ">=": how value stands against threshold
    note: str = ""

    def holds(self) -> bool:
        """True for a context row (no comparison), or when the value meets its comparison
        (never for a value or threshold that is NaN or missing)."""
        if not self.comparison:
            return True
        compare = COMPARISONS.get(self.comparison)
        return (
            compare is not None
            and self.threshold is not None
            and compare(self.value, self.threshold)
        )


COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def which_held(*rows: Evidence) -> list[Evidence]:
    """The rows of a rule's alternative conditions (it fires when one of them holds, or a row's
    value may be unmeasured): each row whose value meets its comparison keeps it, the condition
    that held; the others become context, with the threshold they did not meet in the note."""
    out = []
    for e in rows:
        if e.holds():
            out.append(e)
            continue
        if is_nan(e.value):
            missed = "not measured"
        elif e.threshold is None or is_nan(e.threshold):
            missed = "threshold unknown"
        else:
            missed = f"not {e.comparison} {e.threshold:.3g}"
        note = f"{e.note}; {missed}" if e.note else missed
        out.append(replace(e, threshold=None, comparison="", note=note))
    return out


@dataclass(frozen=True, slots=True)
class Impact:
    """What the finding costs over its window."""

    wasted_gpu_hours: float = 0.0
    cost: float = 0.0
    currency: str = "USD"
    energy_kwh: float = 0.0
    co2e_kg: float = 0.0


@dataclass(frozen=True, slots=True)
class Finding:
    """One diagnosis. `subject` holds the labels that identify what it is about (job_id, user,
    gpu_uuid, host...); `window` is [start_ns, end_ns); `docs` names docs/findings/<rule>.md."""

    rule_id: str
    severity: Severity
    subject: Mapping[str, str]
    window: tuple[int, int]
    summary: str
    evidence: tuple[Evidence, ...] = ()
    impact: Impact = field(default_factory=Impact)
    recommendation: str = ""
    docs: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the stable schema of `gpulens report --format json`)."""
        # spelled out rather than `dataclasses.asdict` (a deep copy): same keys, same order,
        # several times faster for reports with thousands of findings
        i = self.impact
        return {
            "rule_id": self.rule_id,
            "severity": self.severity.value,
            "subject": dict(self.subject),
            "window": {"start_ns": self.window[0], "end_ns": self.window[1]},
            "summary": self.summary,
            "evidence": [
                {
                    "metric": e.metric,
                    "value": e.value,
                    "threshold": e.threshold,
                    "comparison": e.comparison,
                    "note": e.note,
                }
                for e in self.evidence
            ],
            "impact": {
                "wasted_gpu_hours": i.wasted_gpu_hours,
                "cost": i.cost,
                "currency": i.currency,
                "energy_kwh": i.energy_kwh,
                "co2e_kg": i.co2e_kg,
            },
            "recommendation": self.recommendation,
            "docs": self.docs,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Finding:
        """The finding `to_dict` wrote (KeyError or ValueError for anything else)."""
        window = d["window"]
        return cls(
            rule_id=str(d["rule_id"]),
            severity=Severity(d["severity"]),
            subject={str(k): str(v) for k, v in d["subject"].items()},
            window=(int(window["start_ns"]), int(window["end_ns"])),
            summary=str(d["summary"]),
            evidence=tuple(
                Evidence(
                    metric=str(e["metric"]),
                    value=float(e["value"]),
                    threshold=None if e["threshold"] is None else float(e["threshold"]),
                    comparison=str(e["comparison"]),
                    note=str(e["note"]),
                )
                for e in d["evidence"]
            ),
            impact=Impact(**d["impact"]),
            recommendation=str(d["recommendation"]),
            docs=str(d["docs"]),
        )
