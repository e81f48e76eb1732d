"""The Jobs and users page: a report card per job and per user (useful work, waste and its
main cause, cost, findings) and fairness (allocation and useful work against quota)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze import fairness, rollups
from gpulens.findings.model import Finding
from gpulens.present.dashboard.common import (
    ACTIVITY_KEYS,
    HOURS_KEYS,
    PRICE_KEYS,
    Analysed,
    clean,
    num,
    rows,
    top_cause,
)
from gpulens.present.dashboard.window import WindowInfo

#: groups fairness may be shown for
FAIRNESS_BY: tuple[str, ...] = ("user", "team", "project")
MAX_CARDS = 200
CARD_KEYS: tuple[str, ...] = (*HOURS_KEYS, *ACTIVITY_KEYS, *PRICE_KEYS)


@dataclass
class FindingRef:
    """A finding as a card lists it."""

    rule_id: str
    severity: str
    summary: str
    wasted_gpu_hours: float


@dataclass
class Card:
    """One job's or user's report card. `figures` are rollup columns (GPU-hours, means of
    duty/SM/tensor activity, kWh, cost, CO2e); `efficiency` = useful ÷ allocated GPU-hours."""

    kind: str  # "job" or "user"
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    efficiency: float | None = None
    top_waste_cause: str | None = None
    gpu_uuids: list[str] = field(default_factory=list)
    findings: list[FindingRef] = field(default_factory=list)


@dataclass
class Fairness:
    """Shares per group of `by` (allocation, useful work, quota) and Jain's indices."""

    by: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    jain_useful: float | None = None
    jain_allocation_over_quota: float | None = None
    quotas_set: bool = False


@dataclass
class PeoplePage:
    """Everything the Jobs and users page shows; `*_total` count the cards before the cap."""

    window: WindowInfo
    currency: str
    jobs: list[Card] = field(default_factory=list)
    jobs_total: int = 0
    users: list[Card] = field(default_factory=list)
    users_total: int = 0
    fairness: Fairness = field(default_factory=lambda: Fairness("user"))
    notes: list[str] = field(default_factory=list)


def _labels_by(frame: pa.Table, key: str, labels: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """key value → {label: value} (the distinct values, comma-joined) over the frame."""
    cols = [c for c in (key, *labels) if c in frame.column_names]
    pairs = frame.select(cols).group_by(cols).aggregate([]).to_pylist()
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for r in pairs:
        k = r.get(key)
        if k is None:
            continue
        for c in cols[1:]:
            if r.get(c) is not None:
                out[str(k)][c].add(str(r[c]))
    return {k: {c: ", ".join(sorted(v)) for c, v in d.items()} for k, d in out.items()}


def _refs(findings: list[Finding]) -> list[FindingRef]:
    return [
        FindingRef(f.rule_id, f.severity.value, f.summary, f.impact.wasted_gpu_hours)
        for f in findings
    ]


def _cards(
    a: Analysed, key: str, kind: str, labels: tuple[str, ...], found: dict[str, list[Finding]]
) -> tuple[list[Card], int]:
    s = a.settings
    table = rollups.rollup(a.frame, key, prices=s.prices, region=s.region)
    table = table.filter(pc.is_valid(table[key]))
    named = _labels_by(a.frame, key, labels)
    cards = []
    for row in table.to_pylist():
        name = str(row[key])
        allocated = num(row.get("allocated_gpu_hours"))
        useful = num(row.get("useful_gpu_hours"))
        meta = named.get(name, {})
        cards.append(
            Card(
                kind=kind,
                name=name,
                labels={k: v for k, v in meta.items() if k != "gpu_uuid"},
                figures=clean({k: row.get(k) for k in CARD_KEYS}),
                efficiency=useful / allocated if allocated and useful is not None else None,
                top_waste_cause=top_cause(row),
                gpu_uuids=sorted(meta.get("gpu_uuid", "").split(", "))
                if meta.get("gpu_uuid")
                else [],
                findings=_refs(found.get(name, [])),
            )
        )
    cards.sort(key=lambda c: -(c.figures.get("wasted_gpu_hours") or 0.0))
    return cards[:MAX_CARDS], len(cards)


def people_page(a: Analysed, by: str = "team", with_findings: bool = True) -> PeoplePage:
    """The Jobs and users page of an analysed window; fairness per group of `by`."""
    if by not in FAIRNESS_BY:
        raise ValueError(f"fairness by {by!r}: expected one of {', '.join(FAIRNESS_BY)}")
    s = a.settings
    page = PeoplePage(WindowInfo.of(a.window), s.prices.currency, fairness=Fairness(by))
    if a.empty:
        page.notes.append("no GPU readings in this window")
        return page
    by_job: dict[str, list[Finding]] = defaultdict(list)
    by_user: dict[str, list[Finding]] = defaultdict(list)
    job_user = _labels_by(a.frame, "job_id", ("user",))
    for f in a.findings() if with_findings else []:
        job, user = f.subject.get("job_id"), f.subject.get("user")
        if job is not None:
            by_job[job].append(f)
            user = user or job_user.get(job, {}).get("user")
        if user is not None:
            by_user[user].append(f)
    page.jobs, page.jobs_total = _cards(
        a, "job_id", "job", ("user", "team", "project", "engine", "host", "gpu_uuid"), by_job
    )
    page.users, page.users_total = _cards(a, "user", "user", ("team", "project"), by_user)
    summary = fairness.shares(a.frame, by, quotas=s.quotas, prices=s.prices, region=s.region)
    page.fairness = Fairness(
        by=by,
        rows=rows(summary.table),
        jain_useful=num(summary.jain_useful),
        jain_allocation_over_quota=num(summary.jain_allocation_over_quota),
        quotas_set=bool(s.quotas),
    )
    return page
