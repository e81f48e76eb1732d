"""Benchmark `gpulens.store.frames.gpu_intervals`: the interval frame over a fleet's history.

    .venv/bin/python bench/bench_frames.py            # 64 GPUs x 7 days at 1 s (38.7M gpu rows)
    .venv/bin/python bench/bench_frames.py --quick    # 16 GPUs x 1 day
    .venv/bin/python bench/bench_frames.py --days 30 --gpus 512 --interval 10 \
        --dir /tmp/fb_30d --build-only                # the 30-day fleet (133M gpu rows) to keep

GPU rows come from bench/fleetgen.py (the store benchmark's generator); process rows are one
process per busy GPU-second (memory in use), labelled with a job, user and engine, as the NVML
collector writes them. Days are generated and written one at a time (memory stays bounded by
one day) in hourly segments; after each day the store's maintenance pass runs as `gpulens
record` runs it once the day has closed: compaction into daily files and the frames cache of
the closed day. Prints a markdown table with the median of several runs. Not a test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleetgen import DAY_NS, fleet_table
from gpulens.clock import FakeClock
from gpulens.model import Kind
from gpulens.store import SegmentWriter, Store, maintain
from gpulens.store.frame_cache import CacheStats
from gpulens.store.frames import gpu_intervals, materialize_day
from gpulens.store.layout import partitions

DAY0 = (1_764_000_000 * 10**9 // DAY_NS) * DAY_NS  # 2025-11-24 00:00 UTC
MIB = 2**20


def _dict(values: np.ndarray, names: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(values.astype(np.int32), names)


def process_table(gpu: pa.Table, day: int) -> pa.Table:
    """One process row per GPU row whose memory is in use: the job holding that GPU."""
    used = gpu.column("memory_used_bytes").to_numpy()
    busy = gpu.filter(pa.array(used > 100 * MIB))
    uuid_idx = np.asarray(busy.column("gpu_uuid").combine_chunks().indices)
    uuids = busy.column("gpu_uuid").combine_chunks().dictionary
    host_idx = np.asarray(busy.column("host").combine_chunks().indices)
    hosts = busy.column("host").combine_chunks().dictionary
    n_gpus = len(uuids)
    job = uuid_idx // 4  # 4-GPU jobs, one per half node
    pids = [str(100_000 + day * 1000 + g) for g in range(n_gpus)]
    jobs = [f"job-{day}-{j}" for j in range(n_gpus // 4 + 1)]
    users = [f"user{u}" for u in range(8)]
    engines = ["pytorch", "vllm", "tensorrt"]
    mem = busy.column("memory_used_bytes").to_numpy() - 300 * MIB
    return pa.table(
        {
            "ts": busy.column("ts"),
            "host": pa.DictionaryArray.from_arrays(pa.array(host_idx, pa.int32()), hosts),
            "gpu_uuid": pa.DictionaryArray.from_arrays(pa.array(uuid_idx, pa.int32()), uuids),
            "pid": _dict(uuid_idx, pids),
            "process_name": _dict(np.zeros(len(job)), ["python train.py"]),
            "user": _dict(job % 8, users),
            "job_id": _dict(job, jobs),
            "engine": _dict(job % 3, engines),
            "process_memory_used_bytes": pa.array(mem),
        }
    )


def _maintain(root: Path, now_ns: int) -> None:
    """The maintenance pass `gpulens record` runs: compaction, then the closed days' cache."""
    maintain(root, keep_days=100_000, compact_min_age_seconds=600.0, clock=FakeClock(now_ns))


