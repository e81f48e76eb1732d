"""The Findings page: each finding with its evidence, impact and fix, and the chart window
(a GPU page over a time range) it comes from."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gpulens.app.profiles import links
from gpulens.findings.model import Finding
from gpulens.present.dashboard.common import Analysed, num
from gpulens.present.dashboard.window import NS, WindowInfo

DEFAULT_LIMIT = 200
MAX_LIMIT = 5000
SEVERITIES: tuple[str, ...] = ("critical", "warning", "info")


@dataclass
class EvidenceView:
    metric: str
    value: float | None
    threshold: float | None
    comparison: str
    note: str


@dataclass
class ChartLink:
    """Where a finding shows on a chart: a GPU page over [start_ns, end_ns)."""

    gpu_uuid: str
    start_ns: int
    end_ns: int


@dataclass
class FindingView:
    """One finding as the page shows it."""

    rule_id: str
    severity: str
    subject: dict[str, str]
    start_ns: int
    end_ns: int
    summary: str
    evidence: list[EvidenceView]
    impact: dict[str, Any]
    recommendation: str
    docs: str
    chart: ChartLink | None = None
    # profiles captured on demand for this finding (app/profiles.py): summary line, trace path
    profiles: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class FindingsPage:
    """The findings of a window, largest impact first; `total` counts them before the limit,
    `by_rule`, `by_severity` and `waste_by_rule` (wasted GPU-hours) cover all of them, before
    the filters too."""

    window: WindowInfo
    currency: str
    total: int = 0
    by_rule: dict[str, int] = field(default_factory=dict)
    by_severity: dict[str, int] = field(default_factory=dict)
    waste_by_rule: dict[str, float] = field(default_factory=dict)
    wasted_gpu_hours: float = 0.0
    findings: list[FindingView] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _job_gpus(a: Analysed) -> dict[str, str]:
    """job_id → the first GPU (by UUID) it ran on in the window."""
    if a.empty:
        return {}
    pairs = a.frame.select(["job_id", "gpu_uuid"]).group_by(["job_id", "gpu_uuid"]).aggregate([])
    out: dict[str, str] = {}
    for r in sorted(pairs.to_pylist(), key=lambda r: str(r["gpu_uuid"])):
        if r["job_id"] is not None and r["gpu_uuid"] is not None:
            out.setdefault(str(r["job_id"]), str(r["gpu_uuid"]))
    return out


def chart_link(f: Finding, job_gpus: dict[str, str], step_s: int) -> ChartLink | None:
    """The GPU page and time range to see `f` on: its GPU (or its job's first GPU), over its
    window with a margin of a quarter of its length (at least two steps) on each side."""
    gpu = f.subject.get("gpu_uuid") or job_gpus.get(str(f.subject.get("job_id")))
    if not gpu:
        return None
    start, end = f.window
    margin = max((end - start) // 4, 2 * step_s * NS)
    return ChartLink(str(gpu), max(0, start - margin), end + margin)


def _view(f: Finding, link: ChartLink | None) -> FindingView:
    d = f.to_dict()
    return FindingView(
        rule_id=f.rule_id,
        severity=f.severity.value,
        subject={str(k): str(v) for k, v in f.subject.items()},
        start_ns=int(f.window[0]),
        end_ns=int(f.window[1]),
        summary=f.summary,
        evidence=[
            EvidenceView(e.metric, num(e.value), num(e.threshold), e.comparison, e.note)
            for e in f.evidence
        ],
        impact={k: (num(v) if isinstance(v, float) else v) for k, v in d["impact"].items()},
        recommendation=f.recommendation,
        docs=f.docs,
        chart=link,
    )


def findings_page(
    a: Analysed,
    severity: str | None = None,
    rule: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> FindingsPage:
    """The findings of an analysed window, filtered by severity and rule, at most `limit`."""
    if severity is not None and severity not in SEVERITIES:
        raise ValueError(f"severity {severity!r}: expected one of {', '.join(SEVERITIES)}")
    page = FindingsPage(WindowInfo.of(a.window), a.settings.prices.currency)
    if a.empty:
        page.notes.append("no GPU readings in this window")
        return page
    found = a.findings()
    page.by_rule = dict(sorted(Counter(f.rule_id for f in found).items()))
    waste: dict[str, float] = {}
    for f in found:
        waste[f.rule_id] = waste.get(f.rule_id, 0.0) + f.impact.wasted_gpu_hours
    page.waste_by_rule = {r: float(h) for r, h in sorted(waste.items(), key=lambda kv: -kv[1])}
    page.by_severity = {s: n for s in SEVERITIES if (n := sum(f.severity == s for f in found))}
    chosen = [
        f
        for f in found
        if (severity is None or f.severity == severity) and (rule is None or f.rule_id == rule)
    ]
    page.total = len(chosen)
    page.wasted_gpu_hours = float(sum(f.impact.wasted_gpu_hours for f in chosen))
    jobs = _job_gpus(a)
    shown = chosen[: max(0, limit)]
    page.findings = [_view(f, chart_link(f, jobs, a.window.step_s)) for f in shown]
    if a.profiles_dir is not None:
        for i, profiled in links(a.profiles_dir, shown).items():
            page.findings[i].profiles = [
                {k: p.get(k) for k in ("summary", "trace_path", "first_step", "last_step")}
                for p in profiled
            ]
    if a.context is not None and a.context.errors:
        page.notes += [f"rule {e.rule_id} failed: {e.error}: {e.message}" for e in a.context.errors]
    return page
