"""The report's serving section: latency per engine measured in the serving process
(gpulens.torch.inference), the engine choice by load, and the engine fallbacks."""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import Any

from gpulens.present.reports.markup import html_table, md_table, num

TITLE = "Serving: latency per engine (measured in the serving process)"
HEADERS = ["job", "model", "engine", "calls", "warm-up calls", "p50", "p95", "p99", "QPS", "batch"]


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{num(x)} ms"


def latency_rows(latency: list[dict[str, Any]]) -> list[list[str]]:
    """One table row per (job, model, engine), with units."""
    return [
        [
            str(r.get("job_id") or "-"),
            str(r.get("model") or "-"),
            str(r["engine"]),
            num(r.get("calls")),
            num(r.get("warmup_calls")),
            _ms(r.get("p50_ms")),
            _ms(r.get("p95_ms")),
            _ms(r.get("p99_ms")),
            "-" if r.get("qps") is None else f"{num(r['qps'])} requests/s",
            num(r.get("batch_size")),
        ]
        for r in latency
    ]


def _when(ts_ns: int | None) -> str:
    if ts_ns is None:
        return "?"
    return datetime.fromtimestamp(ts_ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fallback_lines(fallbacks: list[dict[str, Any]]) -> list[str]:
    return [
        f"{_when(f.get('ts'))} {f.get('job_id') or '-'}: {f.get('message') or f.get('engine')}"
        for f in fallbacks
    ]


def terminal_lines(
    latency: list[dict[str, Any]],
    choice: list[dict[str, Any]],
    fallbacks: list[dict[str, Any]],
) -> list[str]:
    if not (latency or fallbacks):
        return []
    lines = [TITLE]
    rows = [HEADERS, *latency_rows(latency)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines += [f"  engine choice ({c['model']}): {c['verdict']}" for c in choice]
    lines += [f"  fallback: {line}" for line in _fallback_lines(fallbacks)]
    return [*lines, ""]


def markdown_lines(
    latency: list[dict[str, Any]],
    choice: list[dict[str, Any]],
    fallbacks: list[dict[str, Any]],
) -> list[str]:
    if not (latency or fallbacks):
        return []
    lines = [f"## {TITLE}", ""]
    if latency:
        lines += md_table(HEADERS, latency_rows(latency))
    for c in choice:
        lines += [f"- Engine choice by load ({c['model']}, {c['objective']}): {c['verdict']}"]
    lines += [f"- Fallback: {line}" for line in _fallback_lines(fallbacks)]
    return [*lines, ""]


def html_parts(
    latency: list[dict[str, Any]],
    choice: list[dict[str, Any]],
    fallbacks: list[dict[str, Any]],
) -> list[str]:
    if not (latency or fallbacks):
        return []
    out = [f"<h2>{html.escape(TITLE)}</h2>"]
    if latency:
        out.append(html_table(HEADERS, latency_rows(latency), lambda i, n: i >= 3))
    items = [
        f"Engine choice by load ({c['model']}, {c['objective']}): {c['verdict']}" for c in choice
    ]
    items += [f"Fallback: {line}" for line in _fallback_lines(fallbacks)]
    if items:
        out.append("<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>")
    return out


def profile_lines(profiles: list[dict[str, Any]]) -> list[str]:
    """One line per profile linked to a finding: "input_bound on job X -> profiled steps ..."."""
    return [
        f"{p['rule_id']} on job {p.get('job_id') or '-'} -> {p.get('summary')} "
        f"(trace {p.get('trace_path')})"
        for p in profiles
    ]


def profile_html(profiles: list[dict[str, Any]]) -> list[str]:
    """The profiles linked to findings, as an HTML list (nothing when there are none)."""
    if not profiles:
        return []
    items = "".join(f"<li>{html.escape(line)}</li>" for line in profile_lines(profiles))
    return [f"<h2>Profiles captured on demand</h2><ul>{items}</ul>"]
