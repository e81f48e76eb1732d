"""Renders a ReportView as terminal text, Markdown, self-contained HTML or JSON.

The JSON schema (`SCHEMA_VERSION`) is documented in docs/report.md and kept stable: new keys may
be added, existing ones keep their meaning.
"""

from __future__ import annotations

import html
import json
import math
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

from gpulens.analyze.waste import HEADROOM_NOTE
from gpulens.app.analysis import ReportView
from gpulens.app.gpus import SNAPSHOT_NOTE
from gpulens.findings.model import Evidence, Finding
from gpulens.numbers import is_nan
from gpulens.present import format as human
from gpulens.present.names import gpu_names
from gpulens.present.reports import serving
from gpulens.present.reports.markup import html_table, md_table, num, page_css
from gpulens.present.reports.training import html_parts, markdown_lines, terminal_lines

SCHEMA_VERSION = 2  # 2: headroom split from waste (docs/report.md)


def _ts(ns: int | None) -> str:
    if ns is None:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _money(x: float | None, currency: str = "USD") -> str:
    return human.money(x, currency)


def _has_headroom(view: ReportView) -> bool:
    return any(w.get("kind") == "headroom" for w in view.waste_by_cause)


def _window(view: ReportView) -> str:
    return f"{_ts(view.totals.get('start_ns'))} to {_ts(view.totals.get('end_ns'))}"


def _gb(n_bytes: float | None) -> str:
    return "-" if n_bytes is None else num(n_bytes / 1e9)


def _gpu_count(t: dict[str, Any]) -> str:
    n, mig = t.get("gpus"), t.get("mig_instances") or 0
    return f"{n if n is not None else '-'}" + (f" ({mig} MIG instances)" if mig else "")


def _gpu_hours(view: ReportView) -> str:
    if SNAPSHOT_NOTE in view.notes:
        return "- (snapshot: no duration, no GPU-hours or cost)"
    return num(view.totals.get("gpu_hours"))


def _headline(view: ReportView) -> list[tuple[str, str]]:
    t = view.totals
    return [
        ("window", _window(view)),
        ("GPUs", _gpu_count(t)),
        ("GPU-hours", _gpu_hours(view)),
        ("allocated GPU-hours", num(t.get("allocated_gpu_hours"))),
        ("useful GPU-hours", num(t.get("useful_gpu_hours"))),
        ("wasted GPU-hours", num(t.get("wasted_gpu_hours"))),
        ("headroom GPU-hours", num(t.get("headroom_gpu_hours"))),
        ("unmeasured GPU-hours", num(t.get("unmeasured_gpu_hours"))),
        ("no-data GPU-hours", num(t.get("no_data_gpu_hours"))),
        ("duty cycle (nvidia-smi)", _pct(t.get("mean_duty"))),
        ("SM activity", _pct(t.get("mean_sm_active"))),
        ("tensor activity", _pct(t.get("mean_tensor_active"))),
        ("energy", f"{num(t.get('energy_kwh'))} kWh"),
        ("cost", _money(t.get("total_cost"))),
        ("wasted cost", _money(t.get("wasted_cost"))),
        ("CO2e", f"{num(t.get('co2e_kg'))} kg"),
        ("idle intervals holding > 1 GiB", _pct(view.idle_holding_share)),
        (
            "MFU (model FLOPs utilisation)",
            ", ".join(f"{m['job_id']} {_pct(m['mfu'])}" for m in view.mfu[:5]) or "-",
        ),
        ("the gap", view.gap or "-"),
        ("job verdicts", view.baseline.get("summary") or "-"),
    ]


_SHORT_SUBJECT = ("job_id", "user", "engine", "host", "gpu_index", "model", "workload", "event")


def _short_subject(subject: dict[str, str] | Any) -> str:
    """The few labels a person needs to find the subject (the JSON keeps them all)."""
    keys = [k for k in _SHORT_SUBJECT if k in subject] or list(subject)[:4]
    return human.readable(", ".join(f"{k}={subject[k]}" for k in keys))


def _subject(f: Finding) -> str:
    return human.readable(", ".join(f"{k}={v}" for k, v in f.subject.items()))


