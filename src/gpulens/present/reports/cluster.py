"""Renders a FleetView (`gpulens fleet`) as JSON, terminal text, Markdown or HTML.

The JSON keys are documented in docs/fleet.md: ratios are 0..1, GPU counts are GPUs, GPU-time
is in GPU-hours (`*_gpu_hours`), times are ISO 8601 UTC; unknown is null, never 0.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from gpulens.analyze.cluster.queues import ClusterSummary
from gpulens.app.fleet import FleetView
from gpulens.findings.model import Evidence, Finding
from gpulens.present import format as human
from gpulens.present.reports.markup import html_table, md_table, page_css

if TYPE_CHECKING:
    from gpulens.app.fleet_usage import UsageView

SCHEMA_VERSION = 1

#: the unit each evidence row of the fleet rules is in
EVIDENCE_UNITS = {
    "pending_while_idle_share": "ratio",
    "pending_while_idle_gpu_hours": "GPU-h",
    "pooled_allocation": "ratio",
    "peak_hour_gpu_hours": "GPU-h",
    "steps": "steps",
    "fragmented_gpus": "GPUs",
    "free_gpus": "GPUs",
    "largest_free_block": "GPUs",
    "starved_gpu_hours": "GPU-h",
    "starved_share": "ratio",
    "quota_gpus": "GPUs",
    "mean_in_use_gpus": "GPUs",
    "usage_over_quota": "ratio",
    "monopoly_gpu_hours": "GPU-h",
    "monopoly_share": "ratio",
    "peak_in_use_gpus": "GPUs",
    "over_quota_share": "ratio",
}


def _n(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _iso(ts_s: int) -> str:
    return datetime.fromtimestamp(ts_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _series(values: Any) -> list[float | None]:
    return [None if math.isnan(x) else x for x in values.tolist()]


def per_step(view: FleetView) -> dict[str, Any]:
    """The per-step sums over the queues and the movable GPUs (`--per-step`)."""
    s = view.summary
    if s is None:
        return {}
    return {
        "start": _iso(s.start_s),
        "step_s": s.step_s,
        "total_gpus": _series(s.step_total),
        "in_use_gpus": _series(s.step_in_use),
        "pending_gpus": _series(s.step_pending),
        "pending_while_idle_gpus": _series(s.movable),
    }


def _sequence_dict(s: ClusterSummary | None) -> dict[str, Any]:
    if s is None:
        return {"window": None, "pooled_allocation": None, "queues": []}
    return {
        "window": {
            "start": _iso(s.start_s),
            "end": _iso(s.end_s),
            "step_s": s.step_s,
            "steps": s.steps,
        },
        "pooled_allocation": _n(s.pooled_allocation),
        "gpus": _n(s.gpus),
        "gpu_hours": s.gpu_hours,
        "in_use_gpu_hours": s.in_use_gpu_hours,
        "pending_gpu_hours": _n(s.pending_gpu_hours),
        "pending_while_idle_share": _n(s.pending_while_idle_share),
        "pending_while_idle_gpu_hours": _n(s.pending_while_idle_gpu_hours),
        "pending_while_idle_peak": {
            "start": _iso(s.peak_start_s),
            "gpu_hours": _n(s.peak_gpu_hours),
        },
        "queues": [
            {
                "name": q.name,
                "gpus": _n(q.gpus),
                "allocation": _n(q.allocation),
                "allocation_quartiles": [_n(x) for x in q.allocation_quartiles],
                "pending_while_idle_share": _n(q.pending_while_idle_share),
                "gpu_hours": q.gpu_hours,
                "in_use_gpu_hours": q.in_use_gpu_hours,
                "idle_gpu_hours": q.idle_gpu_hours,
                "pending_gpu_hours": _n(q.pending_gpu_hours),
                "pending_steps_share": _n(q.pending_steps_share),
                "waited_while_idle_gpu_hours": _n(q.waited_while_idle_gpu_hours),
                "idle_while_others_waited_gpu_hours": _n(q.idle_while_others_waited_gpu_hours),
                "steps": q.steps,
            }
            for q in s.queues
        ],
    }


def _usage_dict(u: UsageView | None) -> dict[str, Any] | None:
    if u is None:
        return None
    return {
        "window": {"start": _iso(u.start_ns // 10**9), "end": _iso(u.end_ns // 10**9)},
        "currency": u.currency,
        "by_queue": u.by_queue,
        "by_team": u.by_team,
        "by_user": u.by_user,
        "idle_allocated": [f.to_dict() for f in u.idle_allocated],
    }


def to_dict(view: FleetView, steps: bool = False) -> dict[str, Any]:
    """The JSON document of `gpulens fleet --format json` (`steps`: with `per_step`)."""
    extra = {"per_step": per_step(view)} if steps and view.summary else {}
    return {
        "schema_version": SCHEMA_VERSION,
        "sources": view.sources,
        **_sequence_dict(view.summary),
        "pending_unknown": view.pending_unknown or None,
        "fragmentation": [
            {
                "queue": f.queue,
                "nodes": f.nodes,
                "gpus": f.gpus,
                "free_gpus": f.free_gpus,
                "largest_free_block": f.largest_free_block,
                "free_per_node": list(f.free_per_node),
                "pending_job_gpus": list(f.pending_sizes),
                "fragmented_jobs": list(f.fragmented_jobs),
                "fragmented_gpus": f.fragmented_gpus,
                "stranded_gpus": f.stranded_gpus,
            }
            for f in view.fragmentation
        ],
        "gpus_held_by_user": [{"user": u, "gpus": g} for u, g in view.held_by_user.items()],
        "gpus_held_by_team": [{"team": t, "gpus": g} for t, g in view.held_by_team.items()],
        "nodes": [
            {
                "node": n.node,
                "state": n.state,
                "gpus": n.gpus,
                "used_gpus": n.used,
                "allocation": n.allocation,
                "queues": n.queues.split(",") if n.queues else [],
            }
            for n in view.nodes
        ],
        "findings": [f.to_dict() for f in view.findings],
        "usage": _usage_dict(view.usage),
        "notes": view.notes,
        **extra,
    }


def render_json(view: FleetView, steps: bool = False) -> str:
    option = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    return orjson.dumps(to_dict(view, steps), option=option).decode() + "\n"


def _gpus(x: float) -> str:
    return human.number(_n(x)) + " GPUs" if _n(x) is not None else human.MISSING


def _hours(x: float | None) -> str:
    return human.number(_n(x)) + " GPU-h" if _n(x) is not None else human.MISSING


def _quartiles(q: tuple[float, float, float]) -> str:
    return " / ".join(human.percent(_n(x)) for x in q)


QUEUE_HEADERS = (
    "queue",
    "GPUs",
    "allocation",
    "q1 / median / q3",
    "idle",
    "pending",
    "pending while idle elsewhere",
)


UNKNOWN = "unknown"


def _queue_rows(view: FleetView) -> list[list[str]]:
    return [
        [
            q.name,
            _gpus(q.gpus),
            human.percent(_n(q.allocation)),
            _quartiles(q.allocation_quartiles),
            _hours(q.idle_gpu_hours),
            _hours(q.pending_gpu_hours) if q.pending_known else UNKNOWN,
            f"{human.percent(_n(q.pending_while_idle_share))} of steps, "
            f"{_hours(q.waited_while_idle_gpu_hours)}"
            if q.pending_known and _n(q.pending_while_idle_share) is not None
            else UNKNOWN,
        ]
        for q in (view.summary.queues if view.summary else ())
    ]


def pending_lines(view: FleetView) -> list[str]:
    """The pending-while-idle and pending-demand lines: figures, or "unknown (why)"."""
    s = view.summary
    if s is None:
        return []
    if not s.pending_known:
        why = view.pending_unknown or "no source gave pending demand in GPUs"
        return [f"pending while idle: {UNKNOWN} ({why})", f"pending demand: {UNKNOWN}"]
    missing = [q.name for q in s.queues if not q.pending_known]
    partial = f" (unknown for {', '.join(missing[:8])}: a lower bound)" if missing else ""
    return [
        f"pending while idle: {human.percent(_n(s.pending_while_idle_share))} of the steps, "
        f"{_hours(s.pending_while_idle_gpu_hours)} could have moved{partial}",
        f"pending demand: {_hours(s.pending_gpu_hours)}{partial}",
    ]


def _headline(view: FleetView) -> list[str]:
    s = view.summary
    if s is None:
        return [f"sources: {'; '.join(view.sources)}"]
    return [
        f"window: {_iso(s.start_s)} to {_iso(s.end_s)}, {s.steps} step"
        f"{'' if s.steps == 1 else 's'} of {s.step_s} s",
        f"sources: {'; '.join(view.sources)}",
        f"pooled allocation: {human.percent(_n(s.pooled_allocation))} of "
        f"{_hours(s.gpu_hours)} ({_hours(s.in_use_gpu_hours)} in use)",
        *pending_lines(view),
    ]


USAGE_HEADERS = (
    "GPUs",
    "allocation",
    "duty cycle",
    "SM active",
    "tensor active",
    "useful / allocated",
    "wasted",
    "wasted cost",
)


def _usage_rows(rows: list[dict[str, Any]], key: str, currency: str) -> list[list[str]]:
    return [
        [
            str(r[key]),
            f"{r['gpus']} GPUs" if r["gpus"] is not None else human.MISSING,
            human.percent(r["allocation"]),
            human.percent(r["mean_duty"]),
            human.percent(r["mean_sm_active"]),
            human.percent(r["mean_tensor_active"]),
            human.percent(r["useful_per_gpu_hour"]),
            _hours(r["wasted_gpu_hours"] or 0.0),
            human.money(r["wasted_cost"], currency),
        ]
        for r in rows
    ]


def _usage_tables(view: FleetView) -> list[tuple[str, tuple[str, ...], list[list[str]]]]:
    """(title, headers, rows) of the store's usage per queue, team and user."""
    u = view.usage
    if u is None:
        return []
    out: list[tuple[str, tuple[str, ...], list[list[str]]]] = []
    for title, key, rows in (
        ("by queue", "queue", u.by_queue),
        ("by team", "team", u.by_team),
        ("by user", "user", u.by_user[:20]),
    ):
        out.append((title, (key, *USAGE_HEADERS), _usage_rows(rows, key, u.currency)))
    return out


