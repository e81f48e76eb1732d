"""The fleet report end to end: store → frames → states → waste → findings → view.

    python bench/bench_report.py --dir STORE [--runs 3]

STORE is a store built by bench_frames.py (7 days × 64 GPUs at 1 s, with the frames cache of
closed days written by its maintenance step). Reports the in-process `analyse` time (median)
and the wall time of `gpulens report --format json` as a user runs it (Python start-up and
imports included), with the machine's load average before and after (other work on a shared
machine makes single runs noisy).
"""

from __future__ import annotations

import argparse
import os
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


def _list(seconds: list[float]) -> str:
    return ", ".join(f"{s:.2f}" for s in seconds) + " s"


if __name__ == "__main__":
    main()
