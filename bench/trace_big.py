"""Benchmark `gpulens trace`'s analysis on a ~2 GB Kineto trace built by tiling a real one in time.

    .venv/bin/python bench/trace_big.py [--gb 2.0] [--runs 3] [--source PATH] [--dir DIR] [--keep]

The source (default: HTA's df_index_resolver test trace, 53.7 MB of JSON, 216k events, integer
µs times) is repeated back to back until the file reaches `--gb` GB of JSON: copy k has every
`ts` shifted by k × (the source's span + 1 ms), and its correlation ids, External ids, flow ids
and ProfilerStep numbers shifted past the previous copy's, so the result reads as one long
profile of a single rank. The file is written (plain JSON) into a temporary directory outside
the repository and deleted afterwards unless `--keep`; `--dir` reuses a directory holding a file
built before. Each run is a fresh subprocess that loads the file and runs the whole analysis
path of `gpulens trace` (every analysis, the findings), reporting its wall time and peak RSS
(`wait4`). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import orjson

SHARED = Path(
    os.environ.get("GPULENS_SHARED", Path(__file__).resolve().parents[1].parent / "shared")
)
SOURCE = (
    SHARED
    / "data/traces/HolisticTraceAnalysis/tests/data/df_index_resolver/df_index_resolver.json.gz"
)
NAME = "tiled_trace.json"
GAP_US = 1000
_STEP = re.compile(r"^ProfilerStep#(\d+)$")

CHILD = """
import json, sys, time
start, cpu_start = time.perf_counter(), time.process_time()
from gpulens.app.traces import analyze_traces, load_trace_file
trace = load_trace_file(sys.argv[1])
loaded, cpu_loaded = time.perf_counter(), time.process_time()
findings = analyze_traces([trace]).findings
done, cpu_done = time.perf_counter(), time.process_time()
print(json.dumps({
    "load_s": loaded - start, "analyze_s": done - loaded, "events": len(trace.events),
    "load_cpu_s": cpu_loaded - cpu_start, "analyze_cpu_s": cpu_done - cpu_loaded,
    "flows": len(trace.flows), "findings": sorted({f.rule_id for f in findings}),
}))
"""


def _read(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = zlib.decompress(data, 31)
    doc = orjson.loads(data)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def _shifted(events: list[dict[str, Any]], k: int, dt: float, ids: int, steps: int) -> bytes:
    """Copy `k` of the events: times, ids and step numbers moved past copy k - 1."""
    out = []
    for e in events:
        e = dict(e)
        if e.get("ph") != "M":
            if isinstance(e.get("ts"), int | float):
                e["ts"] = e["ts"] + k * dt
            if isinstance(e.get("id"), int):
                e["id"] = e["id"] + k * ids
            m = _STEP.match(str(e.get("name", "")))
            if m:
                e["name"] = f"ProfilerStep#{int(m.group(1)) + k * steps}"
            args = e.get("args")
            if isinstance(args, dict):
                args = dict(args)
                for key in ("correlation", "External id"):
                    if isinstance(args.get(key), int) and args[key] >= 0:
                        args[key] = args[key] + k * ids
                e["args"] = args
        out.append(e)
    return orjson.dumps(out)[1:-1]


def build(source: Path, target: Path, gb: float) -> tuple[int, int]:
    """Write the tiled trace; returns (copies, bytes)."""
    doc = _read(source)
    events: list[dict[str, Any]] = doc.pop("traceEvents")
    timed = [e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), int | float)]
    start = min(e["ts"] for e in timed)
    end = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    dt = end - start + GAP_US
    if all(isinstance(e["ts"], int) for e in timed):
        dt = int(dt)
    ids = 1 + max(
        [e["id"] for e in events if isinstance(e.get("id"), int)]
        + [
            v
            for e in events
            if isinstance(e.get("args"), dict)
            for v in (e["args"].get("correlation"), e["args"].get("External id"))
            if isinstance(v, int)
        ]
    )
    numbers = [int(m.group(1)) for e in events if (m := _STEP.match(str(e.get("name", ""))))]
    steps = max(numbers) + 1 if numbers else 0
    first = _shifted(events, 0, dt, ids, steps)
    copies = max(1, round(gb * 1e9 / len(first)))
    meta = orjson.dumps(doc)[1:-1]
    with target.open("wb") as f:
        f.write(b'{"traceEvents": [')
        f.write(first)
        for k in range(1, copies):
            f.write(b", ")
            f.write(_shifted(events, k, dt, ids, steps))
        f.write(b"]" + (b", " + meta if meta else b"") + b"}")
    return copies, target.stat().st_size


def _run(path: Path) -> dict[str, Any]:
    """One fresh subprocess over the file: its timings, wall time, CPU time (user + system:
    what a busy machine inflates least) and own peak RSS (MiB)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, stderr=err
        )
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            raise RuntimeError(err.read().decode()[-2000:])
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    result["wall_s"] = wall
    result["rss_mib"] = usage.ru_maxrss / 1024
    result["cpu_s"] = usage.ru_utime + usage.ru_stime
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gb", type=float, default=2.0, help="size of the JSON to build")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--dir", type=Path, help="reuse (or build into) this directory")
    parser.add_argument("--keep", action="store_true", help="keep the built file")
    args = parser.parse_args()
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="gpulens-bigtrace-"))
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / NAME
    try:
        if not path.exists():
            t = time.perf_counter()
            copies, size = build(args.source, path, args.gb)
            print(
                f"built {path.name}: {copies} copies of {args.source.name}, {size / 1e9:.2f} GB "
                f"in {time.perf_counter() - t:.0f} s\n"
            )
        size = path.stat().st_size
        runs = [_run(path) for _ in range(args.runs)]
        wall = statistics.median(r["wall_s"] for r in runs)
        rss = statistics.median(r["rss_mib"] for r in runs)
        load = statistics.median(r["load_s"] for r in runs)
        analyze = statistics.median(r["analyze_s"] for r in runs)
        cpu = statistics.median(r["cpu_s"] for r in runs)
        cpu_load = statistics.median(r["load_cpu_s"] for r in runs)
        cpu_analyze = statistics.median(r["analyze_cpu_s"] for r in runs)
        print("| JSON GB | events (+ flows) | wall s (load + analyze) | peak RSS MiB | findings |")
        print("|---:|---:|---:|---:|---|")
        print(
            f"| {size / 1e9:.2f} | {runs[0]['events']:,} (+ {runs[0]['flows']:,}) | "
            f"{wall:.1f} ({load:.1f} + {analyze:.1f}) | {rss:.0f} | "
            f"{', '.join(runs[0]['findings']) or '-'} |"
        )
        print(
            f"\nmedians of {args.runs} run(s); per run: "
            + ", ".join(f"{r['wall_s']:.1f} s / {r['rss_mib']:.0f} MiB" for r in runs)
            + f"\nCPU s (user + system): {cpu:.1f} ({cpu_load:.1f} loading + {cpu_analyze:.1f} "
            f"analyses and findings); load average {os.getloadavg()[0]:.1f}"
        )
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
