"""`gpulens fleet --forecast 7d --plans --quotas` over 16 queues × 30 days at 1 min (issue 18
target: ≤ 10 s wall as a whole process, statsmodels' import and first fits included).

Generates one sequence CSV per queue (``<dir>/<queue>/sequence.csv``: ISO 8601 minute, total,
in use, pending GPUs) with a daily and a weekly cycle (office hours on weekdays, quiet nights
and weekends) and noise, half the queues batch work, and a TOML quota table; runs the whole
command `--runs` times and prints wall time, CPU time (user + system) and peak RSS (median and
range), the model chosen and its test-window MASE beside seasonal naive's, and the plans'
figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

START = np.datetime64("2026-10-05T00:00:00")  # a Monday


def generate(root: Path, queues: int, days: int, seed: int = 18) -> list[Path]:
    """One sequence CSV per queue and quotas.toml; returns the CSV paths."""
    rng = np.random.default_rng(seed)
    minutes = days * 1440
    t = np.arange(minutes)
    stamps = np.datetime_as_string(START + t.astype("timedelta64[m]"), unit="s")
    hour, weekday = (t // 60) % 24, (t // 1440) % 7
    office = (weekday < 5) & (hour >= 9) & (hour < 18)
    paths, quotas = [], []
    for q in range(queues):
        total = int(rng.choice([8, 16, 32, 64, 128]))
        batch = q % 2 == 1
        level = np.where(office, 0.9, 0.35 if batch else 0.15) * total
        noisy = level + rng.normal(0, 0.04 * total, minutes)
        in_use = np.clip(np.round(noisy), 0, total).astype(int)
        pending = np.round(np.maximum(noisy - total, 0) + np.where(office & batch, 0.2 * total, 0))
        name = f"{'batch' if batch else 'team'}{q:02d}"
        path = root / name / "sequence.csv"
        path.parent.mkdir(parents=True)
        with path.open("w") as f:
            f.write("minute,gpus,busy,waiting\n")
            f.writelines(
                f"{s}Z,{total},{u},{int(p)}\n"
                for s, u, p in zip(stamps.tolist(), in_use.tolist(), pending.tolist(), strict=True)
            )
        paths.append(path)
        quotas.append(f"[quotas.{name}]\ngpus = {0.7 * total:g}\n")
    (root / "quotas.toml").write_text("\n".join(quotas))
    return paths


def run_once(root: Path, paths: list[Path]) -> tuple[float, float, float, dict[str, object]]:
    """Wall seconds, CPU seconds, peak RSS (MiB) and the JSON of one `gpulens fleet`."""
    args = [sys.executable, "-m", "gpulens", "fleet"]
    for p in paths:
        args += ["--sequence", str(p)]
    args += [
        "--map", "time=minute,total=gpus,in_use=busy,pending=waiting",
        "--queue-from", "parent-dir", "--quotas", str(root / "quotas.toml"),
        "--forecast", "7d", "--plans",
        *[x for p in paths if p.parent.name.startswith("batch")
          for x in ("--batch-queue", p.parent.name)],
        "--format", "json",
    ]  # fmt: skip
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status):
            err.seek(0)
            raise SystemExit(f"gpulens fleet failed: {err.read()[-600:]!r}")
        out.seek(0)
        return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, json.loads(out.read())


def breakdown(root: Path, paths: list[Path]) -> None:
    """CPU seconds of each part, in this process: sources and quotas, statsmodels' import,
    forecast and plans."""
    t0 = time.process_time()
    from gpulens.app.fleet import FleetSources, run_fleet
    from gpulens.app.fleet_plans import run_plans

    view = run_fleet(
        FleetSources(
            sequences=paths,
            maps=["time=minute,total=gpus,in_use=busy,pending=waiting"],
            queue_from="parent-dir",
            quotas=[root / "quotas.toml"],
        )
    )
    t1 = time.process_time()
    import statsmodels.tsa.api  # noqa: F401

    t2 = time.process_time()
    run_plans(view, 168, True, [p.parent.name for p in paths if p.parent.name.startswith("batch")])
    t3 = time.process_time()
    print(f"CPU s: sources, grid, summary, quotas {t1 - t0:.2f}; statsmodels import "
          f"{t2 - t1:.2f}; forecast and plans {t3 - t2:.2f}")  # fmt: skip


def _stat(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queues", type=int, default=16)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--breakdown", action="store_true", help="also time the parts in-process")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = generate(root, a.queues, a.days)
        rows = [run_once(root, paths) for _ in range(a.runs)]
        if a.breakdown:
            breakdown(root, paths)
    walls, cpus, rss = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
    doc = rows[-1][3]
    f, o, q = doc["forecast"], doc["offpeak"], doc["quotas"]
    assert isinstance(f, dict) and isinstance(o, dict) and isinstance(q, dict)
    print(
        f"{a.queues} queues x {a.days} days at 1 min, {a.runs} runs, load {os.getloadavg()[0]:.1f}"
    )
    print("| figure | median (range) |")
    print("|---|---|")
    print(f"| wall, s (target <= 10) | {_stat(walls)} |")
    print(f"| CPU user+system, s | {_stat(cpus)} |")
    print(f"| peak RSS, MiB | {_stat(rss)} |")
    print(f"forecast: model {f['model']}, test MASE {f['test_mase']:.3f}, "
          f"{f['baseline']} {f['baseline_mase']:.3f}")  # fmt: skip
    print(f"validation MASE: {f['validation_mase']}")
    print(f"off-peak: peak {o['peak_gpus']:.1f} GPUs -> {o['level_gpus']:.1f} GPUs, "
          f"{o['movable_gpu_hours_per_week']:.0f} GPU-h/week movable")  # fmt: skip
    starved = sum(r["starved_gpu_hours"] for r in q["queues"])
    print(f"quotas: starved {starved:.0f} GPU-h, Jain allocation "
          f"{q['fairness']['jain_allocation']:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
