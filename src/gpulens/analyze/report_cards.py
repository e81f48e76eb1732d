"""Report cards: per team and per user, one period's useful work, idle-allocated GPU-hours
and their price, set against the subject's own baseline (its previous periods) and against
the fleet over the same period (pure: an annotated interval frame in, records out).

- `with_period` numbers the frame's intervals by period (0 = the oldest, the last one is the
  period the cards are about); `with_team` gives each interval its team: a `members` mapping
  (user → team) first, else the `team` label, else `namespace`, else `project`.
- `figures` sums, per group and period: GPU-hours held (allocated), useful, wasted,
  idle-allocated and what they cost (each interval's GPU-hour price), and the time-weighted
  means of SM and tensor activity.
- `build_cards`: the baseline is the mean per period over the previous periods in which the
  subject held GPUs (a period it held none is left out, not counted as zero); the useful
  share is useful ÷ allocated GPU-hours over the same periods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PERIOD_S: Mapping[str, int] = {"day": 86_400, "week": 7 * 86_400}
NS = 1_000_000_000
TEAM = "card_team"
PERIOD = "period"
_SUMS = ("allocated_s", "useful_s", "wasted_s", "idle_s", "idle_cost", "wasted_cost", "gpu_s")


@dataclass(frozen=True, slots=True)
class Figures:
    """One subject over one period (or the mean per period of a baseline)."""

    allocated_gpu_hours: float = 0.0
    useful_gpu_hours: float = 0.0
    wasted_gpu_hours: float = 0.0
    idle_allocated_gpu_hours: float = 0.0
    idle_allocated_cost: float = 0.0
    wasted_cost: float = 0.0
    mean_sm_active: float | None = None
    mean_tensor_active: float | None = None

    @property
    def useful_share(self) -> float | None:
        """Useful ÷ allocated GPU-hours (None when nothing was allocated)."""
        if self.allocated_gpu_hours <= 0:
            return None
        return self.useful_gpu_hours / self.allocated_gpu_hours

    def to_dict(self) -> dict[str, Any]:
        return {
            "allocated_gpu_hours": self.allocated_gpu_hours,
            "useful_gpu_hours": self.useful_gpu_hours,
            "useful_share": self.useful_share,
            "wasted_gpu_hours": self.wasted_gpu_hours,
            "idle_allocated_gpu_hours": self.idle_allocated_gpu_hours,
            "idle_allocated_cost": self.idle_allocated_cost,
            "wasted_cost": self.wasted_cost,
            "mean_sm_active": self.mean_sm_active,
            "mean_tensor_active": self.mean_tensor_active,
        }


@dataclass(frozen=True, slots=True)
class CardFinding:
    """A finding as a card shows it: what, what it cost, the fix."""

    rule_id: str
    severity: str
    summary: str
    wasted_gpu_hours: float
    cost: float
    recommendation: str
    docs: str


@dataclass
class Card:
    """A report card: `kind` team or user, its period's figures, its baseline (None without
    a previous period), the fleet's, what changed, its top findings."""

    kind: str
    name: str
    period: str
    start_ns: int
    end_ns: int
    current: Figures
    baseline: Figures | None
    baseline_periods: int
    fleet: Figures
    currency: str
    members: list[str] = field(default_factory=list)
    findings: list[CardFinding] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "period": self.period,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "currency": self.currency,
            "current": self.current.to_dict(),
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "baseline_periods": self.baseline_periods,
            "fleet": self.fleet.to_dict(),
            "members": self.members,
            "findings": [_slots(f) for f in self.findings],
            "verdicts": self.verdicts,
        }


def _slots(obj: Any) -> dict[str, Any]:
    return {k: getattr(obj, k) for k in obj.__slots__}


def _floats(frame: pa.Table, name: str) -> np.ndarray:
    if name not in frame.column_names:
        return np.full(frame.num_rows, np.nan)
    return np.asarray(frame[name].to_numpy(zero_copy_only=False), dtype=np.float64)


def strings(frame: pa.Table, name: str) -> pa.Array:
    if name not in frame.column_names:
        return pa.nulls(frame.num_rows, pa.string())
    column = frame[name].combine_chunks()
    return pc.cast(column, pa.string()) if pa.types.is_dictionary(column.type) else column


