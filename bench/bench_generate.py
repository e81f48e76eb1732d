"""Generate-and-store: simulated fleet → real NVML collector → pipeline → Parquet store.

Runs a simulated span (default one day) of one 8-GPU host at 1 s ticks through exactly the
path `gpulens demo` takes, and reports wall time, rows and bytes. Target: a day ≤ 60 s.

    python bench/bench_generate.py [--hours 24] [--gpus 8] [--runs 3] [--workers 1 2]

Each worker process runs a time shard of the span (the fleet is a function of time, and each
shard is primed so the shards equal one uninterrupted run; tests/integration/test_generate.py).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gpulens.app.generate import generate
from gpulens.config import load_config
from gpulens.store import Store

START_NS = 1_764_374_400 * 1_000_000_000  # 2025-11-29 00:00:00 UTC


def one_run(hours: float, gpus: int, workers: int, data_dir: Path) -> dict[str, float]:
    cfg = load_config(
        env={},
        overrides={
            "data_dir": str(data_dir),
            "host": "bench",
            "simulated.hosts": 1,
            "simulated.gpus_per_host": gpus,
            "store.flush_seconds": 600.0,
        },
    )
    t0 = time.perf_counter()
    generate(cfg, START_NS, START_NS + int(hours * 3600e9), workers=workers)
    wall = time.perf_counter() - t0
    with Store(data_dir) as store:
        gpu_rows = store.query("SELECT count(*) AS n FROM gpu").column("n")[0].as_py()
        all_rows = sum(store.tables().values())
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
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    print(
        "| workers | wall time, median (min-max) | GPU rows / all rows | rows/s | store MB "
        "| GPU bytes per value |\n|---|---|---|---|---|---|"
    )
    for workers in args.workers:
        results = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                results.append(one_run(args.hours, args.gpus, workers, Path(tmp)))
        walls = [r["wall_s"] for r in results]
        r = results[0]
        wall = statistics.median(walls)
        print(
            f"| {workers} | {wall:.1f} s ({min(walls):.1f}-{max(walls):.1f}, {args.runs} runs) "
            f"| {r['gpu_rows']:,} / {r['rows']:,} | {r['rows'] / wall:,.0f} "
            f"| {r['bytes'] / 1e6:.1f} | {r['gpu_bytes'] / max(1, r['gpu_values']):.2f} |",
            flush=True,
        )
    print(
        f"\nSpan: {args.hours:g} h of {args.gpus} simulated H100s at 1 s ticks, through the "
        "NVML collector, rates and the segment writer."
    )


if __name__ == "__main__":
    main()
