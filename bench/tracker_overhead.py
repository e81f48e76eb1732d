"""The gpulens.torch tracker's own cost per training step, measured directly.

Each case runs the same loop bare and tracked, alternating, and compares the process's CPU
time (`time.process_time()`: every thread, the tracker's writer thread included):

1. `wrap + step`: a loop over ready batches that does nothing else, wrapped and stepped;
2. `wrap + step + hooks`: a tiny model's forward and optimizer step each step, with the
   tracker's module and optimizer hooks (`model=`, `optimizer=`);
3. `disabled`: case 1 with GPULENS_DISABLE=1 (a run that does nothing: what remains is the
   call of its empty `step()`);
4. `50 ms steps`: steps that wait 50 ms (sleep: no CPU of their own), tracked with a reading
   every second and a flush every 2 s: the tracker's CPU, writer thread and Parquet flushes
   included, as a share of the step time.

Prints a markdown table of medians over `--runs` pairs. CPU only (no GPU on the bench machine:
on a GPU, hooks record CUDA events instead of reading the clock).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

import gpulens.torch as gt

Loop = Callable[[gt.Run | gt.NullRun | None], None]


def _cpu(loop: Loop, run_factory: Callable[[], gt.Run | gt.NullRun] | None) -> float:
    """CPU seconds of `loop` (the tracker's start and final flush left out)."""
    if run_factory is None:
        start = time.process_time()
        loop(None)
        return time.process_time() - start
    run = run_factory()
    try:
        start = time.process_time()
        loop(run)
        return time.process_time() - start
    finally:
        run.close()


def _pairs(loop: Loop, factory: Callable[[], gt.Run | gt.NullRun], runs: int) -> list[float]:
    """CPU seconds tracked minus bare, per alternating pair."""
    out = []
    for _ in range(runs):
        bare = _cpu(loop, None)
        tracked = _cpu(loop, factory)
        out.append(tracked - bare)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="steps of the fast loops")
    parser.add_argument("--slow-steps", type=int, default=100, help="steps of 50 ms")
    parser.add_argument("--runs", type=int, default=5, help="bare/tracked pairs per case")
    args = parser.parse_args()
    torch.set_num_threads(1)
    batches = [torch.zeros(8, 4) for _ in range(args.steps)]
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    tmp = Path(tempfile.mkdtemp(prefix="gpulens-tracker-bench-"))

    def empty(run: gt.Run | gt.NullRun | None) -> None:
        if run is None:
            for _batch in batches:
                pass
            return
        for _batch in run.wrap(batches):
            run.step(samples=8)

    def model_step(run: gt.Run | gt.NullRun | None) -> None:
        loader = batches if run is None else run.wrap(batches)
        with torch.no_grad():
            for x in loader:
                model(x)
                opt.step()
                if run is not None:
                    run.step(samples=8)

    def slow(run: gt.Run | gt.NullRun | None) -> None:
        loader = batches[: args.slow_steps]
        for _x in loader if run is None else run.wrap(loader):
            time.sleep(0.05)
            if run is not None:
                run.step(samples=8)

    def tracked(**kw: object) -> Callable[[], gt.Run | gt.NullRun]:
        return lambda: gt.start("bench", tmp / "store", **kw)  # type: ignore[arg-type]

    def cell(values: list[float], unit: str, digits: int = 2) -> str:
        median = statistics.median(values)
        return f"{median:.{digits}f} {unit} ({min(values):.{digits}f} to {max(values):.{digits}f})"

    rows: list[tuple[str, str, str]] = []
    per_step = [d / args.steps * 1e6 for d in _pairs(empty, tracked(), args.runs)]
    rows.append(("wrap + step", cell(per_step, "µs"), "≤ 50 µs"))
    hooks = tracked(model=model, optimizer=opt)
    per_step = [d / args.steps * 1e6 for d in _pairs(model_step, hooks, args.runs)]
    rows.append(("wrap + step + hooks", cell(per_step, "µs"), "≤ 50 µs"))
    os.environ["GPULENS_DISABLE"] = "1"
    try:
        off = [d / args.steps * 1e6 for d in _pairs(empty, tracked(), args.runs)]
    finally:
        del os.environ["GPULENS_DISABLE"]
    rows.append(("disabled (GPULENS_DISABLE=1)", cell(off, "µs"), "nothing"))
    slow_runs = max(1, args.runs // 2)
    shares = [
        d / (args.slow_steps * 0.05) * 100
        for d in _pairs(slow, tracked(interval_s=1.0, flush_s=2.0), slow_runs)
    ]
    rows.append(("50 ms steps, writer and flushes included", cell(shares, "%", 3), "≤ 1 %"))
    print(f"| case | tracker CPU per step, median (range) of {args.runs} pairs | target |")
    print("|---|---|---|")
    for name, value, target in rows:
        print(f"| {name} | {value} | {target} |")
    print(f"\nfast loops: {args.steps} steps; 50 ms steps: {args.slow_steps} steps × {slow_runs}")


if __name__ == "__main__":
    main()