def with_period(frame: pa.Table, start_ns: int, period_s: int) -> pa.Table:
    """`frame` with `period`: (interval start − start) // period (0 = the oldest)."""
    starts = np.asarray(frame["start_ns"].to_numpy(zero_copy_only=False), dtype=np.int64)
    period = (starts - start_ns) // (period_s * NS)
    return frame.append_column(PERIOD, pa.array(period, pa.int64()))


def with_team(frame: pa.Table, members: Mapping[str, str] | None = None) -> pa.Table:
    """`frame` with `card_team` (see the module doc)."""
    team = strings(frame, "team")
    for fallback in ("namespace", "project"):
        team = pc.coalesce(team, strings(frame, fallback))
    if members:
        users = strings(frame, "user")
        keys = pa.array(list(members), pa.string())
        mapped = pa.array(list(members.values()), pa.string()).take(
            pc.index_in(users, value_set=keys)
        )
        team = pc.coalesce(mapped, team)
    return frame.append_column(TEAM, team)


def figures(frame: pa.Table, by: Sequence[str]) -> list[dict[str, Any]]:
    """Per group of `by` (columns of an annotated frame): the sums of `Figures` in hours and
    money, and the activity means weighted by covered GPU time."""
    gpu_s = np.nan_to_num(_floats(frame, "gpu_s"))
    wasted = np.nan_to_num(_floats(frame, "wasted_s"))
    price = np.nan_to_num(_floats(frame, "price_per_gpu_hour"))
    cause = strings(frame, "waste_cause")
    idle = np.asarray(pc.fill_null(pc.equal(cause, "idle_allocated"), False), dtype=bool)
    cols: dict[str, Any] = {k: frame[k] for k in by}
    cols["gpu_s"] = gpu_s
    cols["allocated_s"] = np.nan_to_num(_floats(frame, "allocated_s"))
    cols["useful_s"] = np.nan_to_num(_floats(frame, "useful_s"))
    cols["wasted_s"] = wasted
    cols["idle_s"] = np.where(idle, wasted, 0.0)
    cols["idle_cost"] = np.where(idle, wasted / 3600 * price, 0.0)
    cols["wasted_cost"] = wasted / 3600 * price
    for metric in ("sm_active", "tensor_active"):
        values = _floats(frame, metric)
        known = ~np.isnan(values) & (gpu_s > 0)
        cols[f"{metric}_w"] = np.where(known, values * gpu_s, 0.0)
        cols[f"{metric}_n"] = np.where(known, gpu_s, 0.0)
    table = pa.table(cols)
    sums = [*_SUMS, "sm_active_w", "sm_active_n", "tensor_active_w", "tensor_active_n"]
    grouped = table.group_by(list(by)).aggregate([(c, "sum") for c in sums])
    out = []
    for row in grouped.to_pylist():
        rec = {k: row[k] for k in by}
        rec.update({c: row[f"{c}_sum"] or 0.0 for c in _SUMS})
        for metric in ("sm_active", "tensor_active"):
            n = row[f"{metric}_n_sum"] or 0.0
            rec[f"mean_{metric}"] = row[f"{metric}_w_sum"] / n if n > 0 else None
        out.append(rec)
    return out


def _figures(rec: Mapping[str, Any]) -> Figures:
    return Figures(
        allocated_gpu_hours=rec["allocated_s"] / 3600,
        useful_gpu_hours=rec["useful_s"] / 3600,
        wasted_gpu_hours=rec["wasted_s"] / 3600,
        idle_allocated_gpu_hours=rec["idle_s"] / 3600,
        idle_allocated_cost=rec["idle_cost"],
        wasted_cost=rec["wasted_cost"],
        mean_sm_active=rec.get("mean_sm_active"),
        mean_tensor_active=rec.get("mean_tensor_active"),
    )


