"""Benchmark the Kineto loader + HTA-equivalent breakdowns against HTA, per reference case.

    .venv/bin/python bench/traces.py [--runs 3] [--hta-python /path/to/venv/bin/python]
                                     [--work breakdown|full]

For every case of ../shared/data/traces-reference/cases.csv (or GPULENS_SHARED) a fresh Python
subprocess loads the case's rank files and computes the temporal, per-stream idle and device
idle breakdowns (HTA window + quirks, as the reference comparison does); `--work full` runs the
whole `gpulens trace` analysis instead (every analysis of every rank, the cluster, the findings).
Wall time is the subprocess's (interpreter start-up and imports included, as in HTA's figures),
CPU time and peak memory its own (user + system time and maximum RSS from `wait4`, like
`/usr/bin/time -v`; CPU time varies less than wall time on a shared machine); with `--runs N`
each figure is the median of N runs. gpulens's bytecode is written first (as pip does on
install), so no subprocess compiles its modules from source.

HTA: with `--hta-python` (a Python with `holistictraceanalysis` installed) HTA runs in the same
benchmark, one subprocess per case and run, `HTA_DISABLE_NS_ROUNDING=1` (its exact mode): load +
7 analyses (temporal, idle time, kernel breakdown, comm/comp overlap, kernel launch stats, queue
length and memory bandwidth summaries); a case HTA cannot load is shown but left out of both
sides of the same-run totals. Always shown as well: HTA's recorded run from
hta_runs_time_memory.csv (`--hta-build`, a 2-core machine). Prints markdown tables.

The same-run HTA column is not equal work: HTA loads and runs 7 analyses while the default
`--work breakdown` loads and computes 3 breakdowns. bench/trace_vs_hta.py compares equal work
(the user's whole task, the narrow breakdowns, and loading alone), each tool as a process.
"""

from __future__ import annotations

import argparse
import compileall
import csv
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SHARED = Path(
    os.environ.get("GPULENS_SHARED", Path(__file__).resolve().parents[1].parent / "shared")
)
REFERENCE = SHARED / "data/traces-reference"
TRACES = SHARED / "data/traces"

OURS_BREAKDOWN = """
import json, sys, time
start = time.perf_counter()
from gpulens.analyze.traces.breakdown import breakdown, job_step_name_count
from gpulens.app.traces import load_trace_file
files = json.loads(sys.argv[1])
traces = [load_trace_file(path, rank=int(rank)) for rank, path in files.items()]
loaded = time.perf_counter()
steps = job_step_name_count(traces)
for t in traces:
    breakdown(t, hta_window=True, hta_quirks=True, job_step_names=steps)
done = time.perf_counter()
print(json.dumps({"load_s": loaded - start, "analyze_s": done - loaded}))
"""

OURS_FULL = """
import json, sys, time
start = time.perf_counter()
from gpulens.app.traces import analyze_traces, load_trace_file
files = json.loads(sys.argv[1])
traces = [load_trace_file(path, rank=int(rank)) for rank, path in files.items()]
loaded = time.perf_counter()
analyze_traces(traces)
done = time.perf_counter()
print(json.dumps({"load_s": loaded - start, "analyze_s": done - loaded}))
"""

HTA = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
start = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
files = {int(k): v for k, v in json.loads(sys.argv[1]).items()}
ranks = sorted(files)
try:
    a = TraceAnalysis(trace_files=files, trace_dir="/")
except Exception as exc:
    print(json.dumps({"load_s": time.perf_counter() - start, "analyze_s": 0.0,
                      "errors": [f"load: {type(exc).__name__}"], "failed": True}))
    sys.exit(0)
