"""HTA's side of bench/trace_vs_hta.py: one trace job through Holistic Trace Analysis.

    HTA-PYTHON bench/hta_driver.py {all|narrow|load} '{"0": "rank0.json.gz", ...}'

Run with the interpreter of a venv holding HTA 0.6.1 (not gpulens's):

    python -m venv hta-venv && hta-venv/bin/pip install traceinsight==0.6.1 'pandas<3'

`load`: `TraceAnalysis` on the rank files (parse, align, ProfilerStep filter) and nothing else.
`narrow`: load + the temporal and idle time breakdowns (every rank).
`all`: load + the analyses whose results `gpulens trace` reports: temporal, idle time (every
rank), GPU kernel-type breakdown, comm/comp overlap, CUDA kernel launch stats (every rank).

Prints one JSON line: seconds to load, seconds for the analyses, and the analyses that raised
(their time still counts). Imports nothing from gpulens.
"""

from __future__ import annotations

import json
import sys
import time
import warnings

ANALYSES = {
    "load": (),
    "narrow": ("temporal", "idle"),
    "all": ("temporal", "idle", "kernel_types", "overlap", "launch_stats"),
}


def main() -> None:
    work, spec = sys.argv[1], sys.argv[2]
    warnings.simplefilter("ignore")
    start = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis

    files = {int(rank): path for rank, path in json.loads(spec).items()}
    ranks = sorted(files)
    try:
        analysis = TraceAnalysis(trace_files=files, trace_dir="/")
    except Exception as exc:
        out = {"load_s": time.perf_counter() - start, "analyze_s": 0.0}
        print(json.dumps({**out, "errors": [f"load: {type(exc).__name__}"], "failed": True}))
        return
    loaded = time.perf_counter()
    calls = {
        "temporal": lambda: analysis.get_temporal_breakdown(visualize=False),
        "idle": lambda: analysis.get_idle_time_breakdown(ranks=ranks, visualize=False),
        "kernel_types": lambda: analysis.get_gpu_kernel_breakdown(visualize=False),
        "overlap": lambda: analysis.get_comm_comp_overlap(visualize=False),
        "launch_stats": lambda: analysis.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False),
    }
    errors = []
    for name in ANALYSES[work]:
        try:
            calls[name]()
        except Exception as exc:
            errors.append(f"{name}: {type(exc).__name__}")
    done = time.perf_counter()
    print(json.dumps({"load_s": loaded - start, "analyze_s": done - loaded, "errors": errors}))


if __name__ == "__main__":
    main()
