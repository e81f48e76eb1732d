"""`gpulens trace`: profiler-trace analyses (`gpulens.app.traces.TraceJob`) as a view model,
rendered as terminal text, Markdown, a self-contained HTML page (with an SVG timeline of the idle
gaps and their causes) or JSON.

Entry point for the CLI: `run_trace(paths, fmt, output, compare, hta_window) -> str`, which has
`gpulens.app.traces` load and analyse the files, then builds the view (`build_view`) and renders
it. The JSON schema (`SCHEMA_VERSION`) is documented in docs/traces.md and kept stable: new keys
may be added, existing ones keep their meaning.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulens.analyze.traces.causes import CAUSES
from gpulens.analyze.traces.kernels import KERNEL_CLASSES
from gpulens.analyze.traces.model import base_name
from gpulens.analyze.traces.ranks import RankAnalysis
from gpulens.app.traces import TraceJob, analyze_paths
from gpulens.present import format as human
from gpulens.present.reports.markup import CAUSE_COLORS, html_table, md_table, num, page_css

SCHEMA_VERSION = 1
FORMATS = ("terminal", "markdown", "html", "json")
MAX_STEPS_SHOWN = 12
MAX_TIMELINE_GAPS = 3000


@dataclass(frozen=True)
class Timeline:
    """What the HTML timeline draws for one rank: its span and gaps, µs from its start."""

    label: str
    span_us: float
    gaps: list[tuple[float, float, str]]  # (offset_us, duration_us, cause)


@dataclass
class TraceView:
    doc: dict[str, Any]  # the JSON document
    title: str
    timelines: list[Timeline] = field(default_factory=list)


# -- building the view ------------------------------------------------------------------------


def _rank_doc(a: RankAnalysis) -> dict[str, Any]:
    b = a.breakdown
    origin = a.origin_ns
    return {
        "rank": a.rank,
        "rank_source": a.trace.rank_source,
        "file": a.trace.source,
        "device": a.device,
        "start_ns": origin,
        "end_ns": a.end_ns,
        "temporal": b.temporal.as_us() if b.temporal else None,
        "idle_by_stream": [{"stream": s.key, **s.as_us()} for s in b.idle_by_stream],
        "device_idle_us": sum(d.idle_ns for d in b.device_idle) / 1000,
        "idle_causes": a.causes.to_dict(origin),
        "kernel_classes": a.kernels.to_dict(),
        "communication": a.comm.to_dict(),
        "comm_comp_overlap_pct": a.hta.kernel_types.comm_comp_overlap_pct,
        "launch_stats": a.hta.launches.to_dict(),
        "memcpy": [c.to_dict(origin) for c in a.copies],
        "steps": [s.to_dict(origin) for s in a.steps],
        "notes": list(b.notes),
    }


def _timeline(a: RankAnalysis) -> Timeline:
    g = a.causes.gaps
    origin = a.origin_ns
    durs = g.dur_ns.tolist()  # once: `dur_ns` computes the whole column on each access
    order = sorted(range(len(durs)), key=lambda i: -durs[i])[:MAX_TIMELINE_GAPS]
    gaps = [
        (
            (int(g.start_ns[i]) - origin) / 1000,
            durs[i] / 1000,
            CAUSES[int(g.cause[i])],
        )
        for i in order
    ]
    label = f"rank {a.rank}" if a.rank is not None else a.trace.file_name
    return Timeline(label, (a.end_ns - origin) / 1000, gaps)


def _compare_numbers(rank: dict[str, Any]) -> dict[str, float]:
    """The figures `--compare` sets side by side, flat."""
    out: dict[str, float] = {}
    t = rank.get("temporal") or {}
    for k in ("kernel_time_us", "idle_us", "compute_us", "non_compute_us"):
        if k in t:
            out[k] = t[k]
    out["device_idle_us"] = rank["device_idle_us"]
    for cause, c in rank["idle_causes"]["causes"].items():
        out[f"idle_{cause}_us"] = c["idle_us"]
    for name, c in rank["kernel_classes"]["classes"].items():
        out[f"kernels_{name}_us"] = c["time_us"]
    out["exposed_comm_us"] = rank["communication"]["exposed_us"]
    if rank["comm_comp_overlap_pct"] is not None:
        out["comm_comp_overlap_share"] = rank["comm_comp_overlap_pct"] / 100
    launches = rank["launch_stats"]
    if launches["n_launches"]:
        out["kernel_launches"] = launches["n_launches"]
        out["launch_delay_mean_us"] = launches["launch_delay_mean_us"]
        out["launch_delay_p50_us"] = launches["launch_delay_p50_us"]
    steps = rank["steps"]
    if steps:
        out["mean_step_us"] = sum(s["duration_us"] for s in steps) / len(steps)
    return out


def compare_docs(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Per rank (matched by rank, else by position): before, after, delta and relative change."""
    b_ranks = before["ranks"]
    rows = []
    for i, a in enumerate(after["ranks"]):
        match = next((r for r in b_ranks if r["rank"] == a["rank"]), None)
        if match is None and i < len(b_ranks):
            match = b_ranks[i]
        if match is None:
            continue
        x, y = _compare_numbers(match), _compare_numbers(a)
        figures = {}
        for key in sorted(set(x) | set(y)):
            old, new = x.get(key, 0.0), y.get(key, 0.0)
            figures[key] = {
                "before": old,
                "after": new,
                "delta": new - old,
                "change": (new - old) / old if old else None,
            }
        rows.append({"rank": a["rank"], "before_file": match["file"], "figures": figures})
    b_rules = {f["rule_id"] for f in before["findings"]}
    a_rules = {f["rule_id"] for f in after["findings"]}
    return {
        "before_files": [r["file"] for r in b_ranks],
        "ranks": rows,
        "findings_resolved": sorted(b_rules - a_rules),
        "findings_new": sorted(a_rules - b_rules),
    }