loaded = time.perf_counter()
errors = []
calls = {
    "temporal_breakdown": lambda: a.get_temporal_breakdown(visualize=False),
    "idle_time_breakdown": lambda: a.get_idle_time_breakdown(ranks=ranks, visualize=False),
    "kernel_breakdown": lambda: a.get_gpu_kernel_breakdown(visualize=False),
    "comm_comp_overlap": lambda: a.get_comm_comp_overlap(visualize=False),
    "launch_stats": lambda: a.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False),
    "queue_length": lambda: a.get_queue_length_summary(ranks=ranks),
    "memory_bw": lambda: a.get_memory_bw_summary(ranks=ranks),
}
for name, call in calls.items():
    try:
        call()
    except Exception as exc:
        errors.append(f"{name}: {type(exc).__name__}")
done = time.perf_counter()
print(json.dumps({"load_s": loaded - start, "analyze_s": done - loaded, "errors": errors}))
"""


def _run(python: str, code: str, files: dict[str, str], env: dict[str, str]) -> dict[str, float]:
    """One subprocess: its wall time, own peak RSS (MiB) and the timings it prints."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-c", code, json.dumps(files)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{python} failed on {files} (exit {proc.returncode})")
    result = json.loads(out.decode().strip().splitlines()[-1])
    cpu = usage.ru_utime + usage.ru_stime
    return {**result, "wall_s": wall, "cpu_s": cpu, "rss_mib": usage.ru_maxrss / 1024}


def _median_runs(
    runs: int, python: str, code: str, files: dict[str, str], env: dict[str, str]
) -> dict[str, float]:
    results = [_run(python, code, files, env) for _ in range(runs)]
    keys = ("wall_s", "cpu_s", "rss_mib", "load_s", "analyze_s")
    median = {k: statistics.median(r[k] for r in results) for k in keys}
    return {**results[0], **median}


