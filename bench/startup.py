"""Fixed cost of `gpulens trace`: interpreter, imports, argument parsing.

Median wall time of fresh processes, the cases alternating run by run (so load on a shared
machine falls on all of them alike): `gpulens trace --help`, `gpulens trace TINY --format json`
(the start-up plus the whole analysis of a small trace), the imports `gpulens trace` needs to
reach its work (entry point, parser, analyses, report: the fixed cost but for parsing the
arguments, well under a millisecond), `python -c 'import numpy'` and `python -c pass`; median
CPU time (user + system) beside, which load on the machine inflates less, and the peak RSS
(what a process of that command holds at least: `import numpy` is the floor of any trace
analysis). Target: `gpulens trace`'s fixed cost ≤ 0.15 s.

    python bench/startup.py [--runs 20] [--trace TINY.json.gz] [--module] [--src DIR]

`--module`: run `python -m gpulens` instead of the `gpulens` console script; `--src DIR`: import
gpulens from DIR (another checkout's src/, for a before/after comparison; implies --module).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SHARED = Path(
    os.environ.get("GPULENS_SHARED", Path(__file__).resolve().parents[1].parent / "shared")
)
TINY = (
    "data/traces/HolisticTraceAnalysis/tests/data/critical_path/alexnet/"
    "benchmark_result_2869224_1695835535_trace.json.gz"
)

# A checkout from before present/entry.py ran every command through the Typer app (present/cli.py)
IMPORTS = """import gpulens.present.reports.trace
try:
    import gpulens.present.entry, gpulens.present.trace_cli
except ImportError:
    import gpulens.present.cli
"""


def wall(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """Wall and CPU (user + system) seconds and peak RSS (MiB) of one run of `cmd`."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return took, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--trace", type=Path, default=SHARED / TINY)
    parser.add_argument("--module", action="store_true", help="python -m gpulens, not the script")
    parser.add_argument("--src", type=Path, help="import gpulens from this directory")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    script = Path(sys.executable).with_name("gpulens")
    if args.src is not None:
        env["PYTHONPATH"] = str(args.src.resolve())
    if args.module or args.src is not None or not script.exists():
        gpulens, shown = [sys.executable, "-m", "gpulens"], "python -m gpulens"
    else:
        gpulens, shown = [str(script)], "gpulens"
    size = args.trace.stat().st_size
    cases = {
        f"`{shown} trace --help`": [*gpulens, "trace", "--help"],
        f"`{shown} trace TINY --format json` ({size / 1024:.0f} KiB)": [
            *gpulens,
            "trace",
            str(args.trace),
            "--format",
            "json",
        ],
        "imports of `gpulens trace` (entry point, parser, analyses, report)": [
            sys.executable,
            "-c",
            IMPORTS,
        ],
        "`python -c 'import numpy'`": [sys.executable, "-c", "import numpy"],
        "`python -c pass`": [sys.executable, "-c", "pass"],
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    cpus: dict[str, list[float]] = {name: [] for name in cases}
    peaks: dict[str, list[float]] = {name: [] for name in cases}
    for cmd in cases.values():  # one warm-up run each: the page cache, .pyc files
        wall(cmd, env)
    for _ in range(args.runs):
        for name, cmd in cases.items():
            took, cpu, peak = wall(cmd, env)
            times[name].append(took)
            cpus[name].append(cpu)
            peaks[name].append(peak)
    load = os.getloadavg()[0]
    print(f"{args.runs} runs each, alternating; load average {load:.1f}; TINY = {args.trace.name}")
    print()
    print("| command | median wall s | min wall s | median CPU s | median peak RSS MiB |")
    print("|---|---|---|---|---|")
    for name, ts in times.items():
        cpu, peak = statistics.median(cpus[name]), statistics.median(peaks[name])
        print(f"| {name} | {statistics.median(ts):.3f} | {min(ts):.3f} | {cpu:.3f} | {peak:.1f} |")


if __name__ == "__main__":
    main()