def build_view(job: TraceJob, *, before: TraceJob | None = None) -> TraceView:
    """The view of an analysed job; `before`: an earlier run of it, compared rank by rank."""
    analyses = job.analyses
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "trace",
        "hta_window": job.hta_window,
        "ranks": [_rank_doc(a) for a in analyses],
        "kernel_type_breakdown": [r.to_dict() for r in job.kernel_type_breakdown],
        "cluster": job.cluster.to_dict(),
        "findings": [f.to_dict() for f in job.findings],
        "compare": None,
        "failed_ranks": [f.to_dict() for f in job.failures],
    }
    if before is not None:
        earlier = {
            "ranks": [_rank_doc(a) for a in before.analyses],
            "findings": [f.to_dict() for f in before.findings],
        }
        doc["compare"] = compare_docs(earlier, doc)
    names = sorted({a.trace.file_name for a in analyses})
    title = "Trace analysis: " + (names[0] if len(names) == 1 else f"{len(names)} ranks")
    return TraceView(doc, title, [_timeline(a) for a in analyses])


# -- tables shared by the text renderers ------------------------------------------------------


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _us(x: Any) -> str:
    """Microseconds as a duration people read: `126 µs`, `12.3 ms`, `1 h 58 min`."""
    return human.quantity(x, "us")


Table = tuple[str, list[str], list[list[str]]]


def _share(pct: float | None) -> float | None:
    return None if pct is None else pct / 100


def _launches(s: dict[str, Any]) -> str:
    if not s["n_launches"]:
        return "-"
    return (
        f"{num(s['n_launches'])}, launch delay p50 {_us(s['launch_delay_p50_us'])}, "
        f"mean {_us(s['launch_delay_mean_us'])}"
    )