def _mean(records: Sequence[Mapping[str, Any]]) -> Figures:
    """The mean per period of `records` (one per period); activity weighted by GPU time."""
    n = len(records)
    total = {c: sum(r[c] for r in records) for c in _SUMS}
    means: dict[str, float | None] = {}
    for metric in ("sm_active", "tensor_active"):
        known = [r for r in records if r.get(f"mean_{metric}") is not None and r["gpu_s"] > 0]
        weight = sum(r["gpu_s"] for r in known)
        means[metric] = (
            sum(r[f"mean_{metric}"] * r["gpu_s"] for r in known) / weight if weight else None
        )
    return Figures(
        allocated_gpu_hours=total["allocated_s"] / 3600 / n,
        useful_gpu_hours=total["useful_s"] / 3600 / n,
        wasted_gpu_hours=total["wasted_s"] / 3600 / n,
        idle_allocated_gpu_hours=total["idle_s"] / 3600 / n,
        idle_allocated_cost=total["idle_cost"] / n,
        wasted_cost=total["wasted_cost"] / n,
        mean_sm_active=means["sm_active"],
        mean_tensor_active=means["tensor_active"],
    )


def _pct(x: float | None) -> str:
    return "unknown" if x is None else f"{x * 100:.0f}%"


def verdicts(card: Card) -> list[str]:
    """What changed, in words: useful share and idle-allocated time against the baseline
    and the fleet."""
    out = []
    share = card.current.useful_share
    base = card.baseline.useful_share if card.baseline else None
    fleet = card.fleet.useful_share
    held = card.current.allocated_gpu_hours
    line = f"Useful work: {_pct(share)} of the {held:.1f} GPU-hours held"
    parts = []
    if share is not None and base is not None:
        diff = (share - base) * 100
        if abs(diff) < 0.5:
            parts.append(f"level with its baseline ({_pct(base)})")
        else:
            trend = "up" if diff > 0 else "down"
            parts.append(f"{trend} {abs(diff):.0f} points on its baseline ({_pct(base)})")
    elif card.baseline is None:
        parts.append("no baseline yet (no previous period with GPUs held)")
    if share is not None and fleet is not None and card.kind != "fleet":
        diff = (share - fleet) * 100
        where = "above" if diff > 0.5 else "below" if diff < -0.5 else "level with"
        gap = f"{abs(diff):.0f} points " if where != "level with" else ""
        parts.append(f"{gap}{where} the fleet ({_pct(fleet)})")
    out.append(line + (": " + "; ".join(parts) if parts else "") + ".")
    idle = card.current.idle_allocated_gpu_hours
    idle_line = (
        f"Idle while allocated: {idle:.1f} GPU-hours "
        f"({card.current.idle_allocated_cost:,.2f} {card.currency})"
    )
    if card.baseline is not None:
        base = card.baseline.idle_allocated_gpu_hours
        idle_line += f", baseline {base:.1f} GPU-hours per {card.period}"
    out.append(idle_line + ".")
    return out


def build_cards(
    kind: str,
    rows: Sequence[Mapping[str, Any]],
    key: str,
    fleet_rows: Sequence[Mapping[str, Any]],
    current: int,
    period: str,
    start_ns: int,
    currency: str,
    findings: Mapping[str, Sequence[CardFinding]] | None = None,
    members: Mapping[str, Sequence[str]] | None = None,
) -> list[Card]:
    """A card per subject (`key` value) that held GPUs in period `current`: `rows` are
    `figures(frame, (PERIOD, key))`, `fleet_rows` `figures(frame, (PERIOD,))`. Largest
    idle-allocated cost first."""
    period_ns = PERIOD_S[period] * NS
    fleet_now = next((r for r in fleet_rows if r[PERIOD] == current), None)
    fleet = _figures(fleet_now) if fleet_now else Figures()
    by_subject: dict[str, dict[int, Mapping[str, Any]]] = {}
    for r in rows:
        if r[key] is not None:
            by_subject.setdefault(str(r[key]), {})[int(r[PERIOD])] = r
    cards = []
    for name, periods in by_subject.items():
        now = periods.get(current)
        if now is None or now["allocated_s"] <= 0:
            continue
        before = [r for p, r in periods.items() if p < current and r["allocated_s"] > 0]
        card = Card(
            kind=kind,
            name=name,
            period=period,
            start_ns=start_ns + current * period_ns,
            end_ns=start_ns + (current + 1) * period_ns,
            current=_figures(now),
            baseline=_mean(before) if before else None,
            baseline_periods=len(before),
            fleet=fleet,
            currency=currency,
            members=sorted((members or {}).get(name, [])),
            findings=list((findings or {}).get(name, [])),
        )
        card.verdicts = verdicts(card)
        cards.append(card)
    return sorted(cards, key=lambda c: (-c.current.idle_allocated_cost, c.name))