def _idle_lines(view: FleetView) -> list[str]:
    """The idle-allocated inventory: owner, where, for how long, what it cost."""
    u = view.usage
    if u is None:
        return []
    out = []
    for f in u.idle_allocated:
        who = ", ".join(
            f"{k}={f.subject[k]}" for k in ("user", "job_id", "team") if f.subject.get(k)
        )
        where = "/".join(f.subject[k] for k in ("host", "gpu_index") if f.subject.get(k))
        out.append(
            f"[{f.severity.value}] {who or 'unattributed'} on {where or '?'}: {f.summary}; "
            f"{_hours(f.impact.wasted_gpu_hours)}, {human.money(f.impact.cost, f.impact.currency)}"
        )
    return out


def _evidence(e: Evidence) -> str:
    unit = EVIDENCE_UNITS.get(e.metric, "")
    shown = (
        human.percent(_n(e.value))
        if unit == "ratio"
        else f"{human.number(_n(e.value))} {unit}".strip()
    )
    if e.comparison and e.threshold is not None:
        limit = (
            human.percent(e.threshold)
            if unit == "ratio"
            else f"{human.number(e.threshold)} {unit}".strip()
        )
        shown += f" ({e.comparison} {limit})"
    return f"{e.metric} = {shown}" + (f"; {e.note}" if e.note else "")