def _rank_tables(r: dict[str, Any]) -> list[Table]:
    tables: list[Table] = []
    t = r["temporal"] or {}
    causes = r["idle_causes"]
    span = causes["span_us"]
    tables.append(
        (
            "Overview",
            ["measure", "value"],
            [
                ["device", str(r["device"] or "-")],
                ["kernel time (HTA)", _us(t.get("kernel_time_us"))],
                ["idle (HTA)", _us(t.get("idle_us"))],
                ["compute", _us(t.get("compute_us"))],
                ["non-compute", _us(t.get("non_compute_us"))],
                ["device idle (all streams)", _us(r["device_idle_us"])],
                ["device idle share of span", _pct(causes["idle_us"] / span if span else None)],
                ["est. achieved occupancy", num(r["kernel_classes"]["occupancy_pct"]) + " %"],
                [
                    "tensor-core share of GEMM time",
                    _pct(r["kernel_classes"]["tensor_core_share_of_gemm"]),
                ],
                ["comm/comp overlap (HTA)", _pct(_share(r["comm_comp_overlap_pct"]))],
                ["kernel launches (HTA)", _launches(r["launch_stats"])],
            ],
        )
    )
    rows = []
    for cause in CAUSES:
        c = causes["causes"][cause]
        if not c["gaps"]:
            continue
        ex = c["examples"][0] if c["examples"] else None
        example = (
            f"{_us(ex['duration_us'])} at +{_us(ex['offset_us'])}: "
            f"{(ex['cpu_event'] or ex['next_gpu_event'] or '-')[:50]}"
            if ex
            else "-"
        )
        rows.append(
            [
                cause,
                _us(c["idle_us"]),
                str(c["gaps"]),
                _pct(c["share_of_idle"]),
                _pct(c["share_of_span"]),
                example,
            ]
        )
    tables.append(
        (
            "Idle gaps by cause",
            ["cause", "idle", "gaps", "of idle", "of span", "longest gap"],
            rows,
        )
    )
    kc = r["kernel_classes"]["classes"]
    tables.append(
        (
            "Kernel classes",
            ["class", "count", "time", "share", "occupancy %", "top kernel"],
            [
                [
                    name,
                    num(kc[name]["count"]),
                    _us(kc[name]["time_us"]),
                    _pct(kc[name]["share"]),
                    num(kc[name]["occupancy_pct"]),
                    (kc[name]["top"][0]["name"][:50] if kc[name]["top"] else "-"),
                ]
                for name in KERNEL_CLASSES
                if name in kc
            ],
        )
    )
    comm = r["communication"]
    if comm["collectives"]:
        tables.append(
            (
                f"Collectives (exposed {_us(comm['exposed_us'])} of {_us(comm['comm_us'])})",
                ["collective", "count", "total", "mean", "max", "exposed"],
                [
                    [
                        c["name"],
                        num(c["count"]),
                        _us(c["total_us"]),
                        _us(c["mean_us"]),
                        _us(c["max_us"]),
                        _us(c["exposed_us"]),
                    ]
                    for c in comm["collectives"]
                ],
            )
        )
    tables.append(
        (
            "Idle per stream (HTA)",
            ["stream", "host wait", "kernel wait", "other"],
            [
                [
                    str(s["stream"]),
                    _us(s["host_wait_us"]),
                    _us(s["kernel_wait_us"]),
                    _us(s["other_us"]),
                ]
                for s in r["idle_by_stream"]
            ],
        )
    )
    if r["steps"]:
        tables.append(
            (
                "Steps",
                ["step", "duration", "kernels", "kernel time", "device idle", "main cause"],
                [
                    [
                        str(s["step"]),
                        _us(s["duration_us"]),
                        num(s["kernels"]),
                        _us(s["kernel_time_us"]),
                        _pct(s["idle_share"]),
                        max(s["idle_causes_us"], key=s["idle_causes_us"].get)
                        if s["idle_causes_us"]
                        else "-",
                    ]
                    for s in r["steps"][:MAX_STEPS_SHOWN]
                ],
            )
        )
    return tables


def _cluster_table(c: dict[str, Any]) -> Table:
    return (
        f"Ranks ({c['ranks']} of {c['world_size'] or '?'}; clocks aligned on "
        f"{c['alignment_anchor']}; "
        f"imbalance {_pct(c['imbalance'])}; straggler: "
        f"{'-' if c['straggler'] is None else 'rank ' + str(c['straggler'])})",
        [
            "rank",
            "clock shift",
            "start",
            "span",
            "compute",
            "comm",
            "exposed comm",
            "idle",
            "sync wait",
        ],
        [
            [
                str(r["rank"]),
                _us(r["clock_shift_us"]),
                _us(r["offset_us"]),
                _us(r["span_us"]),
                _us(r["compute_us"]),
                _us(r["comm_us"]),
                _us(r["exposed_comm_us"]),
                _us(r["device_idle_us"]),
                _pct(r["sync_wait_share"]),
            ]
            for r in c["per_rank"]
        ],
    )