def _evidence_row(e: Evidence) -> str:
    """`memory_held_bytes = 64.4 GB (> 268 MB) — note`: value and threshold in the metric's
    unit (present/format.py)."""
    text = f"{e.metric} = {human.metric_value(e.metric, e.value)}"
    if e.threshold is not None:
        text += f" ({e.comparison} {human.metric_value(e.metric, e.threshold)})"
    return text + (f" — {human.readable(e.note)}" if e.note else "")


def _impact(f: Finding) -> str:
    i = f.impact
    return (
        f"{num(i.wasted_gpu_hours)} wasted GPU-hours, {human.money(i.cost, i.currency)}, "
        f"{num(i.energy_kwh)} kWh, {num(i.co2e_kg)} kg CO2e"
    )


MAX_GPU_ROWS = 24
MAX_FINDINGS = 20


def _gpu_name(g: dict[str, Any], gpus: list[dict[str, Any]]) -> tuple[str, str]:
    """(host, GPU) as a person reads them, unambiguous among `gpus` (present/names.py)."""
    host = str(g.get("host") or "-")
    name = _names(gpus).get(_gpu_id(g), str(g.get("gpu_uuid") or "-"))
    return host, name.removeprefix(f"{host}/")


def _gpu_id(g: dict[str, Any]) -> tuple[str, str]:
    return (str(g.get("host")), str(g.get("gpu_uuid")))


def _names(gpus: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    return dict(zip((_gpu_id(g) for g in gpus), gpu_names(gpus), strict=True))


def _shown_gpus(view: ReportView) -> tuple[list[dict[str, Any]], int]:
    """The GPUs a text report lists (all of them up to MAX_GPU_ROWS, else the most wasteful)
    and how many were left out."""
    if len(view.gpus) <= MAX_GPU_ROWS:
        return view.gpus, 0
    ranked = sorted(view.gpus, key=lambda g: -(g.get("wasted_gpu_hours") or 0.0))
    return ranked[:MAX_GPU_ROWS], len(view.gpus) - MAX_GPU_ROWS


MAX_JOB_ROWS = 24
_METRIC_NAMES = {
    "useful_ratio": "useful work",
    "sm_active": "SM activity",
    "tensor_active": "tensor activity",
}


def _evidence(job: dict[str, Any]) -> str:
    """The numbers a verdict rests on, or why there is none."""
    e = job.get("evidence") or {}
    if job.get("verdict") == "unknown" or e.get("value") is None:
        return str(job.get("reason") or "-")
    name = _METRIC_NAMES.get(str(e.get("metric")), str(e.get("metric")))
    z, share = e.get("median_z"), e.get("anomalous_share")
    return (
        f"{name} {_pct(e.get('value'))} vs {_pct(e.get('baseline_median'))} baseline "
        f"(median z {'-' if z is None else f'{z:+.1f}'}, {_pct(share)} of intervals anomalous; "
        f"{e.get('intervals')} intervals; baseline from {e.get('baseline')}, "
        f"{e.get('baseline_n')} samples)"
    )


def _job_cells(job: dict[str, Any]) -> list[str]:
    """job, verdict, evidence, memory peak GB, headroom, workload."""
    peak = job.get("peak_used_bytes")
    return [
        str(job.get("job_id") or "-"),
        str(job.get("verdict")),
        _evidence(job),
        num(None if peak is None else peak / 1e9),
        _pct(job.get("headroom_ratio")),
        human.readable(str(job.get("workload") or "-")),
    ]


_WASTE_HEADERS = ["cause", "kind", "GPU-hours", "cost", "kWh", "kg CO2e"]


def _waste_rows(view: ReportView) -> list[list[str]]:
    """The waste-by-cause table's cells, for the Markdown and HTML reports."""
    return [
        [
            str(w.get("cause")),
            str(w.get("kind")),
            num(w.get("gpu_hours"), 2),
            _money(w.get("cost")),
            num(w.get("energy_kwh"), 2),
            num(w.get("co2e_kg"), 2),
        ]
        for w in view.waste_by_cause
    ]


_JOB_HEADERS = ["job", "verdict", "evidence", "memory peak GB", "headroom", "workload type"]


def _bar(x: float | None, width: int = 20) -> str:
    if x is None:
        return " " * width
    n = max(0, min(width, round(x * width)))
    return "█" * n + "·" * (width - n)


# -- JSON -------------------------------------------------------------------------------------


def to_json(view: ReportView) -> str:
    """The report as JSON (schema in docs/report.md)."""
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "job" if view.is_job_report else "fleet",
        "title": view.title,
        "scope": view.scope,
        "step_s": view.step_s,
        "totals": view.totals,
        "states": view.states,
        "waste_by_cause": view.waste_by_cause,
        "gpus": [{**g, "name": n} for g, n in zip(view.gpus, gpu_names(view.gpus), strict=True)],
        "top_users": view.top_users,
        "top_jobs": view.top_jobs,
        "engines": view.engines,
        "fairness": view.fairness,
        "gap": view.gap,
        "mfu": view.mfu,
        "idle_holding_share": view.idle_holding_share,
        "baseline": view.baseline,
        "jobs": view.jobs,
        "findings": [f.to_dict() for f in view.findings],
        "notes": view.notes,
    }
    if view.groups:
        doc["groups"] = view.groups
    if view.training:
        doc["training"] = view.training
    if view.profiles:
        doc["profiles"] = view.profiles
    if view.latency or view.fallbacks:
        doc["latency"] = view.latency
        doc["engine_choice"] = view.engine_choice
        doc["fallbacks"] = view.fallbacks
    return dumps(doc)


