"""Markdown and HTML pieces shared by the report renderers: tables, the page style, and the
colours of the idle-gap causes (HTML trace report and dashboard)."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from gpulens.present.format import SIG, number


def num(x: float | None, sig: int = SIG) -> str:
    """A number with `sig` significant figures (present/format.py: `15.9`, `1,234`, `46.9 k`),
    or "-" when unknown."""
    return number(x, sig)


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table (cells' "|" escaped) followed by a blank line."""

    def cell(c: str) -> str:
        return c.replace("|", "\\|")

    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return [*out, ""]


def html_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    numeric: Callable[[int, int], bool] = lambda i, n: i >= 1,
) -> str:
    """An HTML table; `numeric(column, columns)` says which cells are right-aligned numbers."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{"n" if numeric(i, len(r)) else ""}">{html.escape(c)}</td>'
            for i, c in enumerate(r)
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def page_css(max_width_rem: int) -> str:
    """The style of a self-contained HTML report page `max_width_rem` wide."""
    return (
        f"body{{font-family:system-ui,sans-serif;margin:2rem;max-width:{max_width_rem}rem;"
        "color:#1d2329}\n"
        "table{border-collapse:collapse;margin:0.5rem 0 1.5rem}\n"
        "td,th{padding:0.25rem 0.6rem;border-bottom:1px solid #dde;text-align:left}\n"
        "td.n{text-align:right;font-variant-numeric:tabular-nums}\n"
        ".finding{border-left:4px solid #c60;padding:0.3rem 1rem;margin:1rem 0;"
        "background:#fbf7f2}\n"
        ".finding.critical{border-color:#b00}.finding.info{border-color:#06c}\n"
        ".legend span{display:inline-block;width:0.8rem;height:0.8rem;margin:0 0.3rem 0 1rem}\n"
    )


# The colour of each idle-gap cause (analyze/traces/causes.py) wherever traces are drawn.
CAUSE_COLORS: dict[str, str] = {
    "data_loader": "#d95f02",
    "sync": "#e7298a",
    "launch_overhead": "#7570b3",
    "cpu_ops": "#e6ab02",
    "gpu_wait": "#1b9e77",
    "unknown": "#999999",
}
