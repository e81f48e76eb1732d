"""CPU used by `gpulens record` on the simulated 8-GPU node at 1 s ticks.

Starts `gpulens record` as a separate process (simulated collector, 1 host × 8 GPUs, 1 s
interval, default 10 s flush), lets it warm up, then measures its CPU time (user + system,
children included) over the measurement window with psutil. Target: ≤ 1 % of one core.

    python bench/bench_record_cpu.py [--seconds 120] [--warmup 10] [--runs 1]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system + t.children_user + t.children_system)


def one_run(seconds: float, warmup: float) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "gpulens.toml"
        cfg.write_text(
            f'data_dir = "{Path(tmp) / "store"}"\n[collect]\ninterval_seconds = 1.0\n'
            'collectors = ["simulated"]\n[simulated]\nhosts = 1\ngpus_per_host = 8\n'
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
        popen = subprocess.Popen(
            [sys.executable, "-m", "gpulens", "record", "--config", str(cfg)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        proc = psutil.Process(popen.pid)
        try:
            time.sleep(warmup)
            c0, t0 = cpu_seconds(proc), time.monotonic()
            startup = c0
            time.sleep(seconds)
            c1, t1 = cpu_seconds(proc), time.monotonic()
        finally:
            popen.send_signal(signal.SIGTERM)
            popen.wait(timeout=60)
        return (c1 - c0) / (t1 - t0), startup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    runs = [one_run(args.seconds, args.warmup) for _ in range(args.runs)]
    shares = [r[0] for r in runs]
    print("| measure | value |\n|---|---|")
    print(
        f"| steady CPU, median of {args.runs} × {args.seconds:g} s | "
        f"{statistics.median(shares) * 100:.2f} % of one core |"
    )
    print(
        f"| start-up CPU (imports, first ticks; first {args.warmup:g} s) | "
        f"{statistics.median(r[1] for r in runs):.2f} s |"
    )


if __name__ == "__main__":
    main()
