"""`gpulens digest`: report cards per team and per user for the last whole day or week, each
against its own previous periods and the fleet, from the store or a Prometheus.

One interval frame covers the card's period and the `baselines` periods before it, at the
report's automatic step for one period; it is annotated once (states, useful work, waste,
prices), numbered by period and given a team (`analyze.report_cards`). The findings are those
of the card's period alone, each given to the team and user its subject names (directly, or
through its job's or GPU's holder in the frame).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze import report_cards as rc
from gpulens.app import prometheus, session
from gpulens.app.analysis import auto_step
from gpulens.config import Config
from gpulens.errors import CollectError, ConfigError
from gpulens.findings.engine import build_context, run_rules
from gpulens.findings.model import Finding
from gpulens.store import Store
from gpulens.store.events import events
from gpulens.store.frames import gpu_intervals

NS = 1_000_000_000


@dataclass
class Digest:
    """The cards of one period, the fleet's own card, and notes on the data."""

    period: str
    start_ns: int
    end_ns: int
    baselines: int
    teams: list[rc.Card] = field(default_factory=list)
    users: list[rc.Card] = field(default_factory=list)
    fleet: rc.Card | None = None
    notes: list[str] = field(default_factory=list)


def period_bounds(period: str, until_ns: int | None, now_ns: int) -> tuple[int, int]:
    """The card's period: the last whole UTC day (or Monday-to-Monday week) before `until`
    (default now)."""
    if period not in rc.PERIOD_S:
        raise ConfigError(f"--period {period!r}: use day or week")
    at = datetime.fromtimestamp((until_ns if until_ns is not None else now_ns) / NS, UTC)
    end = at.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        end -= timedelta(days=end.weekday())
    end_ns = int(end.timestamp()) * NS
    return end_ns - rc.PERIOD_S[period] * NS, end_ns


def _owners(frame: pa.Table) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    """(label, value) of a job or GPU → (team, user) that held it most in the frame."""
    out: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    gpu_s = np.nan_to_num(np.asarray(frame["gpu_s"].to_numpy(zero_copy_only=False), float))
    for label in ("job_id", "gpu_uuid", "pod"):
        if label not in frame.column_names:
            continue
        keys = rc.strings(frame, label)
        table = pa.table(
            {
                "k": keys,
                "team": rc.strings(frame, rc.TEAM),
                "user": rc.strings(frame, "user"),
                "w": gpu_s,
            }
        ).filter(pc.is_valid(keys))
        grouped = table.group_by(["k", "team", "user"]).aggregate([("w", "sum")])
        best: dict[str, tuple[float, str | None, str | None]] = {}
        for r in grouped.to_pylist():
            if r["team"] is None and r["user"] is None:
                continue
            if r["k"] not in best or r["w_sum"] > best[r["k"]][0]:
                best[r["k"]] = (r["w_sum"], r["team"], r["user"])
        for key, (_w, team, user) in best.items():
            out[(label, key)] = (team, user)
    return out


def assign(
    findings: Sequence[Finding],
    frame: pa.Table,
    members: Mapping[str, str],
) -> tuple[dict[str, list[rc.CardFinding]], dict[str, list[rc.CardFinding]]]:
    """The findings per team and per user (a finding names them, or its job or GPU does)."""
    owners = _owners(frame)
    teams: dict[str, list[rc.CardFinding]] = {}
    users: dict[str, list[rc.CardFinding]] = {}
    for f in findings:
        s = f.subject
        team, user = s.get("team") or s.get("namespace"), s.get("user")
        for label in ("job_id", "pod", "gpu_uuid"):
            if s.get(label) and (label, s[label]) in owners:
                held_team, held_user = owners[(label, s[label])]
                team, user = team or held_team, user or held_user
                break
        if user and user in members:
            team = members[user]
        card = _card_finding(f)
        if team:
            teams.setdefault(team, []).append(card)
        if user:
            users.setdefault(user, []).append(card)
    return teams, users


def _top(found: Mapping[str, list[rc.CardFinding]], n: int) -> dict[str, list[rc.CardFinding]]:
    return {
        k: sorted(v, key=lambda f: (-f.wasted_gpu_hours, f.rule_id))[:n] for k, v in found.items()
    }