def _compare_table(cmp: dict[str, Any]) -> list[Table]:
    out: list[Table] = []
    for r in cmp["ranks"]:
        rows = [
            [
                key,
                human.metric_value(key, f["before"]),
                human.metric_value(key, f["after"]),
                human.metric_value(key, f["delta"]),
                _pct(f["change"]),
            ]
            for key, f in r["figures"].items()
            if f["before"] or f["after"]
        ]
        out.append(
            (
                f"Compared with {base_name(r['before_file'])} (rank {r['rank']})",
                ["figure", "before", "after", "delta", "change"],
                rows,
            )
        )
    return out


def _kernel_type_table(rows: list[dict[str, Any]]) -> Table:
    """HTA's kernel-type breakdown over the ranks it aggregates (overlap rows included)."""
    return (
        "Kernel types (HTA)",
        ["kernel type", "time", "share"],
        [[r["kernel_type"], _us(r["sum_us"]), _pct(_share(r["percentage"]))] for r in rows],
    )


def _sections(view: TraceView) -> list[tuple[str, list[Table]]]:
    doc = view.doc
    out: list[tuple[str, list[Table]]] = []
    failed = doc.get("failed_ranks") or []
    if failed:
        rows = [[base_name(f["file"]), f["error_type"], human.readable(f["error"])] for f in failed]
        table: Table = ("Not analysed", ["file", "error", "message"], rows)
        out.append((f"Failed ranks ({len(failed)})", [table]))
    kernel_types = [_kernel_type_table(doc["kernel_type_breakdown"])]
    if not doc["kernel_type_breakdown"]:
        kernel_types = []
    if len(doc["ranks"]) > 1:
        cluster = doc["cluster"]
        notes: list[Table] = [("Notes", ["note"], [[human.readable(n)] for n in cluster["notes"]])]
        job = [_cluster_table(cluster), *kernel_types, *(notes if cluster["notes"] else [])]
        out.append(("Job", job))
    elif kernel_types:
        out.append(("Job", kernel_types))
    for r in doc["ranks"]:
        head = f"Rank {r['rank']}: {base_name(r['file'])}"
        out.append((head, _rank_tables(r)))
    if doc["compare"]:
        out.append(("Before / after", _compare_table(doc["compare"])))
    return out


# -- renderers --------------------------------------------------------------------------------


def to_json(view: TraceView) -> str:
    return json.dumps(view.doc, indent=2, default=str) + "\n"


def _finding_lines(f: dict[str, Any]) -> list[str]:
    subject = human.readable(", ".join(f"{k}={v}" for k, v in f["subject"].items()))
    lines = [f"[{f['severity']}] {f['rule_id']}: {subject}", f"    {human.readable(f['summary'])}"]
    for e in f["evidence"]:
        metric = e["metric"]
        threshold = (
            f" ({e['comparison']} {human.metric_value(metric, e['threshold'])})"
            if e["threshold"] is not None
            else ""
        )
        note = f" — {human.readable(e['note'])}" if e["note"] else ""
        lines.append(f"    - {metric} = {human.metric_value(metric, e['value'])}{threshold}{note}")
    lines.append(f"    fix: {human.readable(f['recommendation'])}")
    return lines


def to_terminal(view: TraceView) -> str:
    lines = [view.title, "=" * len(view.title)]
    for head, tables in _sections(view):
        lines += ["", head, "-" * len(head)]
        for title, headers, rows in tables:
            lines += ["", title]
            widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
            lines.append(
                "  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=False))
            )
            for r in rows:
                lines.append(
                    "  "
                    + "  ".join(
                        c.ljust(w) if i == 0 or i == len(r) - 1 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths, strict=False))
                    )
                )
    findings = view.doc["findings"]
    lines += ["", f"Findings ({len(findings)})"]
    for f in findings:
        lines += ["  " + line for line in _finding_lines(f)]
    if view.doc["compare"]:
        cmp = view.doc["compare"]
        lines += [f"resolved: {', '.join(cmp['findings_resolved']) or '-'}"]
        lines += [f"new: {', '.join(cmp['findings_new']) or '-'}"]
    return "\n".join(lines) + "\n"


def to_markdown(view: TraceView) -> str:
    lines = [f"# {view.title}", ""]
    for head, tables in _sections(view):
        lines += [f"## {head}", ""]
        for title, headers, rows in tables:
            lines += [f"### {title}", "", *md_table(headers, rows)]
    findings = view.doc["findings"]
    lines += [f"## Findings ({len(findings)})", ""]
    for f in findings:
        first, *rest = _finding_lines(f)
        lines += [f"### {first}", ""] + [line.strip() for line in rest] + [""]
    return "\n".join(lines)


