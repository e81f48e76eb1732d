"""The fleet report end to end: store → frames → states → waste → findings → view.

    python bench/bench_report.py --dir STORE [--runs 3]

STORE is a store built by bench_frames.py (7 days × 64 GPUs at 1 s, with the frames cache of
closed days written by its maintenance step). Reports the in-process `analyse` time (median)
and the wall time of `gpulens report --format json` as a user runs it (Python start-up and
imports included), with the machine's load average before and after (other work on a shared
machine makes single runs noisy).

`--profile` runs `analyse` once more under cProfile and prints where its time goes: each
function `analyse`, `build_context` and `run_rules` call directly (the frame, the states, each
finding rule, the rollups), by cumulative time. cProfile slows Python-heavy steps more than
numpy- and Arrow-heavy ones, so the split is a guide and the total above the real time.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpulens.app.analysis import analyse
from gpulens.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", type=Path, required=True, help="the store to report on")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="print where `analyse` spends time")
    ap.add_argument("--top", type=int, default=25, help="rows of the --profile table")
    args = ap.parse_args()
    inproc, cli = [], []
    findings = gpus = 0
    load_before = os.getloadavg()[0]
    for _ in range(args.runs):
        with Store(args.dir) as store:
            t0 = time.perf_counter()
            view = analyse(store)
            inproc.append(time.perf_counter() - t0)
            findings, gpus = len(view.findings), int(view.totals.get("gpus") or 0)
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "gpulens", "report", "--data-dir", str(args.dir),
                 "--format", "json", "-o", str(Path(tmp) / "r.json")],
                check=True, capture_output=True,
            )  # fmt: skip
            cli.append(time.perf_counter() - t0)
    print("| measure | value |\n|---|---|")
    print(f"| GPUs, findings | {gpus}, {findings} |")
    print(f"| `analyse` in process, median of {args.runs} | {statistics.median(inproc):.2f} s |")
    print(f"| `gpulens report --format json`, wall, median of {args.runs} | "
          f"{statistics.median(cli):.2f} s |")  # fmt: skip
    print(f"| each run, in process / command | {_list(inproc)} / {_list(cli)} |")
    print(f"| load average (1 min) before / after | {load_before:.1f} / {os.getloadavg()[0]:.1f} |")
    if args.profile:
        _profile(args.dir, args.top)


# the steps of a report: what these functions call directly
STAGES = ("analyse", "build_context", "run_rules")


def _profile(directory: Path, top: int) -> None:
    """One `analyse` under cProfile: the cumulative time of each step the report takes."""
    profiler = cProfile.Profile()
    with Store(directory) as store:
        t0 = time.perf_counter()
        profiler.runcall(analyse, store)
        total = time.perf_counter() - t0
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = []
    for (path, _line, func), (_cc, calls, _tt, cum, callers) in stats.items():
        parents = {parent[2] for parent in callers}
        caller = next((stage for stage in STAGES if stage in parents), None)
        if caller is None or "/gpulens/" not in path:
            continue
        module = path.split("gpulens/")[-1].removesuffix(".py").replace("/", ".")
        rows.append((cum, caller, f"{module}.{func}", calls))
    print(f"\n`analyse` under cProfile: {total:.2f} s. Steps by cumulative time:\n")
    print("| called from | step | calls | cumulative s |\n|---|---|---:|---:|")
    for cum, caller, name, calls in sorted(rows, reverse=True)[:top]:
        print(f"| {caller} | `{name}` | {calls} | {cum:.3f} |")


def _list(seconds: list[float]) -> str:
    return ", ".join(f"{s:.2f}" for s in seconds) + " s"


if __name__ == "__main__":
    main()
