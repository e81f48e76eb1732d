"""Renders the fleet plans (`gpulens fleet --forecast/--plans/--quotas`): the capacity
forecast, the off-peak plan, the consolidation plan and the quota report, as JSON keys and as
terminal, Markdown and HTML sections appended to the fleet summary.

JSON: `forecast: {model, horizon_s, step_s, points: [{t, pooled, lo, hi}], test_mase,
baseline_mase, baseline, validation_mase, window_hours, level, queues}`, `offpeak`,
`consolidation`, `quotas`; GPUs are GPUs, GPU-time GPU-hours, times ISO 8601 UTC, unknown null.
"""

from __future__ import annotations

import html
import json
import math
from datetime import UTC, datetime
from typing import Any

from gpulens.analyze.cluster.consolidation import ConsolidationPlan
from gpulens.analyze.cluster.forecast import CapacityForecast
from gpulens.analyze.cluster.offpeak import WEEKDAYS, OffPeakPlan
from gpulens.analyze.cluster.quotas import QuotaReport
from gpulens.app.fleet_plans import FleetPlans
from gpulens.present import format as human
from gpulens.present.reports.markup import html_table, md_table

Section = tuple[str, list[str], tuple[str, ...], list[list[str]]]  # title, lines, table


def _n(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _iso(ts_s: int) -> str:
    return datetime.fromtimestamp(ts_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _forecast_dict(f: CapacityForecast) -> dict[str, Any]:
    p = f.pooled
    times = [_iso(p.start_s + i * p.step_s) for i in range(p.mean.size)]
    return {
        "model": p.model,
        "horizon_s": p.horizon_s,
        "step_s": p.step_s,
        "points": [
            {"t": t, "pooled": float(m), "lo": float(lo), "hi": float(hi)}
            for t, m, lo, hi in zip(times, p.mean, p.lo, p.hi, strict=True)
        ],
        "test_mase": _n(p.test_mase),
        "baseline_mase": _n(p.baseline_mase),
        "baseline": p.baseline,
        "validation_mase": {k: _n(v) for k, v in p.validation_mase.items()},
        "window_hours": p.window_hours,
        "level": p.level,
        "queues": [
            {
                "name": q.name,
                "points": [
                    {"t": t, "demand": float(m), "lo": float(lo), "hi": float(hi)}
                    for t, m, lo, hi in zip(times, q.mean, q.lo, q.hi, strict=True)
                ],
                "test_mase": _n(q.test_mase),
                "baseline_mase": _n(q.baseline_mase),
            }
            for q in f.queues
        ],
    }


def _offpeak_dict(o: OffPeakPlan) -> dict[str, Any]:
    return {
        "heat_map": {
            "weekdays": list(WEEKDAYS),
            "hours_utc": list(range(24)),
            "demand_gpus": [[_n(float(x)) for x in row] for row in o.heat],
            "batch_gpus": [[_n(float(x)) for x in row] for row in o.batch_heat],
        },
        "batch_queues": list(o.batch_queues),
        "peak_gpus": _n(o.peak_gpus),
        "level_gpus": _n(o.level_gpus),
        "peak_freed_gpus": _n(o.peak_freed_gpus),
        "movable_gpu_hours_per_week": o.movable_gpu_hours,
        "busy_hours": [{"weekday": WEEKDAYS[d], "hour_utc": h} for d, h in o.busy_hours],
        "quiet_hours": [{"weekday": WEEKDAYS[d], "hour_utc": h} for d, h in o.quiet_hours],
        "weeks": o.weeks,
    }


def _consolidation_dict(c: ConsolidationPlan) -> dict[str, Any]:
    return {
        "gpus_freed": c.gpus_freed,
        "jobs_considered": c.jobs_considered,
        "jobs_unknown": c.jobs_unknown,
        "moves": [
            {
                "kind": m.kind,
                "jobs": list(m.jobs),
                "target": m.target,
                "gpus_freed": m.gpus_freed,
                "memory_headroom": _n(m.memory_headroom),
                "interference": _n(m.interference),
                "risk": m.risk,
            }
            for m in c.moves
        ],
    }


def _quotas_dict(r: QuotaReport) -> dict[str, Any]:
    return {
        "queues": [
            {
                "name": q.name,
                "quota_gpus": q.quota.gpus,
                "limit_gpus": _n(q.quota.limit),
                "parent": q.quota.parent or None,
                "source": q.quota.source,
                "mean_in_use_gpus": _n(q.mean_in_use),
                "peak_in_use_gpus": _n(q.peak_in_use),
                "usage_over_quota": _n(q.usage_over_quota),
                "over_quota_share": _n(q.over_quota_share),
                "starved_gpu_hours": _n(q.starved_gpu_hours),
                "monopoly_gpu_hours": _n(q.monopoly_gpu_hours),
                "useful_gpu_hours": _n(q.useful_gpu_hours),
            }
            for q in r.queues
        ],
        "unmatched": list(r.unmatched),
        "fairness": {
            "jain_allocation": r.jain_allocation,
            "gini_allocation": r.gini_allocation,
            "jain_useful": r.jain_useful,
            "gini_useful": r.gini_useful,
        },
    }


def plans_dict(plans: FleetPlans | None, quotas: QuotaReport | None) -> dict[str, Any]:
    """The JSON keys the plans add to `gpulens fleet --format json`."""
    out: dict[str, Any] = {}
    if plans is not None and plans.forecast is not None:
        out["forecast"] = _forecast_dict(plans.forecast)
    if plans is not None and plans.offpeak is not None:
        out["offpeak"] = _offpeak_dict(plans.offpeak)
    if plans is not None and plans.consolidation is not None:
        out["consolidation"] = _consolidation_dict(plans.consolidation)
    if quotas is not None:
        out["quotas"] = _quotas_dict(quotas)
    if plans is not None and plans.notes:
        out["plan_notes"] = list(plans.notes)
    return out


def _g(x: float | None) -> str:
    return human.number(_n(x)) + " GPUs" if _n(x) is not None else human.MISSING


def _h(x: float | None) -> str:
    return human.number(_n(x)) + " GPU-h" if _n(x) is not None else human.MISSING


def _mase(x: float | None) -> str:
    return f"{x:.3f}" if _n(x) is not None else human.MISSING


def _forecast_section(f: CapacityForecast) -> Section:
    p = f.pooled
    peak = int(p.mean.argmax())
    lines = [
        f"model {p.model} (chosen on a {p.window_hours} h validation window); test-window MASE "
        f"{_mase(p.test_mase)} against {p.baseline} {_mase(p.baseline_mase)}",
        f"next {p.horizon_s // 3600} h from {_iso(p.start_s)}: peak {_g(float(p.mean[peak]))} at "
        f"{_iso(p.start_s + peak * p.step_s)} ({p.level:.0%} interval "
        f"{_g(float(p.lo[peak]))} to {_g(float(p.hi[peak]))}), mean {_g(float(p.mean.mean()))}",
    ]
    rows = [
        [
            q.name,
            _g(float(q.mean.mean())),
            _g(float(q.mean.max())),
            _g(float(q.hi.max())),
            _mase(q.test_mase),
            _mase(q.baseline_mase),
        ]
        for q in f.queues
    ]
    headers = ("queue", "mean", "peak", "peak (high)", "test MASE", "seasonal naive MASE")
    return ("Capacity forecast", lines, headers, rows)


def _offpeak_section(o: OffPeakPlan) -> Section:
    lines = [
        f"batch queues: {', '.join(o.batch_queues)}; over {o.weeks:.1f} weeks",
        f"typical week: peak {_g(o.peak_gpus)}; moving {_h(o.movable_gpu_hours)} of batch work "
        f"a week into {len(o.quiet_hours)} quiet hours lowers it to {_g(o.level_gpus)} "
        f"({_g(o.peak_freed_gpus)} freed at the peak)",
        "mean demand per weekday (rows) and hour UTC (columns), GPUs:",
    ]
    headers = ("day", *(f"{h:02d}" for h in range(24)))
    rows = [[WEEKDAYS[d], *(human.number(_n(float(x)), 2) for x in o.heat[d])] for d in range(7)]
    return ("Off-peak plan", lines, headers, rows)


def _consolidation_section(c: ConsolidationPlan) -> Section:
    lines = [f"{len(c.moves)} moves free {_g(c.gpus_freed)}"]
    if c.jobs_unknown:
        lines.append(f"{c.jobs_unknown} jobs without SM activity or memory left out")
    headers = ("move", "jobs / nodes", "target", "freed", "memory headroom", "interference",
               "risk")  # fmt: skip
    rows = [
        [
            m.kind,
            ", ".join(m.jobs[:6]) + (" ..." if len(m.jobs) > 6 else ""),
            m.target,
            _g(m.gpus_freed),
            human.percent(_n(m.memory_headroom)),
            human.number(_n(m.interference), 2),
            m.risk,
        ]
        for m in c.moves
    ]
    return ("Consolidation plan", lines, headers, rows)


def _quota_section(r: QuotaReport) -> Section:
    lines = [
        "fairness by allocation (in-use GPU-h ÷ quota): Jain "
        f"{human.number(r.jain_allocation, 3)}, Gini {human.number(r.gini_allocation, 3)}",
        "fairness by useful work (useful GPU-h ÷ quota): Jain "
        f"{human.number(r.jain_useful, 3)}, Gini {human.number(r.gini_useful, 3)}",
    ]
    if r.unmatched:
        lines.append(f"queues without a quota: {', '.join(r.unmatched)}")
    headers = ("queue", "quota", "limit", "mean in use", "peak", "use ÷ quota", "starved",
               "monopoly", "useful")  # fmt: skip
    rows = [
        [
            q.name,
            _g(q.quota.gpus),
            _g(q.quota.limit),
            _g(q.mean_in_use),
            _g(q.peak_in_use),
            human.percent(_n(q.usage_over_quota)),
            _h(q.starved_gpu_hours),
            _h(q.monopoly_gpu_hours),
            _h(q.useful_gpu_hours),
        ]
        for q in r.queues
    ]
    return ("Quotas and fair share", lines, headers, rows)


def sections(plans: FleetPlans | None, quotas: QuotaReport | None) -> list[Section]:
    out = []
    if plans is not None and plans.forecast is not None:
        out.append(_forecast_section(plans.forecast))
    if plans is not None and plans.offpeak is not None:
        out.append(_offpeak_section(plans.offpeak))
    if plans is not None and plans.consolidation is not None:
        out.append(_consolidation_section(plans.consolidation))
    if quotas is not None:
        out.append(_quota_section(quotas))
    if plans is not None and plans.notes:
        out.append(("Plan notes", list(plans.notes), (), []))
    return out


def _text_table(headers: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: tuple[str, ...] | list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def render_terminal(plans: FleetPlans | None, quotas: QuotaReport | None) -> str:
    out: list[str] = []
    for title, lines, headers, rows in sections(plans, quotas):
        out += ["", title.lower(), *lines]
        if rows:
            out += _text_table(headers, rows)
    return "\n".join(out) + "\n" if out else ""


def render_markdown(plans: FleetPlans | None, quotas: QuotaReport | None) -> str:
    out: list[str] = []
    for title, lines, headers, rows in sections(plans, quotas):
        out += [f"## {title}", "", *(f"- {line}" for line in lines), ""]
        if rows:
            out += md_table(headers, rows)
    return "\n".join(out) + "\n" if out else ""


def render_html(plans: FleetPlans | None, quotas: QuotaReport | None) -> str:
    esc = html.escape
    body: list[str] = []
    for title, lines, headers, rows in sections(plans, quotas):
        body += [f"<h2>{esc(title)}</h2>", "<ul>", *(f"<li>{esc(x)}</li>" for x in lines), "</ul>"]
        if rows:
            body.append(html_table(headers, rows))
    return "".join(body)


def with_report_plans(text: str, fmt: str, plans: FleetPlans) -> str:
    """`gpulens report`'s output (present/reports/fleet.py) with the plans: a `plans` key in
    JSON (the keys of `plans_dict`), a "Plans" part after the report in the other formats."""
    if fmt == "json":
        from gpulens.present.reports.fleet import dumps

        doc = json.loads(text)
        doc["plans"] = plans_dict(plans, None)
        return dumps(doc)
    if fmt == "html":
        part = f"<h1>Plans</h1>{render_html(plans, None)}</body>"
        return text.replace("</body>", part, 1)
    if fmt == "markdown":
        return f"{text.rstrip()}\n\n# Plans\n\n{render_markdown(plans, None)}"
    return f"{text.rstrip()}\n\nPlans\n=====\n{render_terminal(plans, None).lstrip()}"
