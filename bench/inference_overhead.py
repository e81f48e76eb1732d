"""The serving wrapper's own cost per call (gpulens.torch.inference), measured directly.

The same loop of calls runs bare and wrapped, alternating, and the process's CPU time is
compared (`time.process_time()`: every thread, the writer thread and its Parquet flushes
included, with a reading every second):

1. `no-op callable`: a function that returns its input: the wrapper's cost alone (the
   wrapped side's CPU runs until `close()` returns: the writer thread's work on the calls and
   the last write are in it);
2. `small model`: a 3-layer MLP (batch 8, 64 → 256 → 256 → 10) in eager, under no_grad.

Also prints the memory Python holds once 200,000 no-op calls have entered one window (a
10-minute interval: nothing written meanwhile) and its peak: a window holds at most 4,096
latencies (the reservoir), and calls wait in a queue the writer thread drains every 0.25 s
(at most 65,536).

Prints a markdown table of medians over `--runs` pairs. CPU only: on a GPU the wrapper
records two CUDA events per call instead of reading the clock twice.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import gpulens.torch as gt


def _cpu(fn: Callable[[Any], Any], x: Any, calls: int) -> float:
    """CPU seconds of `calls` calls of `fn`."""
    start = time.process_time()
    for _ in range(calls):
        fn(x)
    return time.process_time() - start


def pair(fn: Callable[[Any], Any], x: Any, calls: int, data_dir: Path) -> tuple[float, float]:
    """(bare, wrapped) CPU seconds per call."""
    bare = _cpu(fn, x, calls) / calls
    infer = gt.inference(fn, job="bench", engine="eager", data_dir=data_dir, interval_s=1.0,
                         flush_s=1.0)  # fmt: skip
    start = time.process_time()
    for _ in range(calls):
        infer(x)
    infer.close()  # the writer thread's work on these calls, and the last write, included
    return bare, (time.process_time() - start) / calls


def memory(calls: int, data_dir: Path) -> tuple[float, float]:
    """(bytes held after, peak bytes) Python allocated while `calls` calls are served into one
    window (10 min interval: no reading is written meanwhile)."""
    infer = gt.inference(lambda v: v, job="bench-mem", engine="eager", data_dir=data_dir,
                         interval_s=600.0)  # fmt: skip
    tracemalloc.start()
    for _ in range(calls):
        infer(1)
    deadline = time.monotonic() + 60
    while infer._pending and time.monotonic() < deadline:  # drained into the window
        time.sleep(0.1)
    time.sleep(3.0)  # the last drained batch processed (a loaded machine is slow at it)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    infer.close()
    return float(current), float(peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    ).eval()  # fmt: skip
    x = torch.randn(8, 64)

    def noop(v: Any) -> Any:
        return v

    def small(v: Any) -> Any:
        with torch.no_grad():
            return model(v)

    print("| case | bare µs/call | wrapped µs/call | overhead µs/call (median of pairs) |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in (("no-op callable", noop), ("small model", small)):
            rows = [pair(fn, x, args.calls, Path(tmp)) for _ in range(args.runs)]
            bare = statistics.median(b for b, _ in rows) * 1e6
            wrapped = statistics.median(w for _, w in rows) * 1e6
            over = statistics.median((w - b) for b, w in rows) * 1e6
            print(f"| {name} | {bare:.2f} | {wrapped:.2f} | {over:.2f} |")
        current, peak = memory(200_000, Path(tmp))
        print()
        print(f"200,000 calls into one window: {current / 1e6:.2f} MB held at the end, peak "
              f"{peak / 1e6:.2f} MB (reservoir 4,096 latencies per window)")  # fmt: skip


if __name__ == "__main__":
    main()