def build(root: Path, gpus: int, days: int, interval: int = 1) -> dict[str, float]:
    rows = {"gpu": 0, "process": 0}
    hour_ns = 3600 * 10**9
    for day in range(days):
        table = fleet_table(2025 + day, gpus, DAY0 + day * DAY_NS, 86_400, interval=interval)
        procs = process_table(table, day)
        rows["gpu"] += table.num_rows
        rows["process"] += procs.num_rows
        w = SegmentWriter(root, "bench", clock=FakeClock(DAY0))
        for hour in range(24):
            lo = DAY0 + day * DAY_NS + hour * hour_ns
            hi = lo + hour_ns
            for kind, t in ((Kind.GPU, table), (Kind.PROCESS, procs)):
                ts = t.column("ts")
                mask = pc.and_(pc.greater_equal(ts, lo), pc.less(ts, hi))
                w.append_table(kind, t.filter(mask))
            w.flush()
        w.close()
        del table, procs
        # the day has closed: the next day's first maintenance pass (which also deletes what
        # the previous pass compacted, its grace period over)
        _maintain(root, DAY0 + (day + 1) * DAY_NS + hour_ns)
    _maintain(root, DAY0 + days * DAY_NS + 2 * hour_ns)  # the last day's superseded segments
    return {k: float(v) for k, v in rows.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="16 GPUs x 1 day instead of 64 x 7")
    ap.add_argument("--gpus", type=int, default=None)
    ap.add_argument("--days", type=int, default=None)
    ap.add_argument("--interval", type=int, default=1, help="seconds between GPU readings")
    ap.add_argument(
        "--build-only", action="store_true", help="build the store (with --dir) and stop"
    )
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--step", type=float, default=60.0)
    ap.add_argument("--dir", type=Path, default=None, help="reuse/keep a data directory")
    ap.add_argument("--report-step", type=float, default=900.0, help="step of the cached run")
    args = ap.parse_args()
    gpus = args.gpus or (16 if args.quick else 64)
    days = args.days or (1 if args.quick else 7)
    root = Path(args.dir or tempfile.mkdtemp(prefix="gpulens-frames-"))
    try:
        t0 = time.perf_counter()
        if not (root / "gpu").exists():
            rows = build(root, gpus, days, args.interval)
        else:
            rows = {"gpu": float("nan"), "process": float("nan")}
        t_build = time.perf_counter() - t0
        if args.build_only:
            print(f"built {root}: {rows['gpu'] / 1e6:.1f}M gpu rows, "
                  f"{rows['process'] / 1e6:.1f}M process rows in {t_build:.0f} s "
                  f"(generation, hourly segments, maintenance after each day)")  # fmt: skip
            print(_disk_sizes(root))
            return
        with Store(root) as store:
            times = []
            frame = pa.table({})
            for _ in range(args.runs + 1):
                t0 = time.perf_counter()
                frame = gpu_intervals(store, args.step, use_cache=False)
                times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            one = gpu_intervals(store, args.step, where={"job_id": "job-0-1"}, use_cache=False)
            t_job = time.perf_counter() - t0
            # the frames cache: materialise every day, then the report step raw vs cached
            t_days = []
            for day, _part in partitions(root, Kind.GPU):
                t0 = time.perf_counter()
                materialize_day(store, dt.date.fromisoformat(day))
                t_days.append(time.perf_counter() - t0)
            raw_t, cached_t = [], []
            stats = CacheStats()
            for _ in range(args.runs):
                t0 = time.perf_counter()
                raw = gpu_intervals(store, args.report_step, use_cache=False)
                raw_t.append(time.perf_counter() - t0)
                stats = CacheStats()
                t0 = time.perf_counter()
                cached = gpu_intervals(store, args.report_step, cache_stats=stats)
                cached_t.append(time.perf_counter() - t0)
            same = raw.num_rows == cached.num_rows
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    cores = len(os.sched_getaffinity(0))
    print(_disk_sizes(root) if args.dir is not None else "")
    print(f"## gpulens interval frames ({gpus} GPUs x {days} days at {args.interval} s, "
          f"step {args.step:g} s, {cores} cores)\n")  # fmt: skip
    print("| measure | value | target |")
    print("|---|---|---|")
    print(
        f"| gpu rows / process rows | {rows['gpu'] / 1e6:.1f}M / {rows['process'] / 1e6:.1f}M | |"
    )
    print(f"| build the store (generate, write, maintain daily) | {t_build:.1f} s | |")
    print(f"| `gpu_intervals`, first run | {times[0]:.2f} s | |")
    print(f"| `gpu_intervals`, median of {args.runs} | {statistics.median(times[1:]):.2f} s "
          f"| ≤ 3 s (whole fleet report) |")  # fmt: skip
    print(f"| frame rows | {frame.num_rows:,} | |")
    print(f"| `gpu_intervals(where={{job_id}})` | {t_job:.2f} s ({one.num_rows} rows) | |")
    step = f"{args.report_step:g} s"
    print(f"| materialise one day's frames cache, median of {len(t_days)} days "
          f"| {statistics.median(t_days):.2f} s | |")  # fmt: skip
    print(f"| `gpu_intervals` step {step}, raw rows, median of {args.runs} "
          f"| {statistics.median(raw_t):.2f} s | |")  # fmt: skip
    print(f"| `gpu_intervals` step {step}, frames cache ({stats.days_cached} days), median of "
          f"{args.runs} | {statistics.median(cached_t):.2f} s | ≤ 3 s |")  # fmt: skip
    print(f"| cached rows = raw rows | {same} ({cached.num_rows:,}) | |")


def _disk_sizes(root: Path) -> str:
    """Bytes on disk of the store and of each of its top-level parts (gpu, process, frames...)."""

    def size(path: Path) -> int:
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())

    parts = sorted((size(p), p.name) for p in root.iterdir() if p.is_dir())
    total = sum(n for n, _ in parts)
    listed = ", ".join(f"{name} {n / 1e9:.2f} GB" for n, name in reversed(parts))
    return f"on disk: {total / 1e9:.2f} GB ({listed})"


if __name__ == "__main__":
    main()