def cards(
    store: Store,
    cfg: Config,
    period: str,
    start_ns: int,
    end_ns: int,
    baselines: int,
    members: Mapping[str, str] | None = None,
    top: int = 3,
) -> Digest:
    """The digest of the period [start_ns, end_ns) with `baselines` periods before it."""
    period_ns = rc.PERIOD_S[period] * NS
    first_ns = start_ns - baselines * period_ns
    step = auto_step(period_ns / NS)
    settings = session.analysis_settings(cfg)
    frame = gpu_intervals(
        store, step_s=step, start_ns=first_ns, end_ns=end_ns, max_gap_s=settings["max_gap_s"]
    )
    out = Digest(period, start_ns, end_ns, baselines)
    if frame.num_rows == 0:
        raise CollectError(
            f"no GPU readings from {_day(first_ns)} to {_day(end_ns)}: nothing to grade; "
            "check --data-dir / --prometheus and --until"
        )
    prices = session.prices(cfg)
    common = {
        "prices": prices,
        "region": session.carbon_region(cfg),
        "quotas": session.quotas(cfg),
        "states": settings["states"],
        "thresholds": settings["finding_thresholds"],
        "memory": settings["memory"],
    }
    annotated = build_context(frame, **common).frame
    annotated = rc.with_team(rc.with_period(annotated, first_ns, rc.PERIOD_S[period]), members)
    current = baselines
    now = annotated.filter(pc.equal(annotated[rc.PERIOD], current))
    if now.num_rows == 0:
        raise CollectError(
            f"no GPU readings in the {period} from {_day(start_ns)}: nothing to grade "
            f"(the {baselines} before it hold {annotated.num_rows} intervals)"
        )
    findings = run_rules(build_context(now, events(store, start_ns, end_ns), **common))
    by_team, by_user = assign(findings, now, members or {})
    currency = prices.currency
    fleet_rows = rc.figures(annotated, (rc.PERIOD,))
    teams_of = _members(annotated.filter(pc.equal(annotated[rc.PERIOD], current)))
    out.teams = rc.build_cards(
        "team", rc.figures(annotated, (rc.PERIOD, rc.TEAM)), rc.TEAM, fleet_rows, current,
        period, first_ns, currency, _top(by_team, top), teams_of,
    )  # fmt: skip
    out.users = rc.build_cards(
        "user", rc.figures(annotated, (rc.PERIOD, "user")), "user", fleet_rows, current,
        period, first_ns, currency, _top(by_user, top),
    )  # fmt: skip
    every = sorted(_flat(by_team, by_user, findings), key=lambda f: -f.wasted_gpu_hours)
    fleet = rc.build_cards(
        "fleet", [{**r, "all": "fleet"} for r in fleet_rows], "all", fleet_rows, current,
        period, first_ns, currency, {"fleet": every[:top]},
    )  # fmt: skip
    out.fleet = fleet[0] if fleet else None
    unowned = _unowned(now)
    if unowned > 0:
        out.notes.append(
            f"{unowned:.1f} GPU-hours held by no known team (no team, namespace or project "
            "label, and no members entry for their user): on the fleet card only"
        )
    return out


def _flat(
    teams: Mapping[str, list[rc.CardFinding]],
    users: Mapping[str, list[rc.CardFinding]],
    findings: Sequence[Finding],
) -> list[rc.CardFinding]:
    seen: dict[tuple[str, str], rc.CardFinding] = {}
    for group in (*teams.values(), *users.values()):
        for card in group:
            seen.setdefault((card.rule_id, card.summary), card)
    for f in findings:
        seen.setdefault((f.rule_id, f.summary), _card_finding(f))
    return list(seen.values())


def _card_finding(f: Finding) -> rc.CardFinding:
    return rc.CardFinding(
        rule_id=f.rule_id,
        severity=f.severity.value,
        summary=f.summary,
        wasted_gpu_hours=f.impact.wasted_gpu_hours,
        cost=f.impact.cost,
        recommendation=f.recommendation,
        docs=f.docs,
    )


def _members(frame: pa.Table) -> dict[str, list[str]]:
    pairs = pa.table({"t": rc.strings(frame, rc.TEAM), "u": rc.strings(frame, "user")})
    out: dict[str, list[str]] = {}
    for r in pairs.group_by(["t", "u"]).aggregate([]).to_pylist():
        if r["t"] is not None and r["u"] is not None:
            out.setdefault(r["t"], []).append(r["u"])
    return out


def _unowned(frame: pa.Table) -> float:
    team = rc.strings(frame, rc.TEAM)
    alloc = np.nan_to_num(np.asarray(frame["allocated_s"].to_numpy(zero_copy_only=False), float))
    mask = np.asarray(pc.is_null(team), dtype=bool)
    return float(alloc[mask].sum() / 3600)


def _day(ns: int) -> str:
    return datetime.fromtimestamp(ns / NS, UTC).strftime("%Y-%m-%d %H:%M UTC")


@contextmanager
def _store(
    cfg: Config, url: str | None, start_ns: int, end_ns: int, step_s: float
) -> Iterator[Store]:
    if url is None:
        store = session.open_store(cfg.data_dir)
        try:
            yield store
        finally:
            store.close()
        return
    with prometheus.pulled(cfg, url, start_ns / NS, end_ns / NS, step_s) as got:
        store = session.open_store(got.cfg.data_dir)
        try:
            yield store
        finally:
            store.close()


def build(
    cfg: Config,
    period: str,
    now_ns: int,
    until_ns: int | None = None,
    baselines: int = 4,
    url: str | None = None,
    members: Mapping[str, str] | None = None,
    top: int = 3,
) -> Digest:
    """The digest of the last whole `period` before `until` (default now), from the store of
    `cfg` or from the Prometheus at `url`."""
    if baselines < 0:
        raise ConfigError(f"--baselines {baselines}: give 0 or more previous periods")
    start_ns, end_ns = period_bounds(period, until_ns, now_ns)
    first_ns = start_ns - baselines * rc.PERIOD_S[period] * NS
    step = auto_step(rc.PERIOD_S[period])  # the cards' own step: read no finer
    with _store(cfg, url, first_ns, end_ns, step) as store:
        return cards(store, cfg, period, start_ns, end_ns, baselines, members, top)