def _recorded(build: str) -> dict[str, tuple[float, float]]:
    out = {}
    with (REFERENCE / "hta_runs_time_memory.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["hta_build"] == build and row["wall_s"] and row["maxrss_MiB_time_v"]:
                out[row["case"]] = (float(row["wall_s"]), float(row["maxrss_MiB_time_v"]))
    return out


def _json_bytes(path: Path) -> int:
    with gzip.open(path) as f:
        return sum(len(block) for block in iter(lambda: f.read(1 << 20), b""))


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b == b and b else "-"


def _compile_ours() -> None:
    """Write gpulens's bytecode, as pip does when it installs the package.

    A source checkout run with PYTHONDONTWRITEBYTECODE=1 would otherwise compile every module
    in every subprocess (~10 ms each), which an installed gpulens (like HTA here) never does.
    """
    package = Path(__file__).resolve().parents[1] / "src" / "gpulens"
    if package.is_dir():
        compileall.compile_dir(package, quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1, help="runs per case (medians)")
    parser.add_argument("--hta-python", help="a Python with holistictraceanalysis installed")
    parser.add_argument("--hta-build", default="traceinsight-0.6.1_pandas2_no_ns_rounding")
    parser.add_argument("--work", choices=("breakdown", "full"), default="breakdown")
    args = parser.parse_args()
    recorded = _recorded(args.hta_build)
    _compile_ours()
    code = OURS_BREAKDOWN if args.work == "breakdown" else OURS_FULL
    env = dict(os.environ)
    hta_env = {**env, "HTA_DISABLE_NS_ROUNDING": "1"}
    with (REFERENCE / "cases.csv").open(encoding="utf-8") as f:
        cases = list(csv.reader(f))[1:]
    print(
        f"Ours: `--work {args.work}`; medians of {args.runs} run(s). HTA recorded: "
        f"`{args.hta_build}` from hta_runs_time_memory.csv"
        + (f"; HTA same run: `{args.hta_python}`." if args.hta_python else ".")
        + "\n"
    )
    head = "| case | JSON MB | ours s (load + analyze) | ours CPU s | ours MiB |"
    rule = "|---|---:|---:|---:|---:|"
    if args.hta_python:
        head += " HTA s | HTA CPU s | HTA MiB | time ratio | CPU ratio | memory ratio |"
        rule += "---:|---:|---:|---:|---:|---:|"
    head += " recorded HTA s | recorded MiB | ratios to recorded |"
    rule += "---:|---:|---|"
    print(head + "\n" + rule)
    total = {"ours_s": 0.0, "ours_mib": 0.0, "hta_s": 0.0, "hta_mib": 0.0, "rec_s": 0.0}
    total.update(rec_mib=0.0, same_s=0.0, same_mib=0.0, ours_cpu=0.0, hta_cpu=0.0, same_cpu=0.0)
    errors: list[str] = []
    for case, spec in cases:
        files = {r: str(TRACES / p) for r, p in json.loads(spec).items()}
        json_mb = sum(_json_bytes(Path(p)) for p in files.values()) / 1e6
        ours = _median_runs(args.runs, sys.executable, code, files, env)
        rec_s, rec_mib = recorded.get(case, (float("nan"), float("nan")))
        total["ours_s"] += ours["wall_s"]
        total["ours_cpu"] += ours["cpu_s"]
        total["ours_mib"] += ours["rss_mib"]
        total["rec_s"] += rec_s if rec_s == rec_s else 0.0
        total["rec_mib"] += rec_mib if rec_mib == rec_mib else 0.0
        row = (
            f"| {case} | {json_mb:.1f} | {ours['wall_s']:.2f} ({ours['load_s']:.2f} + "
            f"{ours['analyze_s']:.2f}) | {ours['cpu_s']:.2f} | {ours['rss_mib']:.0f} |"
        )
        if args.hta_python:
            hta = _median_runs(args.runs, args.hta_python, HTA, files, hta_env)
            errors += [f"{case}: {e}" for e in hta.get("errors", [])]
            if not hta.get("failed"):
                total["hta_s"] += hta["wall_s"]
                total["hta_cpu"] += hta["cpu_s"]
                total["hta_mib"] += hta["rss_mib"]
                total["same_s"] += ours["wall_s"]
                total["same_cpu"] += ours["cpu_s"]
                total["same_mib"] += ours["rss_mib"]
            row += (
                f" {hta['wall_s']:.2f} | {hta['cpu_s']:.2f} | {hta['rss_mib']:.0f} | "
                f"{_ratio(ours['wall_s'], hta['wall_s'])} | "
                f"{_ratio(ours['cpu_s'], hta['cpu_s'])} | "
                f"{_ratio(ours['rss_mib'], hta['rss_mib'])} |"
            )
        row += (
            f" {rec_s:.2f} | {rec_mib:.0f} | {_ratio(ours['wall_s'], rec_s)} / "
            f"{_ratio(ours['rss_mib'], rec_mib)} |"
        )
        print(row, flush=True)
    row = (
        f"| **total** | | {total['ours_s']:.2f} | {total['ours_cpu']:.2f} | "
        f"{total['ours_mib']:.0f} |"
    )
    if args.hta_python:
        row += (
            f" {total['hta_s']:.2f} | {total['hta_cpu']:.2f} | {total['hta_mib']:.0f} | "
            f"**{_ratio(total['same_s'], total['hta_s'])}** | "
            f"**{_ratio(total['same_cpu'], total['hta_cpu'])}** | "
            f"**{_ratio(total['same_mib'], total['hta_mib'])}** |"
        )
    row += (
        f" {total['rec_s']:.2f} | {total['rec_mib']:.0f} | "
        f"**{_ratio(total['ours_s'], total['rec_s'])} / "
        f"{_ratio(total['ours_mib'], total['rec_mib'])}** |"
    )
    print(row)
    if errors:
        print("\nHTA errors (an analysis that raised still counts its time): " + "; ".join(errors))
    if args.hta_python and total["same_s"] != total["ours_s"]:
        print(
            f"\nSame-run totals over the cases HTA loads: ours {total['same_s']:.2f} s, "
            f"{total['same_cpu']:.2f} s CPU, {total['same_mib']:.0f} MiB."
        )


if __name__ == "__main__":
    main()
