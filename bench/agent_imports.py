"""Resident memory the agent's imports add, in the order the agent loads them.

    python bench/agent_imports.py

A fresh interpreter per run (this one): each module is imported in turn (pyarrow's probe for
pandas answered once pyarrow is in, as `gpulens agent` does: app/lean.py) and the growth of
VmRSS (/proc/self/status: Python objects, native heaps and the shared libraries' pages that
loading touched) is printed. tracemalloc would miss all but the Python objects. The last rows
are what the agent loads later, at its first findings pass and at the first dashboard request.
Linux only.
"""

from __future__ import annotations

import importlib
from pathlib import Path

STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("numpy", ("numpy",)),
    ("pyarrow (+ compute, parquet, fs)", ("pyarrow", "pyarrow.compute", "pyarrow.parquet")),
    ("duckdb (import)", ("duckdb",)),
    ("psutil, prometheus_client", ("psutil", "prometheus_client")),
    ("uvicorn", ("uvicorn",)),
    ("the store, collectors, live state, agent (gpulens)", ("gpulens.app.agent",)),
    ("the exporter and the light front", (
        "gpulens.present.prometheus.exporter", "gpulens.present.web.front")),
    ("the command line (typer, click, rich)", ("gpulens.present.cli",)),
    ("later: the findings pass (analysis, pyarrow.dataset for group_by)", (
        "gpulens.app.analysis", "pyarrow.dataset")),
    ("later: the web app at the first dashboard request (FastAPI, pydantic)", (
        "gpulens.present.web.app",)),
)  # fmt: skip


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main() -> None:
    start = rss_mb()
    print(f"interpreter: {start:.1f} MB\n")
    print("| import | RSS added MB | RSS then MB |")
    print("|---|---:|---:|")
    for i, (label, modules) in enumerate(STEPS):
        before = rss_mb()
        for name in modules:
            importlib.import_module(name)
        now = rss_mb()
        print(f"| {label} | {now - before:.1f} | {now:.1f} |")
        if i == 1:  # pyarrow is in: answer its probe before anything converts a list
            from gpulens.app.lean import keep_pandas_out

            assert keep_pandas_out(), "pandas was imported already"


if __name__ == "__main__":
    main()
