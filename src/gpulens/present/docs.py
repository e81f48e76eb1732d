"""Generates docs/metrics.md and docs/configuration.md from the catalog and the settings table,
and the thresholds table of docs/analysis/states.md (between its markers) from
`analyze.states.Thresholds`.

Run `python -m gpulens.present.docs [docs_dir]`; a test fails when the committed pages differ.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from gpulens import catalog
from gpulens.analyze.states import Thresholds
from gpulens.config import SETTINGS
from gpulens.model import Kind

_KIND_TITLES = {
    Kind.GPU: "GPU (whole GPUs and MIG instances)",
    Kind.PROCESS: "Process (one GPU process on one device)",
    Kind.HOST: "Host",
    Kind.APP: "Application (reported by the workload)",
}


def _cell(text: str | int | None) -> str:
    return "" if text is None else str(text).replace("|", "\\|")


def metrics_markdown() -> str:
    """The metrics reference, one table per reading kind."""
    lines = [
        "# Metrics",
        "",
        "Generated from `gpulens.catalog` by `make docs`; do not edit by hand.",
        "",
        "Values are in base units; the unit is part of the name. A metric a source cannot",
        "measure is absent (null), never 0. `DCGM` is the DCGM field id (ids are stable; names",
        "changed in DCGM 4.6), `GPM` the NVML GPM metric id on Hopper and newer.",
        "",
    ]
    for kind, title in _KIND_TITLES.items():
        lines += [
            f"## {title}",
            "",
            "| metric | type | unit | NVML | GPM | DCGM | help |",
            "|---|---|---|---|---|---|---|",
        ]
        for m in catalog.metrics_of(kind):
            dcgm = f"{m.dcgm} `{m.dcgm_name}`" if m.dcgm is not None else ""
            kind_text = m.type + (f" → `{m.rate}`" if m.rate else "")
            lines.append(
                f"| `{m.name}` | {kind_text} | {_cell(m.unit)} | {_cell(m.nvml)} | "
                f"{_cell(m.gpm)} | {_cell(dcgm)} | {_cell(m.help)} |"
            )
        lines.append("")
    lines += ["## Clock-event (throttle) reasons", "", "| bit | name |", "|---|---|"]
    lines += [f"| 0x{bit:03x} | `{name}` |" for bit, name in catalog.CLOCK_EVENT_REASONS.items()]
    return "\n".join(lines) + "\n"


def configuration_markdown() -> str:
    """The settings reference."""
    lines = [
        "# Configuration",
        "",
        "Generated from `gpulens.config.SETTINGS` by `make docs`; do not edit by hand.",
        "",
        "Settings come from, in rising precedence: the defaults below, a TOML file",
        "(`--config gpulens.toml`, dotted keys are TOML tables: `[collect]` then",
        "`interval_seconds = 5`), environment variables, and command-line flags.",
        "",
        "| key | environment | type | default | allowed | help |",
        "|---|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        if s.minimum is not None and s.maximum is not None:
            allowed = f"{s.minimum:g} … {s.maximum:g}"
        elif s.item_choices:
            allowed = ", ".join(s.item_choices)
        else:
            allowed = ""
        lines.append(
            f"| `{s.key}` | `{s.env_name}` | {s.type.__name__} | {_cell(repr(s.default))} | "
            f"{_cell(allowed)} | {_cell(s.help)} |"
        )
    return "\n".join(lines) + "\n"


def field_docs(cls: type) -> dict[str, str]:
    """The string literal under each field of a dataclass (its attribute docstring), by field
    name, whitespace folded."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    out: dict[str, str] = {}
    for field, doc in itertools.pairwise(body):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(doc, ast.Expr)
            and isinstance(doc.value, ast.Constant)
            and isinstance(doc.value.value, str)
        ):
            out[field.target.id] = " ".join(doc.value.value.split())
    return out


def _default(name: str, value: object) -> str:
    if name.endswith("_bytes") and isinstance(value, int | float) and value % 2**20 == 0:
        return f"{value:.0f} ({value / 2**20:g} MiB)"
    if name.endswith("_s") and isinstance(value, int | float):
        return f"{value:g} s"
    return f"{value:g}" if isinstance(value, float) else str(value)


def thresholds_markdown() -> str:
    """The table of `Thresholds`: each field, its default and its meaning."""
    docs = field_docs(Thresholds)
    lines = ["| field | default | meaning |", "|---|---|---|"]
    for f in dataclasses.fields(Thresholds):
        lines.append(
            f"| `{f.name}` | {_default(f.name, f.default)} | {_cell(docs.get(f.name, ''))} |"
        )
    return "\n".join(lines) + "\n"


PAGES = {"metrics.md": metrics_markdown, "configuration.md": configuration_markdown}

# generated sections of hand-written pages: page → (section name, its text)
SECTIONS: dict[str, tuple[str, Callable[[], str]]] = {
    "analysis/states.md": ("thresholds", thresholds_markdown),
}


def _markers(name: str) -> tuple[str, str]:
    return (
        f"<!-- generated: {name} (`make docs` writes it from the code; do not edit) -->",
        f"<!-- end generated: {name} -->",
    )


def spliced(text: str, name: str, body: str) -> str:
    """`text` with the section between the markers of `name` replaced by `body`; ValueError
    when the page lacks the markers."""
    begin, end = _markers(name)
    pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise ValueError(f"no {begin!r} ... {end!r} markers: add them where the section goes")
    return pattern.sub(lambda _: f"{begin}\n{body}{end}", text, count=1)


def write_docs(docs_dir: Path) -> list[Path]:
    """Write every generated page into `docs_dir`; returns the paths written."""
    docs_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, render in PAGES.items():
        path = docs_dir / name
        path.write_text(render(), encoding="utf-8")
        written.append(path)
    for page, (section, render) in SECTIONS.items():
        path = docs_dir / page
        path.write_text(spliced(path.read_text(encoding="utf-8"), section, render()), "utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs")
    for p in write_docs(target):
        print(p)