_GROUP_HEADERS = ["GPUs", "GPU-h", "allocation", "duty", "SM", "tensor", "useful GPU-h",
                  "wasted GPU-h", "wasted cost"]  # fmt: skip


def _group_rows(view: ReportView) -> tuple[str, list[list[str]]]:
    """`report --by`: the key and one row of cells per group."""
    by = str(view.groups.get("by") or "")
    rows = [
        [
            str(r.get(by)),
            num(r.get("gpus")),
            num(r.get("gpu_hours")),
            _pct(r.get("allocation")),
            _pct(r.get("mean_duty")),
            _pct(r.get("mean_sm_active")),
            _pct(r.get("mean_tensor_active")),
            num(r.get("useful_gpu_hours")),
            num(r.get("wasted_gpu_hours")),
            _money(r.get("wasted_cost")),
        ]
        for r in view.groups.get("rows") or []
    ]
    return by, rows


def dumps(doc: Any) -> str:
    """The text of `json.dumps(doc, indent=2, default=str)` and a newline, written by orjson:
    floats and the strings json escapes are handed to it already encoded as json writes them."""
    out = orjson.dumps(_encoded(doc), option=orjson.OPT_INDENT_2)
    if not out.isascii() or b"\x7f" in out:  # a key json would escape: let json write it all
        return json.dumps(doc, indent=2, default=str) + "\n"
    return out.decode("ascii") + "\n"


_escape = json.encoder.encode_basestring_ascii
_MAX = sys.float_info.max


def _float(x: float) -> str:
    if is_nan(x):
        return "NaN"
    if x in (math.inf, -math.inf):
        return "Infinity" if x > 0 else "-Infinity"
    return float.__repr__(x)


def _key(k: Any) -> str:
    """A dict key as json turns it into a string."""
    if isinstance(k, str):
        return k
    if k is True or k is False or k is None:
        return {True: "true", False: "false", None: "null"}[k]
    if isinstance(k, float):
        return _float(k)
    if isinstance(k, int):
        return int.__repr__(k)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")


def _encoded(o: Any) -> Any:
    """`o` with every float, and every string json would escape, as an orjson.Fragment of
    json's text for it; other values orjson writes as json does."""
    t = type(o)
    if t is dict:
        return {(k if type(k) is str else _key(k)): _leaf(v) for k, v in o.items()}
    if t is list or t is tuple:
        return [_leaf(v) for v in o]
    return _leaf(o)