def _frag_rows(view: FleetView) -> list[list[str]]:
    return [
        [
            f.queue,
            str(f.nodes),
            _gpus(f.free_gpus),
            _gpus(f.largest_free_block),
            _gpus(f.stranded_gpus),
            ", ".join(human.number(x) for x in f.pending_sizes) or "-",
            ", ".join(f.fragmented_jobs) or "-",
        ]
        for f in view.fragmentation
    ]


FRAG_HEADERS = (
    "queue",
    "nodes",
    "free",
    "most free on one node",
    "stranded (no CPU left)",
    "pending jobs (GPUs)",
    "fragmented out",
)


def _finding_lines(f: Finding) -> list[str]:
    return [
        f"[{f.severity.value}] {f.rule_id}: {f.summary}",
        *(f"  - {_evidence(e)}" for e in f.evidence),
        f"  fix: {f.recommendation}",
        f"  see {f.docs}",
    ]


def _text_table(headers: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def _held_lines(view: FleetView) -> list[str]:
    out = []
    for what, held in (("user", view.held_by_user), ("team", view.held_by_team)):
        if held:
            top = list(held.items())[:10]
            out += ["", f"GPUs held by {what}: " + ", ".join(f"{k} {_gpus(g)}" for k, g in top)]
    return out


def _nodes_line(view: FleetView) -> str:
    """How many GPU nodes are full, partly used, unused, or unknown."""
    alloc = [n.allocation for n in view.nodes]
    full = sum(1 for a in alloc if a is not None and a >= 1)
    empty = sum(1 for a in alloc if a == 0)
    unknown = sum(1 for a in alloc if a is None)
    part = len(alloc) - full - empty - unknown
    return (
        f"GPU nodes: {len(alloc)} ({full} fully allocated, {part} partly, {empty} unused, "
        f"{unknown} unknown)"
    )


NODE_HEADERS = ("node", "state", "GPUs", "in use", "allocation", "queues")


def _node_table_rows(view: FleetView) -> list[list[str]]:
    return [
        [
            n.node,
            n.state or "-",
            _gpus(n.gpus),
            _gpus(n.used) if n.used is not None else human.MISSING,
            human.percent(n.allocation),
            n.queues or "-",
        ]
        for n in view.nodes
    ]


def render_terminal(view: FleetView) -> str:
    out = ["gpulens fleet", *_headline(view)]
    if view.summary:
        out += ["", *_text_table(QUEUE_HEADERS, _queue_rows(view))]
    for title, headers, rows in _usage_tables(view):
        if rows:
            out += ["", f"store usage {title}", *_text_table(headers, rows)]
    if view.usage:
        out += ["", f"idle allocated: {len(view.usage.idle_allocated)}", *_idle_lines(view)]
    if view.fragmentation:
        out += ["", "fragmentation", *_text_table(FRAG_HEADERS, _frag_rows(view))]
    out += _held_lines(view)
    if view.nodes:
        out += ["", _nodes_line(view)]
    out += ["", f"findings: {len(view.findings)}"]
    for f in view.findings:
        out += _finding_lines(f)
    out += [f"note: {n}" for n in view.notes]
    return "\n".join(out) + "\n"


def render_markdown(view: FleetView) -> str:
    out = ["# gpulens fleet", "", *(f"- {line}" for line in _headline(view)), ""]
    if view.summary:
        out += ["## Queues", "", *md_table(QUEUE_HEADERS, _queue_rows(view))]
    for title, headers, rows in _usage_tables(view):
        out += [f"## Store usage {title}", "", *md_table(headers, rows)]
    if view.usage:
        out += ["## Idle allocated", "", *(f"- {line}" for line in _idle_lines(view)), ""]
    if view.fragmentation:
        out += ["## Fragmentation", "", *md_table(FRAG_HEADERS, _frag_rows(view))]
    out += [f"- {line.strip()}" for line in _held_lines(view) if line.strip()]
    if view.nodes:
        out += ["", "## Nodes", "", _nodes_line(view), "", *md_table(NODE_HEADERS,
                _node_table_rows(view))]  # fmt: skip
    out += ["## Findings", ""]
    for f in view.findings:
        out += [f"### {f.rule_id} ({f.severity.value})", "", f.summary, ""]
        out += [f"- {_evidence(e)}" for e in f.evidence]
        out += ["", f"Fix: {f.recommendation}", "", f"See {f.docs}.", ""]
    if not view.findings:
        out += ["No findings.", ""]
    out += [f"> {n}" for n in view.notes]
    return "\n".join(out) + "\n"


def render_html(view: FleetView) -> str:
    esc = html.escape
    body = ["<h1>gpulens fleet</h1>", "<ul>"]
    body += [f"<li>{esc(line)}</li>" for line in _headline(view)] + ["</ul>"]
    if view.summary:
        body += ["<h2>Queues</h2>", html_table(QUEUE_HEADERS, _queue_rows(view))]
    for title, headers, rows in _usage_tables(view):
        body += [f"<h2>Store usage {esc(title)}</h2>", html_table(headers, rows)]
    if view.usage:
        items = "".join(f"<li>{esc(line)}</li>" for line in _idle_lines(view))
        body += ["<h2>Idle allocated</h2>", f"<ul>{items}</ul>"]
    if view.fragmentation:
        body += ["<h2>Fragmentation</h2>", html_table(FRAG_HEADERS, _frag_rows(view))]
    body += [f"<p>{esc(line.strip())}</p>" for line in _held_lines(view) if line.strip()]
    if view.nodes:
        body += ["<h2>Nodes</h2>", f"<p>{esc(_nodes_line(view))}</p>"]
        body.append(html_table(NODE_HEADERS, _node_table_rows(view)))
    body.append("<h2>Findings</h2>")
    for f in view.findings:
        items = "".join(f"<li>{esc(_evidence(e))}</li>" for e in f.evidence)
        body.append(
            f'<div class="finding {esc(f.severity.value)}"><h3>{esc(f.rule_id)}</h3>'
            f"<p>{esc(f.summary)}</p><ul>{items}</ul><p>Fix: {esc(f.recommendation)}</p></div>"
        )
    if not view.findings:
        body.append("<p>No findings.</p>")
    body += [f"<p><em>{esc(n)}</em></p>" for n in view.notes]
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>gpulens fleet</title>'
        f"<style>{page_css(72)}</style></head><body>{''.join(body)}</body></html>\n"
    )


RENDERERS: dict[str, Callable[[FleetView], str]] = {
    "json": render_json,
    "terminal": render_terminal,
    "markdown": render_markdown,
    "html": render_html,
}
