"""The agent beside a misbehaving dcgm-exporter endpoint: other collectors' ticks, RSS, SIGTERM.

    python bench/source_faults.py [--seconds 25] [--hosts 1] [--faults huge,slow,hang,garbage,dead]

For each fault, starts `gpulens agent` on loopback with the simulated collector (`--hosts` × 4
GPUs, 1 s interval, 1 s flushes) and the dcgm collector pointed at a local endpoint that
misbehaves: `huge` streams a 200 MB page as fast as it can, `slow` sends one line a second
and never ends, `hang` accepts and never answers, `garbage` answers 200 with 5,000 random
bytes, `dead` is a closed port; `none` runs the simulated collector alone. After `--seconds`
it GETs `/metrics` (5 s timeout), sends SIGTERM and waits up to 30 s. Prints, per fault: the
simulated GPUs' ticks that reached the store, the agent's peak RSS, the `/metrics` latency,
`gpulens_collector_up` and `gpulens_collector_errors_total` of dcgm, and the time from
SIGTERM to exit.
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import duckdb
import psutil

from agent_process import clean_env, free_port, wait_ready

HUGE_BYTES = 200 * 1024 * 1024
LINE = b'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-f00",Hostname="dcgm-node"} 50\n'


class FaultHandler(BaseHTTPRequestHandler):
    """GET /huge, /slow, /hang, /garbage: the faults of the module doc."""

    protocol_version = "HTTP/1.0"
    server: FaultServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        mode = self.path.strip("/")
        if mode == "hang":
            self.server.closing.wait()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        if mode == "garbage":
            body = random.Random(0).randbytes(5000)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.end_headers()
        try:
            if mode == "huge":
                chunk = LINE * (1024 * 1024 // len(LINE))
                for _ in range(HUGE_BYTES // len(chunk)):
                    if self.server.closing.is_set():
                        return
                    self.wfile.write(chunk)
            elif mode == "slow":
                while not self.server.closing.wait(1.0):
                    self.wfile.write(LINE)
                    self.wfile.flush()
        except OSError:
            return  # the client went away


class FaultServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), FaultHandler)
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.closing.set()
        self.shutdown()
        self.server_close()


def run(fault: str, server: FaultServer, seconds: float, hosts: int, tmp: Path) -> dict[str, str]:
    port = free_port()
    collectors = '["simulated"]' if fault == "none" else '["simulated", "dcgm"]'
    dcgm = (
        f"http://127.0.0.1:{free_port()}/metrics" if fault == "dead" else server.url + "/" + fault
    )
    data = tmp / fault
    config = tmp / f"{fault}.toml"
    config.write_text(
        f'data_dir = "{data}"\nhost = "bench"\n[collect]\ncollectors = {collectors}\n'
        f'[store]\nflush_seconds = 1.0\n[simulated]\nhosts = {hosts}\n[dcgm]\nurls = ["{dcgm}"]\n'
        f'[agent]\nlisten = "127.0.0.1:{port}"\n',
        encoding="utf-8",
    )
    env = clean_env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulens", "agent", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    row = {"fault": fault}
    try:
        wait_ready(url + "/healthz", time.monotonic() + 60, proc)
        started = time.time()
        agent = psutil.Process(proc.pid)
        peak = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            peak = max(peak, agent.memory_info().rss)
            time.sleep(0.5)
        row["peak RSS"] = f"{peak / 2**20:.0f} MB"
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
                text = r.read().decode()
            row["/metrics"] = f"{(time.monotonic() - t0) * 1000:.0f} ms"
            row["dcgm up / errors"] = " / ".join(
                _value(text, name) for name in ("gpulens_collector_up", "gpulens_collector_errors")
            )
        except OSError as exc:
            row["/metrics"] = f"failed: {type(exc).__name__}"
            row["dcgm up / errors"] = "-"
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
            row["SIGTERM to exit"] = f"{time.monotonic() - stopped:.1f} s"
        except subprocess.TimeoutExpired:
            row["SIGTERM to exit"] = "> 30 s (killed)"
        row["simulated ticks stored"] = str(_ticks(data, started, started + seconds))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return row


def _value(text: str, family: str) -> str:
    """The dcgm collector's sample of `family` (first endpoint-less series), or '-'."""
    for line in text.splitlines():
        if line.startswith(family) and 'collector="dcgm"' in line and "endpoint=" not in line:
            return line.rsplit(" ", 1)[1]
    return "-"


def _ticks(data: Path, start_s: float, end_s: float) -> int:
    files = [str(f) for f in (data / "gpu").rglob("*.parquet")]
    if not files:
        return 0
    ((count,),) = duckdb.sql(
        f"SELECT count(DISTINCT ts) FROM read_parquet({files!r}, union_by_name=true) "
        f"WHERE host = 'sim-node-0' AND epoch(ts) >= {start_s} AND epoch(ts) < {end_s}"
    ).fetchall()
    return int(count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--hosts", type=int, default=1, help="simulated hosts of 4 GPUs")
    parser.add_argument("--faults", default="none,huge,slow,hang,garbage,dead")
    args = parser.parse_args()
    server = FaultServer()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="gpulens-faults-") as tmp:
            for fault in args.faults.split(","):
                rows.append(run(fault, server, args.seconds, args.hosts, Path(tmp)))
                print(rows[-1], file=sys.stderr, flush=True)
    finally:
        server.stop()
    keys = list(dict.fromkeys(k for row in rows for k in row))
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(row.get(k, "-") for k in keys) + " |")


if __name__ == "__main__":
    main()
