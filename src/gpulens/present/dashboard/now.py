"""The "now" strip every page polls: what the fleet does this minute, from the live state."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from statistics import fmean

from gpulens.app.live import LiveSnapshot
from gpulens.present.dashboard.common import num
from gpulens.present.names import gpu_names


@dataclass
class GpuNowView:
    """One GPU this tick: its last readings and the state of its current interval."""

    gpu_uuid: str
    label: str
    state: str | None
    useful_ratio: float | None
    duty: float | None
    sm_active: float | None
    tensor_active: float | None
    power_watts: float | None
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    job_id: str | None = None
    user: str | None = None
    engine: str | None = None


@dataclass
class CollectorView:
    name: str
    status: str
    errors: int
    timeouts: int
    last_error: str | None


@dataclass
class NowFinding:
    rule_id: str
    severity: str
    summary: str
    job_id: str | None
    gpu_uuid: str | None


@dataclass
class NowStrip:
    """The live state in a few figures; `live` is false when no agent state is attached (a
    dashboard over a store only) or before the first tick."""

    live: bool
    ts_ns: int | None = None
    gpus: int = 0
    processes: int = 0
    states: dict[str, int] = field(default_factory=dict)
    mean_duty: float | None = None
    mean_sm_active: float | None = None
    mean_tensor_active: float | None = None
    mean_useful_ratio: float | None = None
    power_watts: float | None = None
    memory_used_bytes: float | None = None
    store_lag_s: float | None = None
    findings_ts_ns: int | None = None
    findings: int = 0
    top_findings: list[NowFinding] = field(default_factory=list)
    collectors: list[CollectorView] = field(default_factory=list)
    gpu_rows: list[GpuNowView] = field(default_factory=list)


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return num(fmean(present)) if present else None


def _sum(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return num(sum(present)) if present else None


def now_strip(snap: LiveSnapshot | None, top: int = 5) -> NowStrip:
    """The strip of a live snapshot (None: no live state)."""
    if snap is None or snap.ts is None:
        return NowStrip(live=False)
    gpus = []
    labels = gpu_names([g.labels for g in snap.gpus])
    for g, label in zip(snap.gpus, labels, strict=True):
        v, lab = g.values, g.labels
        uuid = str(lab.get("gpu_uuid") or "")
        gpus.append(
            GpuNowView(
                gpu_uuid=uuid,
                label=label,
                state=g.state,
                useful_ratio=num(g.useful_ratio),
                duty=num(v.get("gpu_util_ratio")),
                sm_active=num(v.get("sm_active_ratio")),
                tensor_active=num(v.get("tensor_active_ratio")),
                power_watts=num(v.get("power_watts")),
                memory_used_bytes=num(v.get("memory_used_bytes")),
                memory_total_bytes=num(v.get("memory_total_bytes")),
                job_id=g.attribution.get("job_id"),
                user=g.attribution.get("user"),
                engine=g.attribution.get("engine"),
            )
        )
    return NowStrip(
        live=True,
        ts_ns=snap.ts,
        gpus=len(gpus),
        processes=len(snap.processes),
        states=dict(Counter(g.state for g in gpus if g.state is not None).most_common()),
        mean_duty=_mean([g.duty for g in gpus]),
        mean_sm_active=_mean([g.sm_active for g in gpus]),
        mean_tensor_active=_mean([g.tensor_active for g in gpus]),
        mean_useful_ratio=_mean([g.useful_ratio for g in gpus]),
        power_watts=_sum([g.power_watts for g in gpus]),
        memory_used_bytes=_sum([g.memory_used_bytes for g in gpus]),
        store_lag_s=num(snap.store_lag_s),
        findings_ts_ns=snap.findings_ts,
        findings=len(snap.findings),
        top_findings=[
            NowFinding(
                f.rule_id,
                f.severity.value,
                f.summary,
                f.subject.get("job_id"),
                f.subject.get("gpu_uuid"),
            )
            for f in snap.findings[:top]
        ],
        collectors=[
            CollectorView(c.name, c.last_status, c.errors_total, c.timeouts_total, c.last_error)
            for c in snap.collectors
        ],
        gpu_rows=gpus,
    )