def _leaf(o: Any) -> Any:
    t = type(o)
    if t is str:
        return o if o.isascii() and "\x7f" not in o else orjson.Fragment(_escape(o))
    if t is float:  # orjson writes these as json does; smaller ones, NaN and inf differ
        return o if 1e-4 <= abs(o) <= _MAX or o == 0 else orjson.Fragment(_float(o))
    if o is None or t is int or t is bool:
        return o
    if t is dict or t is list or t is tuple:
        return _encoded(o)
    if isinstance(o, str):
        return orjson.Fragment(_escape(o))
    if isinstance(o, float):
        return orjson.Fragment(_float(o))
    if isinstance(o, int):
        return orjson.Fragment(int.__repr__(o))
    if isinstance(o, dict):
        return {_key(k): _leaf(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_leaf(v) for v in o]
    return orjson.Fragment(_escape(str(o)))  # json.dumps(default=str)


# -- Markdown ---------------------------------------------------------------------------------


def to_markdown(view: ReportView) -> str:
    """The report as Markdown."""
    lines = [f"# {view.title}", ""]
    if view.scope:
        lines += [", ".join(f"{k} = `{v}`" for k, v in view.scope.items()), ""]
    lines += md_table(["measure", "value"], [[k, v] for k, v in _headline(view)])
    lines += markdown_lines(view.training)
    lines += serving.markdown_lines(view.latency, view.engine_choice, view.fallbacks)
    lines += [f"- {line}" for line in serving.profile_lines(view.profiles)]
    lines += ["## Per GPU: duty cycle versus useful work", ""]
    shown, hidden = _shown_gpus(view)
    lines += md_table(
        ["host", "GPU", "model", "duty", "SM", "tensor", "memory peak GB", "kWh", "wasted GPU-h"],
        [
            [
                *_gpu_name(g, view.gpus),
                str(g.get("gpu_model")),
                _pct(g.get("mean_duty")),
                _pct(g.get("mean_sm_active")),
                _pct(g.get("mean_tensor_active")),
                _gb(g.get("memory_used_bytes_max")),
                num(g.get("energy_kwh")),
                num(g.get("wasted_gpu_hours")),
            ]
            for g in shown
        ],
    )
    if hidden:
        lines += [f"... and {hidden} more GPUs (the most wasteful are shown).", ""]
    if view.jobs:
        lines += ["## Jobs: verdict against their workload's baseline", ""]
        lines += [str(view.baseline.get("summary") or ""), ""]
        lines += md_table(_JOB_HEADERS, [_job_cells(j) for j in view.jobs[:MAX_JOB_ROWS]])
        if len(view.jobs) > MAX_JOB_ROWS:
            lines += [f"... and {len(view.jobs) - MAX_JOB_ROWS} more jobs (JSON lists all).", ""]
    if view.waste_by_cause:
        lines += ["## Waste by cause", ""]
        lines += md_table(
            _WASTE_HEADERS,
            _waste_rows(view),
        )
        if _has_headroom(view):
            lines += [f"*{HEADROOM_NOTE}*", ""]
    if view.groups.get("rows"):
        by, rows = _group_rows(view)
        lines += [f"## By {by}", ""]
        lines += md_table([by, *_GROUP_HEADERS], rows)
    if not view.is_job_report and view.top_users:
        lines += ["## Top wasters", ""]
        lines += md_table(
            ["user", "allocated GPU-h", "useful GPU-h", "wasted GPU-h", "wasted cost"],
            [
                [
                    str(u.get("user")),
                    num(u.get("allocated_gpu_hours")),
                    num(u.get("useful_gpu_hours")),
                    num(u.get("wasted_gpu_hours")),
                    _money(u.get("wasted_cost")),
                ]
                for u in view.top_users
            ],
        )
    fair = view.fairness.get("table") or []
    if not view.is_job_report and fair:
        by = str(view.fairness.get("by") or "user")
        lines += ["## Fairness: allocation versus useful work", ""]
        lines += md_table(
            [by, "allocation share", "useful-work share", "quota share"],
            [
                [
                    str(r.get(by)),
                    _pct(r.get("allocation_share")),
                    _pct(r.get("useful_share")),
                    _pct(r.get("quota_share")),
                ]
                for r in fair
            ],
        )
        jain = view.fairness.get("jain_useful")
        lines += [f"Jain's index over useful-work shares: {num(jain, 2)}", ""]
    lines += [f"## Findings ({len(view.findings)}, largest impact first)", ""]
    for f in view.findings[:MAX_FINDINGS]:
        lines += [
            f"### {f.severity.value.upper()}: {f.rule_id} — {_subject(f)}",
            "",
            human.readable(f.summary),
            "",
            f"- window: {_ts(f.window[0])} to {_ts(f.window[1])}",
            f"- impact: {_impact(f)}",
        ]
        lines += [f"- evidence: {_evidence_row(e)}" for e in f.evidence]
        lines += [f"- **fix:** {human.readable(f.recommendation)}", f"- docs: {f.docs}", ""]
    for note in view.notes:
        lines += [f"> {human.readable(note)}", ""]
    return "\n".join(lines)


# -- terminal ---------------------------------------------------------------------------------


def to_terminal(view: ReportView) -> str:
    """The report as plain terminal text (bars for duty cycle, SM and tensor activity)."""
    lines = [view.title, "=" * len(view.title)]
    if view.scope:
        lines.append(", ".join(f"{k}={v}" for k, v in view.scope.items()))
    width = max(len(k) for k, _ in _headline(view))
    lines += [f"{k:<{width}}  {v}" for k, v in _headline(view)] + [""]
    lines += terminal_lines(view.training)
    lines += serving.terminal_lines(view.latency, view.engine_choice, view.fallbacks)
    lines += serving.profile_lines(view.profiles)
    shown, hidden = _shown_gpus(view)
    lines.append(
        "Per GPU                                  duty                  SM                    "
        "tensor"
    )
    for g in shown:
        host, gpu = _gpu_name(g, view.gpus)
        lines.append(
            f"{host[:12]:<12} {gpu[:26]:<26}  "
            f"{_bar(g.get('mean_duty'))}  {_bar(g.get('mean_sm_active'))}  "
            f"{_bar(g.get('mean_tensor_active'))}"
        )
    if hidden:
        lines.append(f"... and {hidden} more GPUs (the most wasteful are shown; JSON lists all)")
    lines.append("")
    if view.jobs:
        lines.append("Jobs: verdict against their workload's baseline")
        for job in view.jobs[:MAX_JOB_ROWS]:
            name, verdict, evidence, peak, headroom, workload = _job_cells(job)
            lines += [
                f"  [{verdict}] {name}: {evidence}",
                f"      memory peak {peak} GB, headroom {headroom}; workload {workload}",
            ]
        if len(view.jobs) > MAX_JOB_ROWS:
            lines.append(f"  ... and {len(view.jobs) - MAX_JOB_ROWS} more (JSON lists all)")
        lines.append("")
    if view.groups.get("rows"):
        by, rows = _group_rows(view)
        lines.append(f"By {by}: " + ", ".join(_GROUP_HEADERS))
        lines += ["  " + " | ".join(r) for r in rows] + [""]
    if view.waste_by_cause:
        lines.append("Waste by cause")
        for w in view.waste_by_cause:
            lines.append(
                f"  {w.get('cause')!s:<18} {w.get('kind')!s:<11} "
                f"{num(w.get('gpu_hours'), 2):>8} GPU-h  {_money(w.get('cost')):>14}"
            )
        if _has_headroom(view):
            lines.append(f"  {HEADROOM_NOTE}")
        lines.append("")
    lines.append(f"Findings ({len(view.findings)}, largest impact first)")
    for f in view.findings[:MAX_FINDINGS]:
        subject = _short_subject(f.subject)
        lines += [
            f"  [{f.severity.value}] {f.rule_id}: {subject}",
            f"      {human.readable(f.summary)}",
            f"      impact: {num(f.impact.wasted_gpu_hours)} GPU-h wasted, "
            f"{human.money(f.impact.cost, f.impact.currency)}",
            f"      fix: {human.readable(f.recommendation)}",
        ]
    if len(view.findings) > MAX_FINDINGS:
        lines.append(f"  ... and {len(view.findings) - MAX_FINDINGS} more (JSON lists all)")
    lines += [f"note: {human.readable(n)}" for n in view.notes]
    return "\n".join(lines) + "\n"


# -- HTML -------------------------------------------------------------------------------------

_CSS = page_css(72)
_COLORS = {"duty": "#9aa5b1", "sm": "#2f7ed8", "tensor": "#1b9e5a"}


def _svg_bars(gpus: list[dict[str, Any]], every: list[dict[str, Any]]) -> str:
    """Per-GPU grouped bars (duty cycle, SM activity, tensor activity) as inline SVG."""
    row_h, bar_h, label_w, scale = 34, 9, 150, 420
    height = row_h * len(gpus) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + scale + 60}" '
        f'height="{height}" role="img" aria-label="duty cycle versus useful work per GPU">'
    ]
    for i, g in enumerate(gpus):
        y = 5 + i * row_h
        label = html.escape(" / ".join(_gpu_name(g, every)))
        parts.append(f'<text x="0" y="{y + 16}" font-size="12">{label}</text>')
        for j, (key, col) in enumerate(
            (("mean_duty", "duty"), ("mean_sm_active", "sm"), ("mean_tensor_active", "tensor"))
        ):
            value = g.get(key)
            w = 0 if value is None else max(0.0, min(1.0, value)) * scale
            parts.append(
                f'<rect x="{label_w}" y="{y + j * bar_h}" width="{w:.1f}" height="{bar_h - 1}" '
                f'fill="{_COLORS[col]}"><title>{col}: {_pct(value)}</title></rect>'
            )
    parts.append("</svg>")
    return "".join(parts)


