"""Findings are data: what is wrong, where, when, the evidence, what it costs, and the fix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


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
        out = asdict(self)
        out["severity"] = self.severity.value
        out["subject"] = dict(self.subject)
        out["window"] = {"start_ns": self.window[0], "end_ns": self.window[1]}
        out["evidence"] = [asdict(e) for e in self.evidence]
        return out
