"""Markdown and HTML tables shared by the report renderers."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence


def num(x: float | None, digits: int = 1) -> str:
    """A number with thousands separators, or "-" when unknown."""
    return "-" if x is None else f"{x:,.{digits}f}"


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