def to_html(view: ReportView) -> str:
    """A self-contained HTML page (inline CSS and SVG; nothing loaded from the network)."""
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(view.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(view.title)}</h1>",
        html_table(["measure", "value"], [[k, v] for k, v in _headline(view)]),
        *html_parts(view.training),
        *serving.html_parts(view.latency, view.engine_choice, view.fallbacks),
        *serving.profile_html(view.profiles),
        "<h2>Per GPU: duty cycle versus useful work</h2>",
        '<p class="legend">'
        + "".join(f'<span style="background:{c}"></span>{n}' for n, c in _COLORS.items())
        + "</p>",
        _svg_bars(_shown_gpus(view)[0], view.gpus),
    ]
    if view.jobs:
        out += [
            "<h2>Jobs: verdict against their workload's baseline</h2>",
            f"<p>{html.escape(str(view.baseline.get('summary') or ''))}</p>",
            html_table(
                _JOB_HEADERS,
                [_job_cells(j) for j in view.jobs[:MAX_JOB_ROWS]],
                numeric=lambda i, n: i in (3, 4),
            ),
        ]
        if len(view.jobs) > MAX_JOB_ROWS:
            out.append(
                f"<p>... and {len(view.jobs) - MAX_JOB_ROWS} more jobs (JSON lists all).</p>"
            )
    if view.waste_by_cause:
        out += [
            "<h2>Waste by cause</h2>",
            html_table(
                _WASTE_HEADERS,
                _waste_rows(view),
                numeric=lambda i, n: i >= 2,
            ),
        ]
        if _has_headroom(view):
            out.append(f"<p><i>{html.escape(HEADROOM_NOTE)}</i></p>")
    if view.groups.get("rows"):
        by, rows = _group_rows(view)
        out += [f"<h2>By {html.escape(by)}</h2>",
                html_table([by, *_GROUP_HEADERS], rows, numeric=lambda i, n: i >= 1)]  # fmt: skip
    out.append(f"<h2>Findings ({len(view.findings)}, largest impact first)</h2>")
    for f in view.findings[: MAX_FINDINGS * 5]:
        evidence = "".join(f"<li>{html.escape(_evidence_row(e))}</li>" for e in f.evidence)
        out.append(
            f'<div class="finding {f.severity.value}"><h3>{html.escape(f.rule_id)}: '
            f"{html.escape(_subject(f))}</h3><p>{html.escape(human.readable(f.summary))}</p>"
            f"<ul>{evidence}</ul><p>Impact: {html.escape(_impact(f))}</p>"
            f"<p><b>Fix:</b> {html.escape(human.readable(f.recommendation))}</p></div>"
        )
    out += [f"<p><i>{html.escape(human.readable(n))}</i></p>" for n in view.notes]
    out.append("</body></html>")
    return "\n".join(out)


RENDERERS = {"terminal": to_terminal, "markdown": to_markdown, "html": to_html, "json": to_json}
