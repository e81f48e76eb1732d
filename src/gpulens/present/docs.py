"""Generates docs/metrics.md and docs/configuration.md from the catalog and the settings table.

Run `python -m gpulens.present.docs [docs_dir]`; a test fails when the committed pages differ.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpulens import catalog
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


PAGES = {"metrics.md": metrics_markdown, "configuration.md": configuration_markdown}


def write_docs(docs_dir: Path) -> list[Path]:
    """Write every generated page into `docs_dir`; returns the paths written."""
    docs_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, render in PAGES.items():
        path = docs_dir / name
        path.write_text(render(), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs")
    for p in write_docs(target):
        print(p)
