"""Runs every benchmark in bench/ and prints their markdown tables (`make bench`).

python bench/run_all.py [--quick]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

BENCHES: list[tuple[str, list[str], list[str]]] = [
    # script, full arguments, quick arguments
    ("bench_generate.py", ["--hours", "24", "--runs", "3"], ["--hours", "1", "--runs", "1"]),
    ("bench_store.py", ["--encodings"], ["--quick", "--encodings"]),
    ("bench_record_cpu.py", ["--seconds", "120"], ["--seconds", "20", "--warmup", "5"]),
    ("bench_nvml_tick.py", [], []),
    ("bench_dcgm_parse.py", [], []),
    ("bench_frames.py", [], ["--quick"]),
    ("bench_rollups.py", [], ["--quick", "--runs", "1"]),
    ("bench_scrape.py", ["--scrapes", "300"], ["--scrapes", "30"]),
    ("bench_top.py", ["--refreshes", "400"], ["--refreshes", "40"]),
    ("bench_top.py", ["--datatable", "--refreshes", "200"], ["--datatable", "--refreshes", "20"]),
    ("traces.py", [], []),
    ("trace_loader.py", ["--runs", "5"], ["--runs", "1"]),
    ("startup.py", [], ["--runs", "3"]),
    ("fleet_sequence.py", ["--runs", "5"], ["--days", "2", "--runs", "1"]),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = ap.parse_args()
    failed = []
    for script, full, quick in BENCHES:
        print(f"\n## {script}\n", flush=True)
        done = subprocess.run(
            [sys.executable, str(HERE / script), *(quick if args.quick else full)]
        )
        if done.returncode != 0:
            failed.append(script)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
