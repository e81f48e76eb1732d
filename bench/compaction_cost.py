"""What an agent's compaction costs, and what it saves its findings pass.

    python bench/compaction_cost.py [--hours 2] [--gpus 8] [--passes 3]

Writes `--hours` of the simulated node the agent benchmarks use (1 host × `--gpus` GPUs, 1 s
collection) as 10 s segments, twice, then runs on each copy the maintenance passes an agent
would have run over those hours, on a simulated clock:

- `every 300 s`: `store.compact_after_seconds = 600` (the default), a pass every 300 s merging
  segments older than 600 s, today's first-level files merged into one once there are 12;
- `every 1800 s`: `store.compact_after_seconds = 3600` (the default before), a pass every
  1800 s merging segments older than an hour.

Both run this tree's `compact`. For each it prints the CPU of all the passes, how much of the
data they merged (the segments merged, in hours: the older policy leaves its last hour or more
unmerged) and the CPU per hour merged, the live files per table at the end, and the CPU of the
findings pass the agent starts (the child of `app/store_child.py`) over the last hour of that
store, median of `--passes`.

Then one pass's memory: a fresh process per Arrow memory pool (mimalloc, pyarrow's default here,
and glibc's `system`, which the agent uses) merges the segments of the last 10 minutes but 5 (a
first pass, which also loads what a pass uses), then the last 5 minutes' as the agent's pass
every 300 s does, and prints its resident memory before that second pass, at its peak (VmHWM,
reset before it) and after handing the freed memory back (`release_memory`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agent_footprint import pass_cpu
from gpulens.app.generate import generate
from gpulens.clock import FakeClock
from gpulens.config import load_config
from gpulens.model import Kind
from gpulens.store.compact import compact
from gpulens.store.layout import LiveFiles, name_start_ns

NS = 1_000_000_000
POLICIES = {"every 300 s": 600.0, "every 1800 s": 3600.0}

ONE_PASS = """
import os, sys, time
from pathlib import Path
from gpulens.app.heap import release_memory
from gpulens.clock import FakeClock
from gpulens.store.compact import compact

def kb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])

import pyarrow as pa
store, now = Path(sys.argv[1]), int(sys.argv[2])
compact(store, clock=FakeClock(now - 300 * 10**9), min_age_seconds=0)  # loads what a pass uses
release_memory()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from here
before = kb("VmRSS:")
done = compact(store, clock=FakeClock(now), min_age_seconds=0)
peak = kb("VmHWM:")
release_memory()
print(pa.default_memory_pool().backend_name, done.files_merged, before, peak, kb("VmRSS:"))
"""


def config_file(root: Path, gpus: int) -> Path:
    cfg = root / "gpulens.toml"
    cfg.write_text(
        f'data_dir = "{root / "store"}"\n[collect]\ninterval_seconds = 1.0\n'
        f'collectors = ["simulated"]\n[simulated]\nhosts = 1\ngpus_per_host = {gpus}\n'
    )
    return cfg


def maintenance_cpu(data_dir: Path, start: int, end: int, after_s: float) -> float:
    """CPU seconds of the passes an agent runs over [start, end) with this policy."""
    every = round(max(60.0, after_s / 2) * NS)
    cpu = time.process_time()
    for t in range(start + every, end + 1, every):
        compact(data_dir, clock=FakeClock(t), min_age_seconds=after_s)
    return time.process_time() - cpu


def live_files(data_dir: Path) -> tuple[int, int]:
    """(live files, live segments) of the gpu table (the others have as many)."""
    live = LiveFiles(data_dir).live(Kind.GPU)
    return len(live), sum(f.name.startswith("seg-") for f in live)


def one_pass_memory(segments: Path, now: int, pool: str) -> list[str]:
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": pool}
    out = subprocess.run(
        [sys.executable, "-c", ONE_PASS, str(segments), str(now)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.split()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--passes", type=int, default=3, help="findings passes timed per store")
    args = ap.parse_args()
    end = time.time_ns() // NS * NS
    start = end - round(args.hours * 3600 * NS)
    print(f"{args.hours:g} h of 1 host × {args.gpus} simulated GPUs in 10 s segments; load "
          f"average {os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print("| policy | compaction CPU | data merged | CPU per hour merged | live gpu files at "
          "the end | findings pass over the last hour (median) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        first = Path(tmp) / "a"
        first.mkdir()
        cfg_path = config_file(first, args.gpus)
        cfg = load_config(cfg_path, env={}, overrides={"store.flush_seconds": 10.0})
        generate(cfg, start, end, workers=1)
        spare = Path(tmp) / "segments"
        shutil.copytree(first / "store", spare)
        for i, (name, after_s) in enumerate(POLICIES.items()):
            root = Path(tmp) / f"p{i}"
            shutil.copytree(first, root)
            cfg_path = config_file(root, args.gpus)
            segments = live_files(root / "store")[1]
            cpu = maintenance_cpu(root / "store", start, end, after_s)
            files, left = live_files(root / "store")
            merged_h = args.hours * (segments - left) / segments
            passes = pass_cpu(cfg_path, 3600.0, args.passes)
            runs = ", ".join(f"{p:.2f}" for p in passes)
            print(f"| {name} | {cpu:.2f} s | {merged_h:.2f} h | {cpu / merged_h:.2f} s | "
                  f"{files} | {statistics.median(passes):.2f} s ({runs}) |")  # fmt: skip
        print("\none pass over the last 5 minutes of segments, by Arrow memory pool (MB):\n")
        print("| pool | files merged | RSS before | peak | after handing back |")
        print("|---|---:|---:|---:|---:|")
        for pool in ("mimalloc", "system"):
            segments = Path(tmp) / f"mem-{pool}"
            shutil.copytree(spare, segments)
            keep = end - 600 * NS  # the last 10 minutes: what a pass every 300 s merges, twice
            for kind_dir in segments.iterdir():
                for part in kind_dir.glob("date=*"):
                    for f in part.glob("seg-*.parquet"):
                        if name_start_ns(f.name) < keep:
                            f.unlink()
            name, merged, before, peak, after = one_pass_memory(segments, end, pool)
            print(f"| {name} | {merged} | {int(before) / 1024:.0f} | {int(peak) / 1024:.0f} | "
                  f"{int(after) / 1024:.0f} |")  # fmt: skip
    print(f"\nload average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
