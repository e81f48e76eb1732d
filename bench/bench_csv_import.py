"""Benchmark the generic CSV importer on the Alibaba GenAI 2026 tarballs (read in place).

    .venv/bin/python bench/bench_csv_import.py [--runs 3]

Times `parse_csv_table` with the `alibaba-genai-2026` preset on each shipped .tar.gz (gunzip,
tar, CSV parse, timestamp/number conversion; best of `--runs`), then the whole `ingest` into a
temporary store. Reads ../shared (or GPULENS_SHARED). Prints a markdown table. Not a test.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from gpulens.app.ingest import ingest
from gpulens.collect.csv_import import get_preset, parse_csv_table
from gpulens.config import load_config

SHARED = Path(
    os.environ.get("GPULENS_SHARED", Path(__file__).resolve().parents[1].parent / "shared")
)
BASE = SHARED / "data/clusters/alibaba-genai-v2026"
FILES = ("pod_gpu_duty_cycle_anon.tar.gz", "pod_gpu_memory_used_bytes_anon.tar.gz", "qps.tar.gz")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    preset = get_preset("alibaba-genai-2026")
    print("| step | rows | seconds | rows/s |\n|---|---:|---:|---:|")
    for name in FILES:
        best, rows = float("inf"), 0
        for _ in range(runs):
            start = time.perf_counter()
            tables = parse_csv_table(BASE / name, preset)
            best = min(best, time.perf_counter() - start)
            rows = sum(t.num_rows for t in tables.values())
        print(f"| parse {name} | {rows:,} | {best:.3f} | {rows / best:,.0f} |")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, env={}, overrides={"data_dir": tmp})
        start = time.perf_counter()
        result = ingest(cfg, [BASE / f for f in FILES], None, "bench", None, preset=preset.name)
        took = time.perf_counter() - start
    print(
        f"| ingest all (parse + store) | {result.readings:,} | {took:.3f} | "
        f"{result.readings / took:,.0f} |"
    )


if __name__ == "__main__":
    main()
