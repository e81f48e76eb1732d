"""The multi-rank jobs the executor tests run, from the stored real traces, and the reference
they are compared with: the single-process analysis of the loaded traces (`analyze_traces`,
which analyses every rank and compares them in one process, with the full traces in memory).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from gpulens.app.traces import TraceJob, analyze_traces, load_trace_file, trace_limits
from gpulens.present.reports.trace import build_view, to_html, to_json

TRACES = "data/traces"
HTA = "HolisticTraceAnalysis/tests/data"
_ROW = re.compile(r"^\| *([^|]+?) *\| *([^|]+?\.json\.gz) *\|(?:[^|]*\|){3} *(\S+) */ *(\S+) *\|")


def multi_rank_files(shared: Path) -> list[Path]:
    """Every stored trace that is one rank of a job of several (world size > 1 in the
    MANIFEST's `ranks (rank/world)` column), in the MANIFEST's order."""
    out = []
    for line in (shared / TRACES / "MANIFEST.md").read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if m and m.group(4).isdigit() and int(m.group(4)) > 1:
            out.append(shared / TRACES / m.group(1) / m.group(2))
    return out


def cases(shared: Path) -> dict[str, tuple[list[Path], bool]]:
    """name → (files of one job, hta_window)."""
    pair = sorted((shared / TRACES / HTA / "trace_filter").glob("*.json.gz"))
    every = multi_rank_files(shared)
    # a rank with one ProfilerStep name beside ranks with several: HTA's window then applies
    # to it too, which only the job as a whole can tell
    tracelens = shared / TRACES / "TraceLens/tests/traces"
    one_step = tracelens / "h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    several = shared / TRACES / HTA / "nccl_parser_config/nccl_data.json.gz"
    return {
        "pair": (pair, False),
        "pair_hta_window": (pair, True),
        "every_multi_rank_file": (every, False),
        "every_multi_rank_file_hta_window": (every, True),
        "one_step_rank_in_window_job": ([one_step, several], True),
    }


def reference_reports(files: list[Path], hta_window: bool) -> tuple[str, str]:
    """The report, JSON and HTML (with its timeline of the longest idle gaps), of the
    single-process analysis of the fully loaded traces."""
    limits = trace_limits()
    traces = [load_trace_file(f, rank=i, name=str(f), limits=limits) for i, f in enumerate(files)]
    view = build_view(analyze_traces(traces, hta_window=hta_window))
    return to_json(view), to_html(view)


def reference_json(files: list[Path], hta_window: bool) -> str:
    """The report JSON of the single-process analysis of the fully loaded traces."""
    return reference_reports(files, hta_window)[0]


def reports(job: TraceJob) -> tuple[str, str]:
    """The job's report, JSON and HTML."""
    view = build_view(job)
    return to_json(view), to_html(view)


def figures(doc_json: str) -> dict[str, object]:
    """The parsed JSON (for readable assertion failures)."""
    return dict(json.loads(doc_json))
