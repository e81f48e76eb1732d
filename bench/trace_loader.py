"""The trace loader's paths and its inflate, in one process, on every stored trace.

    python bench/trace_loader.py [--runs 5]

Loads every Kineto trace under `$GPULENS_SHARED/data/traces` (`.json` and `.json.gz`) in one
process through each of the loader's three slice paths: the C scanner (`_scan.c`, the default
where it is built), msgspec structs (schema.py) and orjson dicts. Prints the CPU seconds of each
(the minimum of `--runs`, the least disturbed by other work on the machine), the events loaded,
and whether all three paths gave identical columns. Then inflates the largest gzip trace with
ISA-L (python-isal, what the loader uses) and with zlib, in the loader's block size.
"""

from __future__ import annotations

import argparse
import gzip
import os
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gpulens.analyze.traces import load as loader
from gpulens.analyze.traces.model import Trace
from gpulens.app.traces import load_trace_file

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("GPULENS_SHARED", HERE.parent.parent / "shared"))
TRACES = SHARED / "data/traces"
BLOCK = 1 << 20

PATHS: dict[str, tuple[bool, bool]] = {  # name: (_USE_SCANNER, _USE_STRUCTS)
    "C scanner": (True, True),
    "msgspec structs": (False, True),
    "orjson dicts": (False, False),
}


def trace_files() -> list[Path]:
    return sorted(p for p in TRACES.rglob("*") if p.name.endswith((".json", ".json.gz")))


def load_all(files: list[Path], scanner: bool, structs: bool) -> list[Trace]:
    loader._USE_SCANNER, loader._USE_STRUCTS = scanner, structs
    try:
        return [load_trace_file(f) for f in files]
    finally:
        loader._USE_SCANNER, loader._USE_STRUCTS = True, True


def cpu_seconds(work: Callable[[], Any], runs: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(runs):
        t0 = time.process_time()
        out = work()
        best = min(best, time.process_time() - t0)
    return best, out


def same_columns(a: list[Trace], b: list[Trace]) -> bool:
    for x, y in zip(a, b, strict=True):
        for field in ("ts_ns", "dur_ns", "name", "category", "pid", "tid", "correlation"):
            if not np.array_equal(np.asarray(getattr(x.events, field)),
                                  np.asarray(getattr(y.events, field))):  # fmt: skip
                return False
    return True


def inflate(data: bytes, module: Any) -> int:
    d = module.decompressobj(zlib.MAX_WBITS | 16)
    return sum(len(d.decompress(data[i : i + BLOCK])) for i in range(0, len(data), BLOCK))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    files = trace_files()
    size = sum(f.stat().st_size for f in files) / 1e6
    print(f"{len(files)} traces, {size:.0f} MB on disk; C scanner built: {loader.SCANNER}; "
          f"load average {os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print("| slice path | CPU s, min of runs | events | flows |\n|---|---:|---:|---:|")
    results: dict[str, list[Trace]] = {}
    for name, (scanner, structs) in PATHS.items():
        if scanner and not loader.SCANNER:
            continue
        secs, traces = cpu_seconds(lambda s=scanner, t=structs: load_all(files, s, t), args.runs)
        results[name] = traces
        events = sum(len(t.events) for t in traces)
        flows = sum(len(t.flows) for t in traces)
        print(f"| {name} | {secs:.2f} | {events:,} | {flows:,} |")
    first = next(iter(results.values()))
    print(f"\nidentical columns on every path: "
          f"{all(same_columns(first, other) for other in results.values())}\n")  # fmt: skip
    gz = max((f for f in files if f.name.endswith(".gz")), key=lambda f: f.stat().st_size)
    data = gz.read_bytes()
    print(f"inflating {gz.name} ({len(data) / 2**20:.0f} MiB → "
          f"{len(gzip.decompress(data)) / 2**20:.0f} MiB), {BLOCK >> 10} KiB blocks\n")  # fmt: skip
    print("| inflate | CPU s, min of runs | MiB/s out |\n|---|---:|---:|")
    from isal import isal_zlib

    for label, module in (("ISA-L (python-isal)", isal_zlib), ("zlib", zlib)):
        secs, out = cpu_seconds(lambda m=module: inflate(data, m), args.runs)
        print(f"| {label} | {secs:.3f} | {out / 2**20 / secs:,.0f} |")


if __name__ == "__main__":
    main()
