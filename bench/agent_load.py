"""The agent's routes under concurrent clients while it records.

    python bench/agent_load.py [--clients 16] [--seconds 30] [--history-hours 6]

Builds a store of `--history-hours` of the simulated fleet (`gpulens demo --no-serve`), starts
`gpulens agent` on it (recording the simulated fleet at 1 s meanwhile, on loopback), then, per
route in turn, runs `--clients` client threads that request it back to back for `--seconds`:
`/metrics` as Prometheus servers would, and the dashboard's API routes as that many viewers
refreshing. Prints, per route, the requests served, requests per second, the latency median,
99th percentile and maximum, and failed requests. The clients share the machine with the agent
(2 cores here), as a scraper on the node would.
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from agent_process import clean_env, free_port, wait_ready

ROUTES = ("/metrics", "/api/now", "/api/fleet", "/api/findings", "/api/workloads", "/api/people")


def client(port: int, path: str, until: float, latencies: list[float], errors: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while time.monotonic() < until:
        t0 = time.perf_counter()
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                errors.append(f"{path}: HTTP {response.status}")
                continue
        except (OSError, http.client.HTTPException) as exc:
            errors.append(f"{path}: {exc}")
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            continue
        latencies.append(time.perf_counter() - t0)
    conn.close()


def load(port: int, path: str, clients: int, seconds: float) -> tuple[list[float], list[str]]:
    latencies: list[float] = []
    errors: list[str] = []
    until = time.monotonic() + seconds
    threads = [
        threading.Thread(target=client, args=(port, path, until, latencies, errors))
        for _ in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, errors


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--history-hours", type=float, default=6.0)
    ap.add_argument("--routes", nargs="*", default=list(ROUTES))
    args = ap.parse_args()
    gpulens = [sys.executable, "-m", "gpulens"]
    env = clean_env()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "store"
        t0 = time.monotonic()
        subprocess.run(
            [*gpulens, "demo", "--no-serve", "--speed", "0", "--data-dir", str(data),
             "--duration", str(args.history_hours * 3600)],
            env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        built = time.monotonic() - t0
        cfg = Path(tmp) / "gpulens.toml"
        cfg.write_text(
            f'data_dir = "{data}"\n[collect]\ninterval_seconds = 1.0\ncollectors = ["simulated"]\n'
        )
        port = free_port()
        agent = subprocess.Popen(
            [*gpulens, "agent", "--config", str(cfg), "--listen", f"127.0.0.1:{port}"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_ready(f"http://127.0.0.1:{port}/metrics", time.monotonic() + 120)
            time.sleep(5)  # a few ticks recorded
            rows = []
            for path in args.routes:
                latencies, errors = load(port, path, args.clients, args.seconds)
                rows.append((path, latencies, errors))
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=60)
    print(f"{args.clients} clients per route for {args.seconds:g} s each, agent recording 12 "
          f"simulated GPUs at 1 s over {args.history_hours:g} h of history (built in "
          f"{built:.0f} s); load average {os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print("| route | requests | req/s | p50 ms | p99 ms | max ms | failed |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for path, lat, errors in rows:
        if not lat:
            print(f"| `{path}` | 0 | 0 | - | - | - | {len(errors)} |")
            continue
        print(f"| `{path}` | {len(lat)} | {len(lat) / args.seconds:.1f} | "
              f"{1000 * statistics.median(lat):.0f} | {1000 * pct(lat, 0.99):.0f} | "
              f"{1000 * max(lat):.0f} | {len(errors)} |")  # fmt: skip
    for path, _, errors in rows:
        for e in sorted(set(errors))[:3]:
            print(f"- {path}: {e}")


if __name__ == "__main__":
    main()
