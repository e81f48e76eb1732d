"""Report cards as Markdown (the mail's text part, chat messages, files) and self-contained
HTML; an index of the whole digest; JSON. Formatting only: the figures are the card's."""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from gpulens.analyze.report_cards import Card, Figures
from gpulens.present.format import money, number, percent
from gpulens.present.reports.markup import html_table, md_table, page_css

NS = 1_000_000_000
_ROWS: tuple[tuple[str, Callable[[Figures, str], str]], ...] = (
    ("GPU-hours held", lambda f, c: f"{number(f.allocated_gpu_hours)} GPU-h"),
    ("Useful work (of held)", lambda f, c: percent(f.useful_share)),
    ("Useful GPU-hours", lambda f, c: f"{number(f.useful_gpu_hours)} GPU-h"),
    ("Idle while allocated", lambda f, c: f"{number(f.idle_allocated_gpu_hours)} GPU-h"),
    ("Price of idle time", lambda f, c: money(f.idle_allocated_cost, c)),
    ("All waste", lambda f, c: f"{number(f.wasted_gpu_hours)} GPU-h"),
    ("Price of all waste", lambda f, c: money(f.wasted_cost, c)),
    ("SM activity", lambda f, c: percent(f.mean_sm_active)),
    ("Tensor activity", lambda f, c: percent(f.mean_tensor_active)),
)


def _day(ns: int) -> str:
    return datetime.fromtimestamp(ns / NS, UTC).strftime("%Y-%m-%d")


def span(card: Card) -> str:
    """``2026-11-30`` for a day, ``2026-11-23 to 2026-11-29`` for a week."""
    first, last = _day(card.start_ns), _day(card.end_ns - NS)
    return first if first == last else f"{first} to {last}"


def subject(card: Card) -> str:
    """The mail subject / chat title."""
    what = {"team": "Team", "user": "User", "fleet": "Fleet"}.get(card.kind, card.kind)
    name = f" {card.name}" if card.kind != "fleet" else ""
    return f"GPU report card: {what}{name}, {card.period} of {span(card)}"


def _table(card: Card) -> tuple[list[str], list[list[str]]]:
    columns: list[tuple[str, Figures | None]] = [(f"this {card.period}", card.current)]
    if card.kind != "fleet":
        base = f"baseline ({card.baseline_periods} {card.period}s)" if card.baseline else ""
        columns.append((base or "baseline (none yet)", card.baseline))
        columns.append(("fleet", card.fleet))
    else:
        columns.append((f"baseline ({card.baseline_periods} {card.period}s)", card.baseline))
    headers = ["", *(name for name, _ in columns)]
    rows = [
        [label, *(fmt(f, card.currency) if f is not None else "-" for _, f in columns)]
        for label, fmt in _ROWS
    ]
    return headers, rows


def markdown(card: Card) -> str:
    """The card in Markdown."""
    lines = [f"# {subject(card)}", ""]
    lines += [f"- {v}" for v in card.verdicts] + [""]
    if card.members:
        lines += [f"Members: {', '.join(card.members)}", ""]
    headers, rows = _table(card)
    lines += md_table(headers, rows)
    if card.findings:
        lines += ["## Top findings and fixes", ""]
        for i, f in enumerate(card.findings, 1):
            cost = money(f.cost, card.currency)
            lines.append(
                f"{i}. **{f.rule_id}** ({f.severity}, {number(f.wasted_gpu_hours)} GPU-h, "
                f"{cost}): {f.summary}"
            )
            if f.recommendation:
                lines.append(f"   Fix: {f.recommendation}")
        lines.append("")
    else:
        lines += ["No findings this period.", ""]
    lines.append(
        "Useful work: SM and tensor activity over the GPU-hours held, not nvidia-smi's "
        "utilisation. Baseline: the mean per period over the previous periods in which "
        "GPUs were held."
    )
    return "\n".join(lines) + "\n"


def chat(card: Card) -> str:
    """The card for a chat message (Slack mrkdwn, Teams): no Markdown table, which neither
    renders: the figures as a fixed-width block."""
    headers, rows = _table(card)
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    block = []
    for row in [headers, *rows]:
        cells = enumerate(zip(row, widths, strict=True))
        block.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in cells))
    lines = [f"• {v}" for v in card.verdicts]
    lines += ["```", *block, "```"]
    for i, f in enumerate(card.findings, 1):
        cost = money(f.cost, card.currency)
        lines.append(
            f"{i}. *{f.rule_id}* ({number(f.wasted_gpu_hours)} GPU-h, {cost}): {f.summary}"
        )
        if f.recommendation:
            lines.append(f"    Fix: {f.recommendation}")
    return "\n".join(lines) + "\n"


def html_page(card: Card) -> str:
    """The card as a self-contained HTML page."""
    headers, rows = _table(card)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(subject(card))}</title><style>{page_css(48)}</style></head>",
        f"<body><h1>{html.escape(subject(card))}</h1><ul>",
        *(f"<li>{html.escape(v)}</li>" for v in card.verdicts),
        "</ul>",
    ]
    if card.members:
        parts.append(f"<p>Members: {html.escape(', '.join(card.members))}</p>")
    parts.append(html_table(headers, rows))
    if card.findings:
        parts.append("<h2>Top findings and fixes</h2>")
        for f in card.findings:
            parts.append(
                f'<div class="finding {html.escape(f.severity)}"><p><b>'
                f"{html.escape(f.rule_id)}</b> ({html.escape(f.severity)}, "
                f"{html.escape(number(f.wasted_gpu_hours))} GPU-h, "
                f"{html.escape(money(f.cost, card.currency))}): {html.escape(f.summary)}</p>"
                + (f"<p>Fix: {html.escape(f.recommendation)}</p>" if f.recommendation else "")
                + "</div>"
            )
    else:
        parts.append("<p>No findings this period.</p>")
    parts.append("</body></html>\n")
    return "".join(parts)


def index_markdown(cards: Sequence[Card], notes: Sequence[str]) -> str:
    """One line per card: the digest at a glance."""
    if not cards:
        return "No report cards: nobody held GPUs in this period.\n"
    first = cards[0]
    lines = [f"# GPU report cards, {first.period} of {span(first)}", ""]
    rows = [
        [
            c.kind,
            c.name,
            f"{number(c.current.allocated_gpu_hours)} GPU-h",
            percent(c.current.useful_share),
            percent(c.baseline.useful_share) if c.baseline else "-",
            f"{number(c.current.idle_allocated_gpu_hours)} GPU-h",
            money(c.current.idle_allocated_cost, c.currency),
        ]
        for c in cards
    ]
    headers = ["card", "name", "held", "useful", "baseline useful", "idle held", "idle price"]
    lines += md_table(headers, rows)
    lines += [f"Note: {n}" for n in notes]
    return "\n".join(lines) + "\n"


def as_json(cards: Sequence[Card], notes: Sequence[str]) -> str:
    doc: dict[str, Any] = {"cards": [c.to_dict() for c in cards], "notes": list(notes)}
    return json.dumps(doc, indent=2) + "\n"


def file_stem(card: Card) -> str:
    """A safe file name for the card: ``team-vision``, ``user-alice``, ``fleet``."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in card.name)
    return "fleet" if card.kind == "fleet" else f"{card.kind}-{safe}"
