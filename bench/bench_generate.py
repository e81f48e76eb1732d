"""Generate-and-store: simulated fleet → real NVML collector → pipeline → Parquet store.

Runs a simulated span (default one day) of one 8-GPU host at 1 s ticks through exactly the
path `gpulens demo` takes, and reports wall time, rows and bytes. Target: a day ≤ 60 s.

    python bench/bench_generate.py [--hours 24] [--gpus 8] [--runs 3]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gpulens.clock import PacedClock
from gpulens.collect.simulated import SimulatedFleet
from gpulens.pipeline.rates import RateStage
from gpulens.pipeline.scheduler import Scheduler
from gpulens.present.session import fleet_collectors
from gpulens.store import SegmentWriter, Store

START_NS = 1_764_374_400 * 1_000_000_000  # 2025-11-29 00:00:00 UTC


def one_run(hours: float, gpus: int, data_dir: Path) -> dict[str, float]:
    fleet = SimulatedFleet(hosts=1, gpus_per_host=gpus, seed=0, start_ns=START_NS)
    clock = PacedClock(start_ns=START_NS, speed=math.inf)
    collectors = fleet_collectors(fleet, clock)
    writer = SegmentWriter(data_dir, "bench", flush_seconds=600.0, clock=clock)
    scheduler = Scheduler(
        collectors, writer, clock, interval_s=1.0, timeout_s=None, rates=RateStage()
    )
    t0 = time.perf_counter()
    scheduler.run(duration_s=hours * 3600)
    writer.close()
    wall = time.perf_counter() - t0
    store = Store(data_dir)
    try:
        gpu_rows = store.query("SELECT count(*) AS n FROM gpu").column("n")[0].as_py()
        all_rows = sum(store.tables().values())
    finally:
        store.close()
    size = sum(p.stat().st_size for p in data_dir.rglob("*.parquet"))
    gpu_files = list((data_dir / "gpu").rglob("*.parquet"))
    gpu_bytes = sum(p.stat().st_size for p in gpu_files)
    return {
        "wall_s": wall,
        "gpu_rows": gpu_rows,
        "rows": all_rows,
        "bytes": size,
        "gpu_bytes": gpu_bytes,
        "gpu_values": metric_values(gpu_files),
    }


def metric_values(paths: list[Path]) -> int:
    """Non-null metric cells (everything but ts and string label columns) in `paths`."""
    total = 0
    for p in paths:
        md = pq.read_metadata(p)
        schema = md.schema.to_arrow_schema()
        numeric = {
            f.name
            for f in schema
            if f.name != "ts"
            and not pa.types.is_string(f.type)
            and not pa.types.is_dictionary(f.type)
        }
        for rg in range(md.num_row_groups):
            group = md.row_group(rg)
            for c in range(group.num_columns):
                col = group.column(c)
                if col.path_in_schema in numeric:
                    nulls = col.statistics.null_count if col.statistics else 0
                    total += col.num_values - nulls
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    results = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            results.append(one_run(args.hours, args.gpus, Path(tmp)))
    walls = [r["wall_s"] for r in results]
    r = results[0]
    print("| measure | value |\n|---|---|")
    print(f"| simulated span | {args.hours:g} h × {args.gpus} GPUs at 1 s |")
    print(
        f"| wall time, median of {args.runs} | {statistics.median(walls):.1f} s "
        f"(min {min(walls):.1f}, max {max(walls):.1f}) |"
    )
    print(f"| GPU rows / all rows | {r['gpu_rows']:,} / {r['rows']:,} |")
    print(f"| rows per second (all kinds) | {r['rows'] / statistics.median(walls):,.0f} |")
    print(f"| store size (all tables) | {r['bytes'] / 1e6:.1f} MB |")
    print(
        f"| GPU table: bytes per stored metric value | "
        f"{r['gpu_bytes'] / max(1, r['gpu_values']):.2f} ({r['gpu_values']:,} values) |"
    )


if __name__ == "__main__":
    main()
