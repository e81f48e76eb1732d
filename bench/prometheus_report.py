"""`gpulens fleet` and `gpulens report` with `--prometheus` over a backfilled cluster (issue 17
targets): 7 days × 512 GPUs scraped at 60 s, read at the automatic 900 s step (≤ 20 s wall,
≤ 1 GB peak RSS of gpulens), and 30 days × 1,024 GPUs at 5 min, read at 1 h (≤ 45 s).

The cluster is tests/promdata.py's (dcgm-exporter series, ten families per GPU, 8 GPUs a
node, jobs of one day with the `hpc_job` label, nodes in partitions), written as OpenMetrics
text and backfilled with `promtool tsdb create-blocks-from openmetrics` a few nodes at a time.
Backfilling takes minutes, so the TSDB is cached in the temporary directory
(`gpulens-bench-prometheus-<case>`, rebuilt when its spec changes). Debian's Prometheus then
serves it on loopback, and each command runs `--runs` times as a whole process: median and
spread of wall time and the process's peak RSS (`wait4`), with what it pulled. Prometheus
runs on the same machine and its CPU time is part of the wall time, as in the target.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from promdata import ClusterSpec, Prometheus, backfill

CASES = {
    "7d-512": (
        ClusterSpec(nodes=64, gpus=8, queues=4, days=7, scrape_s=60, block_s=86400,
                    gap_node=None),
        20.0,
    ),
    "30d-1024": (
        ClusterSpec(nodes=128, gpus=8, queues=8, days=30, scrape_s=300, block_s=86400,
                    gap_node=None),
        45.0,
    ),
}  # fmt: skip


def cached_tsdb(name: str, spec: ClusterSpec) -> Path:
    """The backfilled TSDB of `spec`, built once into the temporary directory."""
    root = Path(tempfile.gettempdir()) / f"gpulens-bench-prometheus-{name}"
    marker = root / "spec.json"
    wanted = json.dumps(dataclasses.asdict(spec), sort_keys=True)
    if marker.exists() and marker.read_text() == wanted:
        print(f"{name}: cached TSDB in {root}")
        return root
    if root.exists():
        subprocess.run(["rm", "-rf", str(root)], check=True)
    root.mkdir(parents=True)
    t = time.perf_counter()
    samples = backfill(spec, root / "data", root, nodes_per_file=8)
    elapsed = time.perf_counter() - t
    print(f"{name}: backfilled {samples:,} samples in {elapsed:.0f} s ({samples / elapsed:,.0f}/s)")
    marker.write_text(wanted)
    return root


def iso(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_measured(args: list[str]) -> tuple[float, float, str, float]:
    """(wall s, peak RSS MB, stdout, CPU s) of one whole gpulens process; the peak RSS and
    the CPU time (user + system) are the process's own, from wait4."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpulens", *args], stdout=out, stderr=err, env=env
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errors = out.read(), err.read()
    if proc.returncode != 0:
        raise SystemExit(f"gpulens {' '.join(args)} failed:\n{errors[-3000:]}")
    return wall, usage.ru_maxrss / 1024, text, usage.ru_utime + usage.ru_stime


def bench(name: str, runs: int, plans: bool = False) -> None:
    spec, target = CASES[name]
    root = cached_tsdb(name, spec)
    with Prometheus(root / "home", root / "data") as server:
        server_pid = server.proc.pid
        window = ["--since", iso(spec.start_s), "--until", iso(spec.end_s)]
        commands = {
            "fleet": ["fleet", "--prometheus", server.url, *window, "--format", "json"],
            "report": ["report", "--prometheus", server.url, *window, "--format", "json",
                       "--data-dir", str(root / "unused")],
        }  # fmt: skip
        if plans:  # the report with the fleet plans and a 7-day forecast (issue 18)
            commands["report --plans"] = [*commands["report"], "--plans", "--forecast", "7d"]
        gpus = spec.nodes * spec.gpus
        samples = gpus * 10 * round(spec.days * 86400 / spec.scrape_s)
        print(f"\n{name}: {gpus} GPUs, {spec.days:g} days at {spec.scrape_s} s, 10 families: "
              f"{samples:,} samples stored; target ≤ {target:g} s")  # fmt: skip
        for what, args in commands.items():
            walls, rss, cpus, prom_cpu = [], [], [], []
            for i in range(runs):
                before = cpu_s(server_pid)
                wall, peak, text, cpu = run_measured(args)
                walls.append(wall)
                rss.append(peak)
                cpus.append(cpu)
                prom_cpu.append(cpu_s(server_pid) - before)
                doc = json.loads(text)
                notes = doc.get("notes") or doc.get("sources") or []
                read = next((n for n in [*doc.get("sources", []), *notes] if "read from" in n), "")
                print(f"  {what} run {i + 1}: {wall:.1f} s wall, gpulens CPU {cpu:.1f} s, "
                      f"Prometheus CPU {prom_cpu[-1]:.1f} s, peak RSS {peak:.0f} MB; "
                      f"{read}")  # fmt: skip
                if "plans" in doc:
                    p = doc["plans"]
                    f, c = p.get("forecast") or {}, p.get("consolidation") or {}
                    o = p.get("offpeak") or {}
                    print(f"    plans: forecast {f.get('model')} (test MASE "
                          f"{f.get('test_mase')}, seasonal naive {f.get('baseline_mase')}); "
                          f"consolidation {len(c.get('moves', []))} moves freeing "
                          f"{c.get('gpus_freed')} GPUs of {c.get('jobs_considered')} jobs; "
                          f"off-peak peak {o.get('peak_gpus')} GPUs")  # fmt: skip
            spread = f"{min(walls):.1f}–{max(walls):.1f}"
            print(f"  {what}: median {statistics.median(walls):.1f} s wall ({spread} s), "
                  f"gpulens CPU {statistics.median(cpus):.1f} s, Prometheus CPU "
                  f"{statistics.median(prom_cpu):.1f} s, peak RSS {statistics.median(rss):.0f} MB "
                  f"(medians of {runs} runs); load average {os.getloadavg()[0]:.1f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=[*CASES, "all"], default="all")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--plans", action="store_true", help="also time `report --plans --forecast 7d`"
    )
    args = parser.parse_args()
    for name in CASES if args.case == "all" else [args.case]:
        bench(name, args.runs, args.plans)


if __name__ == "__main__":
    main()
