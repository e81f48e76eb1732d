"""Benchmark the store: ingest rows/s, bytes per stored value, hourly-rollup query time.

    .venv/bin/python bench/bench_store.py            # full: 64 GPUs x 7 days at 1 s (38.7M rows)
    .venv/bin/python bench/bench_store.py --quick    # 16 GPUs x 1 day
    .venv/bin/python bench/bench_store.py --encodings  # also: Parquet encodings of one day

The hourly rollup query runs through the store's views and, interleaved with it, straight on
the compacted files with DuckDB (`read_parquet`), so the views' share shows. `--encodings`
rewrites the first compacted day with float metrics byte-stream-split or plain (instead of the
stored dictionary encoding) and times the same query straight on each file.

Prints a markdown table. Data comes from bench/fleetgen.py (phases, step structure, noise and
NVML quantisation; not uniform noise). Not a test.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import cast

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleetgen import DAY_NS, GPU_ROW_METRICS, fleet_table
from gpulens.clock import FakeClock
from gpulens.model import Kind, Reading
from gpulens.store import SegmentWriter, Store, compact
from gpulens.store.schema import write_options

DAY0 = (1_764_000_000 * 10**9 // DAY_NS) * DAY_NS  # 2025-11-24 00:00 UTC
ROLLUP = (
    "SELECT gpu_uuid, date_trunc('hour', ts) AS h, avg(sm_active_ratio) AS sm, "
    "avg(gpu_util_ratio) AS util, avg(tensor_active_ratio) AS tensor, "
    "avg(dram_active_ratio) AS dram, avg(power_watts) AS watts FROM gpu GROUP BY 1, 2"
)


def readings_of(table: pa.Table) -> list[Reading]:
    """Row-wise Readings of a fleet table (what a collector yields)."""
    cols = table.to_pydict()
    metrics = [m for m in GPU_ROW_METRICS if m in cols]
    out = []
    for i in range(table.num_rows):
        labels = {k: cols[k][i] for k in ("host", "gpu_uuid", "gpu_index", "gpu_model")}
        out.append(Reading(Kind.GPU, cols["ts"][i], labels, {m: cols[m][i] for m in metrics}))
    return out


def metric_cells(paths: list[Path]) -> int:
    """Non-null metric values stored in `paths`."""
    total = 0
    for p in paths:
        md = pq.read_metadata(p)
        for rg in range(md.num_row_groups):
            group = md.row_group(rg)
            for c in range(group.num_columns):
                col = group.column(c)
                if col.path_in_schema in GPU_ROW_METRICS:
                    nulls = col.statistics.null_count if col.statistics else 0
                    total += col.num_values - nulls
    return total


def bytes_per_value(paths: list[Path]) -> float:
    return sum(p.stat().st_size for p in paths) / metric_cells(paths)


def bench_ingest(root: Path, gpus: int) -> dict[str, float]:
    seconds = 600
    table = fleet_table(7, gpus, DAY0, seconds)
    readings = readings_of(table)
    d1 = root / "ingest-readings"
    w = SegmentWriter(d1, "bench", clock=FakeClock(DAY0))
    t0 = time.perf_counter()
    for i in range(0, len(readings), gpus):
        w.append(readings[i : i + gpus])
    t_append = time.perf_counter() - t0
    w.flush()
    t_reading = time.perf_counter() - t0
    big = fleet_table(7, gpus, DAY0, 7200)
    d2 = root / "ingest-columnar"
    w = SegmentWriter(d2, "bench", clock=FakeClock(DAY0))
    t0 = time.perf_counter()
    w.append_table(Kind.GPU, big)
    w.flush()
    t_col = time.perf_counter() - t0
    return {
        "reading_rows": len(readings),
        "reading_append_rows_s": len(readings) / t_append,
        "reading_rows_s": len(readings) / t_reading,
        "columnar_rows": big.num_rows,
        "columnar_rows_s": big.num_rows / t_col,
    }


def bench_segment_size(root: Path, gpus_per_node: int = 8) -> float:
    """Bytes per value of uncompacted 10 s segments of one 8-GPU node."""
    d = root / "segments"
    table = fleet_table(11, gpus_per_node, DAY0, 600)
    w = SegmentWriter(d, "node000", clock=FakeClock(DAY0))
    written: list[Path] = []
    for start in range(0, 600, 10):
        lo = DAY0 + start * 10**9
        mask = pa.compute.and_(  # type: ignore[attr-defined]
            pa.compute.greater_equal(table["ts"], lo),  # type: ignore[attr-defined]
            pa.compute.less(table["ts"], lo + 10 * 10**9),  # type: ignore[attr-defined]
        )
        w.append_table(Kind.GPU, table.filter(mask))
        written += w.flush()
    return bytes_per_value(written)


def direct_sql(files: list[Path]) -> str:
    """ROLLUP straight on `files`, without the store's views."""
    listing = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
    return ROLLUP.replace("FROM gpu", f"FROM read_parquet([{listing}])")


