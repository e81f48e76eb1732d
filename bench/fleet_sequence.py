"""`gpulens fleet --sequence` over a cluster sequence of 16 queues × 30 days at 1 min (issue 17
target: ≤ 5 s wall as a whole process).

Generates one CSV per queue (``<dir>/<queue>/sequence.csv``: ISO 8601 minute, total GPUs, GPUs
in use, pending GPU demand; a daily cycle with noise, queues of 8 to 512 GPUs) in a temporary
directory, then runs the whole command `--runs` times: median and spread of wall time, CPU
time (user + system, less sensitive to other work on the machine) and peak RSS of the
process. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

START = np.datetime64("2026-10-01T00:00:00")


def generate(root: Path, queues: int, days: int, seed: int = 17) -> list[Path]:
    """One sequence CSV per queue; returns the paths."""
    rng = np.random.default_rng(seed)
    minutes = days * 24 * 60
    t = np.arange(minutes)
    stamps = np.datetime_as_string(START + t.astype("timedelta64[m]"), unit="s")
    day = 0.5 - 0.5 * np.cos(2 * np.pi * (t % 1440) / 1440)
    paths = []
    for q in range(queues):
        total = int(rng.choice([8, 16, 32, 64, 128, 256, 512]))
        base = rng.uniform(0.3, 0.9)
        load = np.clip(base + 0.3 * day + rng.normal(0, 0.08, minutes).cumsum() / 60, 0, 1.4)
        in_use = np.minimum(np.round(total * load), total).astype(int)
        pending = np.round(np.maximum(load - 1.0, 0) * total * 2).astype(int)
        path = root / f"queue{q:02d}" / "sequence.csv"
        path.parent.mkdir(parents=True)
        with path.open("w") as f:
            f.write("minute,gpus,busy,waiting\n")
            f.writelines(
                f"{s}Z,{total},{u},{p}\n"
                for s, u, p in zip(stamps.tolist(), in_use.tolist(), pending.tolist(), strict=True)
            )
        paths.append(path)
    return paths


def run_once(paths: list[Path]) -> tuple[float, float, float, dict[str, object]]:
    """Wall seconds, CPU seconds (user + system), peak RSS (MiB) and the JSON of one whole
    `gpulens fleet` process."""
    args = [sys.executable, "-m", "gpulens", "fleet"]
    for p in paths:
        args += ["--sequence", str(p)]
    args += [
        "--map", "time=minute,total=gpus,in_use=busy,pending=waiting",
        "--queue-from", "parent-dir",
        "--format", "json",
    ]  # fmt: skip
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            raise SystemExit(f"gpulens fleet failed ({proc.returncode}): {err.read()[-400:]!r}")
        out.seek(0)
        cpu = usage.ru_utime + usage.ru_stime
        return wall, cpu, usage.ru_maxrss / 1024, json.loads(out.read())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queues", type=int, default=16)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpulens-fleet-") as tmp:
        paths = generate(Path(tmp), a.queues, a.days)
        size = sum(p.stat().st_size for p in paths) / 1e6
        runs = [run_once(paths) for _ in range(a.runs)]
    walls = [w for w, _, _, _ in runs]
    cpus = [c for _, c, _, _ in runs]
    rss = max(r for _, _, r, _ in runs)
    doc = runs[-1][3]
    load = os.getloadavg()[0]
    print("| input | runs | wall median | wall min–max | CPU median | peak RSS | figures |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {a.queues} queues × {a.days} d at 1 min ({a.queues * a.days * 1440:,} rows, "
        f"{size:.1f} MB CSV, ISO times) | {a.runs} | **{statistics.median(walls):.2f} s** | "
        f"{min(walls):.2f}–{max(walls):.2f} s | {statistics.median(cpus):.2f} s | {rss:.0f} MiB | "
        f"pooled allocation "
        f"{doc['pooled_allocation']:.1%}, pending while idle {doc['pending_while_idle_share']:.1%}"
        f" of the minutes |"
    )
    print(f"\nload average {load:.1f} at the end")


if __name__ == "__main__":
    main()
