"""The agent's footprint on a node: RSS, CPU, threads and open files over time, as scraped.

    python bench/agent_footprint.py [--seconds 120] [--scrape-every 15] [--gpus 8]

Starts `gpulens agent` as a separate process on loopback (simulated collector, 1 host × 8 GPUs,
1 s interval, default flush), scrapes its `/metrics` every `--scrape-every` seconds as a
Prometheus server would, opens no dashboard page, and samples the process every 5 s: resident
memory, CPU (user + system) since the previous sample, threads and open file descriptors.
Resident memory is split into anonymous pages (the heap: Python objects, Arrow and DuckDB
buffers) and file pages (the shared libraries' code and data that were touched: DuckDB's and
pyarrow's are most of it). Prints one row per sample, then the CPU as a share of one core
over the whole window after `--warmup`, and the RSS growth from the first to the last sample.
Target (issue 15): RSS ≤ 150 MB and ≤ 1 % of one core, both flat.

`--dashboard` also GETs the dashboard's Fleet page data every 15 s, to show what a viewer adds.
`--hide pandas` runs the agent as if pandas were not installed (gpulens does not depend on it,
but pyarrow imports it at its first `pa.array` of a list when it is there: 36 MB here).
`--malloc-arenas N` sets MALLOC_ARENA_MAX=N for the agent (the agent caps them itself).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

from agent_process import clean_env, free_port, wait_ready

SAMPLE_EVERY = 5.0


def poll(url: str, every: float, stop: threading.Event, failures: list[str]) -> None:
    while not stop.wait(every):
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                r.read()
        except OSError as exc:
            failures.append(f"{url}: {exc}")


def rss_split(pid: int) -> tuple[int, int]:
    """(anonymous, file-backed) resident bytes of `pid` (Linux /proc/PID/status)."""
    fields = {}
    with Path(f"/proc/{pid}/status").open(encoding="ascii") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("RssAnon", "RssFile"):
                fields[name] = int(value.split()[0]) * 1024
    return fields.get("RssAnon", 0), fields.get("RssFile", 0)


def hide(root: Path, packages: list[str]) -> str:
    """A folder that, first on the path, makes importing each of `packages` fail as if it were
    not installed."""
    for name in packages:
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(
            f"raise ImportError('{name} is hidden by bench/agent_footprint.py --hide')\n"
        )
    return str(root)


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--scrape-every", type=float, default=15.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--dashboard", action="store_true", help="also poll the Fleet page's data")
    ap.add_argument("--hide", nargs="*", default=[], help="packages to run without")
    ap.add_argument("--malloc-arenas", type=int, default=None)
    ap.add_argument("--env", nargs="*", default=[], help="NAME=VALUE for the agent")
    args = ap.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "gpulens.toml"
        cfg.write_text(
            f'data_dir = "{Path(tmp) / "store"}"\n[collect]\ninterval_seconds = 1.0\n'
            f'collectors = ["simulated"]\n[simulated]\nhosts = 1\ngpus_per_host = {args.gpus}\n'
        )
        env = clean_env()
        if args.hide:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (hide(Path(tmp) / "hidden", args.hide), env.get("PYTHONPATH")) if p
            )
        if args.malloc_arenas is not None:
            env["MALLOC_ARENA_MAX"] = str(args.malloc_arenas)
        env.update(item.split("=", 1) for item in args.env)
        popen = subprocess.Popen(
            [sys.executable, "-m", "gpulens", "agent", "--config", str(cfg),
             "--listen", f"127.0.0.1:{port}"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        proc = psutil.Process(popen.pid)
        stop, failures = threading.Event(), []
        started = time.monotonic()
        try:
            wait_ready(base + "/metrics", started + 60)
            ready = time.monotonic() - started
            pollers = [(base + "/metrics", args.scrape_every)]
            if args.dashboard:
                pollers.append((base + "/api/fleet", 15.0))
            for url, every in pollers:
                threading.Thread(
                    target=poll, args=(url, every, stop, failures), daemon=True
                ).start()
            rows = []
            last_cpu, last_t = cpu_seconds(proc), time.monotonic()
            first_cpu = last_cpu
            while time.monotonic() - started < args.seconds:
                time.sleep(SAMPLE_EVERY)
                now, cpu = time.monotonic(), cpu_seconds(proc)
                rss, fds = proc.memory_info().rss, proc.num_fds()
                share = (cpu - last_cpu) / (now - last_t)
                anon, file = rss_split(popen.pid)
                rows.append((now - started, rss, anon, file, share, proc.num_threads(), fds))
                if now - started < args.warmup:
                    first_cpu = cpu
                last_cpu, last_t = cpu, now
        finally:
            stop.set()
            popen.send_signal(signal.SIGTERM)
            popen.wait(timeout=60)
    extra = "".join(
        [", without " + ", ".join(args.hide) if args.hide else "",
         f", MALLOC_ARENA_MAX={args.malloc_arenas}" if args.malloc_arenas is not None else "",
         "".join(f", {item}" for item in args.env)]
    )  # fmt: skip
    print(f"agent on {args.gpus} simulated GPUs, /metrics every {args.scrape_every:g} s"
          f"{', Fleet page every 15 s' if args.dashboard else ''}{extra}; answering after "
          f"{ready:.1f} s; "
          f"load average {os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print("| t s | RSS MB | anon MB | file MB | CPU % of a core | threads | open fds |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for t, rss, anon, file, cpu, threads, fds in rows:
        print(f"| {t:.0f} | {rss / 1e6:.0f} | {anon / 1e6:.0f} | {file / 1e6:.0f} | "
              f"{100 * cpu:.2f} | {threads} | {fds} |")  # fmt: skip
    after = [r for r in rows if r[0] >= args.warmup]
    window = rows[-1][0] - (after[0][0] - SAMPLE_EVERY)
    cpu_share = 100 * (last_cpu - first_cpu) / window
    growth = 100 * (rows[-1][1] / after[0][1] - 1)
    print(f"\nCPU after {args.warmup:g} s: {cpu_share:.2f} % of a core; RSS "
          f"{after[0][1] / 1e6:.0f} → {rows[-1][1] / 1e6:.0f} MB ({growth:+.1f} %); "
          f"failed requests: {len(failures)}")  # fmt: skip


if __name__ == "__main__":
    main()