_CSS = page_css(80)


def _svg_timeline(timelines: list[Timeline]) -> str:
    """One row per rank: the active span in light grey, each idle gap coloured by its cause."""
    width, label_w, row_h = 1000, 110, 26
    height = row_h * len(timelines) + 24
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + width + 10}" '
        f'height="{height}" role="img" aria-label="device idle gaps by cause">'
    ]
    for i, t in enumerate(timelines):
        y = 4 + i * row_h
        scale = width / t.span_us if t.span_us > 0 else 0.0
        parts.append(f'<text x="0" y="{y + 15}" font-size="12">{html.escape(t.label)}</text>')
        parts.append(
            f'<rect x="{label_w}" y="{y}" width="{width}" height="{row_h - 6}" fill="#e4e8ec">'
            f"<title>busy (some stream runs)</title></rect>"
        )
        for offset, dur, cause in t.gaps:
            w = max(dur * scale, 0.6)
            parts.append(
                f'<rect x="{label_w + offset * scale:.2f}" y="{y}" width="{w:.2f}" '
                f'height="{row_h - 6}" fill="{CAUSE_COLORS[cause]}"><title>{cause}: '
                f"{_us(dur)} at +{_us(offset)}</title></rect>"
            )
    span = max((t.span_us for t in timelines), default=0.0)
    parts.append(
        f'<text x="{label_w}" y="{height - 4}" font-size="11">0 s</text>'
        f'<text x="{label_w + width - 120}" y="{height - 4}" font-size="11">'
        f"{_us(span)} (per-rank scale)</text></svg>"
    )
    return "".join(parts)


def _html_table(headers: list[str], rows: list[list[str]]) -> str:
    """Tables whose first and last columns are labels, the ones between numbers."""
    return html_table(headers, rows, numeric=lambda i, n: 0 < i < n - 1)


def to_html(view: TraceView) -> str:
    """A self-contained page (inline CSS and SVG; nothing loaded from the network)."""
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(view.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(view.title)}</h1>",
        "<h2>Timeline: device idle gaps by cause</h2>",
        '<p class="legend">'
        + "".join(f'<span style="background:{c}"></span>{n}' for n, c in CAUSE_COLORS.items())
        + "</p>",
        _svg_timeline(view.timelines),
    ]
    for head, tables in _sections(view):
        out.append(f"<h2>{html.escape(head)}</h2>")
        for title, headers, rows in tables:
            out += [f"<h3>{html.escape(title)}</h3>", _html_table(headers, rows)]
    findings = view.doc["findings"]
    out.append(f"<h2>Findings ({len(findings)})</h2>")
    for f in findings:
        first, summary, *rest = _finding_lines(f)
        items = "".join(f"<li>{html.escape(line.strip()[2:])}</li>" for line in rest[:-1])
        out.append(
            f'<div class="finding {f["severity"]}"><h3>{html.escape(first)}</h3>'
            f"<p>{html.escape(summary.strip())}</p><ul>{items}</ul>"
            f"<p><b>Fix:</b> {html.escape(f['recommendation'])}</p></div>"
        )
    out.append("</body></html>")
    return "\n".join(out)


RENDERERS = {"terminal": to_terminal, "markdown": to_markdown, "html": to_html, "json": to_json}


def run_trace(
    paths: Sequence[str | Path],
    fmt: str = "terminal",
    output: str | Path | None = None,
    compare: Sequence[str | Path] = (),
    hta_window: bool = False,
    executor: str | None = None,
) -> str:
    """Analyse `paths` (files, or directories of rank files: one job) and render the report.

    `compare`: the trace(s) of an earlier run of the same job (before → these paths after).
    `executor`: where the ranks are analysed (`--executor`: local, processes:N,
    dask://HOST:PORT; default: in process for one file, a local process pool for several).
    Writes the text to `output` when given and returns it. Raises TraceFormatError (bad input)
    or ValueError (unknown format).
    """
    if fmt not in RENDERERS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    job = analyze_paths(paths, hta_window=hta_window, executor=executor)
    before = analyze_paths(compare, hta_window=hta_window, executor=executor) if compare else None
    text = RENDERERS[fmt](build_view(job, before=before))
    if output is not None:
        Path(output).write_text(text, encoding="utf-8")
    return text