def timed_median(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_encodings(
    day_file: Path, out_dir: Path, repeats: int = 7
) -> list[tuple[str, float, float]]:
    """(variant, MB, median query s) for one compacted day as stored and with float metrics
    byte-stream-split or plain instead of dictionary-encoded (labels, ts and zstd unchanged)."""
    table = pq.read_table(day_file)
    stored = write_options(table)
    floats = [
        f.name for f in table.schema if pa.types.is_floating(f.type) and f.name in GPU_ROW_METRICS
    ]
    variants: list[tuple[str, Path]] = [("dictionary + zstd (as stored)", day_file)]
    for name, encoding in (
        ("byte-stream-split floats", "BYTE_STREAM_SPLIT"),
        ("plain floats", "PLAIN"),
    ):
        dictionary = [c for c in cast(list[str], stored["use_dictionary"]) if c not in floats]
        encodings = {**cast(dict[str, str], stored["column_encoding"])}
        encodings.update(dict.fromkeys(floats, encoding))
        options = {**stored, "use_dictionary": dictionary, "column_encoding": encodings}
        path = out_dir / f"{encoding.lower()}.parquet"
        pq.write_table(table, path, **options)
        variants.append((name, path))
    del table
    out = []
    con = duckdb.connect(":memory:")
    for name, path in variants:
        sql = direct_sql([path])
        con.sql(sql).to_arrow_table()  # first run: file cache
        seconds = timed_median(partial(lambda q: con.sql(q).to_arrow_table(), sql), repeats)
        out.append((name, path.stat().st_size / 1e6, seconds))
    con.close()
    return out


def bench_fleet(root: Path, gpus: int, days: int, chunks_per_day: int) -> dict[str, float]:
    d = root / "fleet"
    t_write = 0.0
    t_gen = 0.0
    rows = 0
    for day in range(days):
        t0 = time.perf_counter()
        table = fleet_table(2025 + day, gpus, DAY0 + day * DAY_NS, 86_400)
        t_gen += time.perf_counter() - t0
        rows += table.num_rows
        w = SegmentWriter(d, "bench", clock=FakeClock(DAY0))
        step = table.num_rows // gpus // chunks_per_day
        t0 = time.perf_counter()
        for c in range(chunks_per_day):  # hourly flushes of all GPUs: rows are time-ordered per GPU
            lo = DAY0 + day * DAY_NS + c * step * 10**9
            ts = table["ts"]
            mask = pa.compute.and_(  # type: ignore[attr-defined]
                pa.compute.greater_equal(ts, lo),  # type: ignore[attr-defined]
                pa.compute.less(ts, lo + step * 10**9),  # type: ignore[attr-defined]
            )
            w.append_table(Kind.GPU, table.filter(mask))
            w.flush()
        w.close()
        t_write += time.perf_counter() - t0
        del table
    segs = sorted((d / "gpu").rglob("seg-*.parquet"))
    seg_bpv = bytes_per_value(segs)
    t0 = time.perf_counter()
    compact(d, clock=FakeClock(DAY0 + (days + 1) * DAY_NS), delete_grace_seconds=0)
    t_compact = time.perf_counter() - t0
    files = sorted((d / "gpu").rglob("*.parquet"))
    out: dict[str, float] = {
        "rows": rows,
        "gen_s": t_gen,
        "write_rows_s": rows / t_write,
        "hourly_segments_bpv": seg_bpv,
        "compact_s": t_compact,
        "compacted_bpv": bytes_per_value(files),
        "compacted_files": len(files),
        "disk_mb": sum(f.stat().st_size for f in files) / 1e6,
    }
    direct = direct_sql(files)
    con = duckdb.connect(":memory:")
    with Store(d) as store:
        t0 = time.perf_counter()
        result = store.query(ROLLUP)
        out["query_first_s"] = time.perf_counter() - t0
        times = []
        direct_times = []
        for _ in range(7):  # interleaved: the store's views, then the same query on the files
            t0 = time.perf_counter()
            result = store.query(ROLLUP)
            times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            same = con.sql(direct).to_arrow_table()
            direct_times.append(time.perf_counter() - t0)
        out["query_median_s"] = statistics.median(times)
        out["direct_median_s"] = statistics.median(direct_times)
        out["query_groups"] = result.num_rows
        assert same.num_rows == result.num_rows
    con.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="16 GPUs x 1 day instead of 64 x 7")
    ap.add_argument("--gpus", type=int, default=None)
    ap.add_argument("--days", type=int, default=None)
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    ap.add_argument(
        "--encodings", action="store_true", help="also compare Parquet encodings on one day"
    )
    args = ap.parse_args()
    gpus = args.gpus or (16 if args.quick else 64)
    days = args.days or (1 if args.quick else 7)
    root = Path(args.dir or tempfile.mkdtemp(prefix="gpulens-bench-"))
    try:
        ing = bench_ingest(root, gpus)
        seg = bench_segment_size(root)
        fleet = bench_fleet(root, gpus, days, chunks_per_day=24)
        encodings = []
        if args.encodings:
            first_day = sorted((root / "fleet" / "gpu").rglob("*.parquet"))[0]
            encodings = bench_encodings(first_day, root)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"## gpulens store benchmark ({gpus} GPUs x {days} days at 1 s, "
          f"{len(GPU_ROW_METRICS)} metrics per row)\n")  # fmt: skip
    print("| measure | value | target |")
    print("|---|---|---|")
    print(f"| ingest, Reading path (append + flush), GPU rows/s | {ing['reading_rows_s']:,.0f} | |")
    print(f"| ingest, Reading path, append only, rows/s | {ing['reading_append_rows_s']:,.0f} | |")
    print(f"| ingest, columnar `append_table` + flush, rows/s | {ing['columnar_rows_s']:,.0f} "
          f"| ≥ 300,000 |")  # fmt: skip
    print(f"| write, {days} days in hourly segments, rows/s | {fleet['write_rows_s']:,.0f} | |")
    print(f"| bytes/value, 10 s segments of one 8-GPU node | {seg:.2f} | |")
    print(f"| bytes/value, hourly segments | {fleet['hourly_segments_bpv']:.2f} | |")
    print(f"| bytes/value, after compaction (daily files) | {fleet['compacted_bpv']:.2f} | ≤ 2 |")
    print(f"| disk after compaction | {fleet['disk_mb']:,.0f} MB, "
          f"{fleet['compacted_files']:.0f} files | |")  # fmt: skip
    print(f"| compaction time | {fleet['compact_s']:.1f} s | |")
    print(f"| hourly rollup query ({fleet['rows'] / 1e6:.1f}M rows, compacted), first run | "
          f"{fleet['query_first_s']:.3f} s | |")  # fmt: skip
    print(f"| hourly rollup query, median of 7 | {fleet['query_median_s']:.3f} s | ≤ 1 s |")
    print(f"| the same query straight on the files with DuckDB, median of 7 (interleaved) | "
          f"{fleet['direct_median_s']:.3f} s | |")  # fmt: skip
    if encodings:
        print(f"\n### Parquet encodings, one compacted day ({gpus} GPUs), the query on each file\n")
        print("| encoding | size | query, median of 7 |")
        print("|---|---|---|")
        for name, mb, seconds in encodings:
            print(f"| {name} | {mb:,.0f} MB | {seconds:.3f} s |")
    print(f"\n(data generation {fleet['gen_s']:.0f} s, not counted)")


if __name__ == "__main__":
    main()
