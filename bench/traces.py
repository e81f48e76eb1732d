"""Benchmark the Kineto loader + HTA-equivalent breakdowns against HTA's recorded runs.

    .venv/bin/python bench/traces.py [--hta-build traceinsight-0.6.1_pandas2_no_ns_rounding]

For every case of ../shared/data/traces-reference/cases.csv (or GPULENS_SHARED) a fresh Python
subprocess loads the case's rank files and computes the temporal, per-stream idle and device
idle breakdowns (HTA window + quirks, as the reference comparison does). It reports that
subprocess's wall time (interpreter start-up and imports included, as in HTA's figures) and peak
RSS (`resource.getrusage(RUSAGE_SELF).ru_maxrss`), next to HTA's wall time and peak RSS
(`/usr/bin/time -v` maxrss) from hta_runs_time_memory.csv, with the ratios. HTA itself is not
installed here: its figures are the recorded ones (2-core machine). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SHARED = Path(
    os.environ.get("GPULENS_SHARED", Path(__file__).resolve().parents[1].parent / "shared")
)
REFERENCE = SHARED / "data/traces-reference"
TRACES = SHARED / "data/traces"

CHILD = """
import json, resource, sys, time
start = time.perf_counter()
from gpulens.analyze.traces.breakdown import breakdown, job_step_name_count
from gpulens.analyze.traces.load import load_trace
files = json.loads(sys.argv[1])
traces = [load_trace(path, rank=int(rank)) for rank, path in files.items()]
loaded = time.perf_counter()
steps = job_step_name_count(traces)
for t in traces:
    breakdown(t, hta_window=True, hta_quirks=True, job_step_names=steps)
done = time.perf_counter()
rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"load_s": loaded - start, "analyze_s": done - loaded, "rss_mib": rss_mib}))
"""


def _hta(build: str) -> dict[str, tuple[float, float]]:
    out = {}
    with (REFERENCE / "hta_runs_time_memory.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["hta_build"] == build and row["wall_s"] and row["maxrss_MiB_time_v"]:
                out[row["case"]] = (float(row["wall_s"]), float(row["maxrss_MiB_time_v"]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hta-build", default="traceinsight-0.6.1_pandas2_no_ns_rounding")
    args = parser.parse_args()
    hta = _hta(args.hta_build)
    print(f"HTA figures: `{args.hta_build}` from hta_runs_time_memory.csv (HTA not installed).\n")
    print(
        "| case | JSON MB | ours s (load + analyze) | ours peak RSS MiB | HTA s | HTA RSS MiB "
        "| time ratio | memory ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    ours_s = ours_mib = hta_s = hta_mib = 0.0
    with (REFERENCE / "cases.csv").open(encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    for case, spec in rows:
        files = {r: str(TRACES / p) for r, p in json.loads(spec).items()}
        json_mb = sum(_json_bytes(Path(p)) for p in files.values()) / 1e6
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(files)],
            capture_output=True,
            text=True,
            check=True,
        )
        wall = time.perf_counter() - start
        child = json.loads(proc.stdout)
        h_wall, h_rss = hta.get(case, (float("nan"), float("nan")))
        ours_s, ours_mib = ours_s + wall, ours_mib + child["rss_mib"]
        hta_s, hta_mib = hta_s + h_wall, hta_mib + h_rss
        print(
            f"| {case} | {json_mb:.1f} | {wall:.2f} ({child['load_s']:.2f} + "
            f"{child['analyze_s']:.2f}) | {child['rss_mib']:.0f} | {h_wall:.2f} | {h_rss:.0f} "
            f"| {wall / h_wall:.2f} | {child['rss_mib'] / h_rss:.2f} |"
        )
    print(
        f"| **total** | | {ours_s:.2f} | {ours_mib:.0f} | {hta_s:.2f} | {hta_mib:.0f} "
        f"| {ours_s / hta_s:.2f} | {ours_mib / hta_mib:.2f} |"
    )


def _json_bytes(path: Path) -> int:
    with gzip.open(path) as f:
        return sum(len(block) for block in iter(lambda: f.read(1 << 20), b""))


if __name__ == "__main__":
    main()
