"""The dashboard's Cluster page from a site's Prometheus (`gpulens agent --prometheus URL
--no-collect`): how long one read of the window takes, and the agent's memory, against
`gpulens fleet --prometheus` over the same window (issue 17 §2).

The cluster is bench/prometheus_report.py's (tests/promdata.py's dcgm-exporter series,
backfilled with promtool and cached in the temporary directory; copied here so that another
benchmark's Prometheus on the same TSDB does not hold its lock). For each run: `fleet
--prometheus --format json` as a whole process (wall, peak RSS from wait4); then the agent,
started with `--no-collect --cluster-every 30`: the wall time from its start to its first good
read (start-up included), the time of its second read (the end of the second read, as
`status.refreshed_ns` says, minus the end of the first and the 30 s wait between them), its
peak RSS (VmHWM) and its RSS once the first read is done and the heap handed back (VmRSS).
Prometheus runs on the same machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from promdata import ClusterSpec, Prometheus, free_port
from prometheus_report import CASES as REPORT_CASES
from prometheus_report import cached_tsdb, iso, run_measured

CASES: dict[str, ClusterSpec] = {
    "7d-64": ClusterSpec(nodes=8, gpus=8, queues=4, days=7, scrape_s=60, block_s=86400,
                         gap_node=None),
    "7d-512": REPORT_CASES["7d-512"][0],
}  # fmt: skip


def status_kb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])
    return float("nan")


def agent_read(url: str, window: list[str]) -> tuple[float, float, float, float]:
    """(s to the first good read, s between the first and second reads' ends, peak RSS MB,
    RSS MB after the first read) of an agent with --no-collect."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env["GPULENS_DATA_DIR"] = str(Path(tempfile.gettempdir()) / "gpulens-bench-no-store")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulens", "agent", "--prometheus", url, "--no-collect",
         "--cluster-every", "30", "--listen", f"127.0.0.1:{port}", *window],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    api = f"http://127.0.0.1:{port}/api/cluster"
    try:
        first = second = None
        rss_after = float("nan")
        while second is None:
            if proc.poll() is not None:
                raise SystemExit(f"the agent exited with {proc.returncode}")
            try:
                st = httpx.get(api, timeout=120).json()["status"]
            except httpx.HTTPError:
                st = {"refreshed_ns": None, "error": None}
            if st.get("error"):
                raise SystemExit(f"the agent's read failed: {st['error']}")
            done = st.get("refreshed_ns")
            if done is not None and first is None:
                first = (time.perf_counter() - t0, done)
                rss_after = status_kb(proc.pid, "VmRSS") / 1024
            elif done is not None and first is not None and done != first[1]:
                second = (done - first[1]) / 1e9 - 30.0  # the next read starts 30 s after
            time.sleep(0.5)
        peak = status_kb(proc.pid, "VmHWM") / 1024
        assert first is not None
        return first[0], second, peak, rss_after
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def bench(name: str, runs: int) -> None:
    spec = CASES[name]
    cached = cached_tsdb(name, spec)
    with tempfile.TemporaryDirectory(prefix="gpulens-bench-cluster-") as tmp:
        data = Path(tmp) / "data"
        shutil.copytree(cached / "data", data, ignore=shutil.ignore_patterns("lock"))
        with Prometheus(Path(tmp) / "home", data) as server:
            window = ["--since", iso(spec.start_s), "--until", iso(spec.end_s)]
            gpus = spec.nodes * spec.gpus
            print(f"\n{name}: {gpus} GPUs, {spec.days:g} days scraped at {spec.scrape_s} s, "
                  f"read at the automatic step")  # fmt: skip
            fleet_w, fleet_rss, first_w, second_w, peaks, afters = [], [], [], [], [], []
            for i in range(runs):
                wall, rss, _, cpu = run_measured(
                    ["fleet", "--prometheus", server.url, *window, "--format", "json"]
                )
                fleet_w.append(wall)
                fleet_rss.append(rss)
                first, second, peak, after = agent_read(server.url, window)
                first_w.append(first)
                second_w.append(second)
                peaks.append(peak)
                afters.append(after)
                print(f"  run {i + 1}: fleet {wall:.1f} s wall ({cpu:.1f} s CPU), peak RSS "
                      f"{rss:.0f} MB; agent: first read done {first:.1f} s after start, second "
                      f"read {second:.1f} s, peak RSS {peak:.0f} MB, RSS after the read "
                      f"{after:.0f} MB; load average {os.getloadavg()[0]:.1f}")  # fmt: skip
            med = statistics.median
            print(f"  medians of {runs}: fleet {med(fleet_w):.1f} s, {med(fleet_rss):.0f} MB; "
                  f"agent first read {med(first_w):.1f} s after start, a read "
                  f"{med(second_w):.1f} s, peak RSS {med(peaks):.0f} MB, RSS between reads "
                  f"{med(afters):.0f} MB")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=[*CASES, "all"], default="7d-64")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for name in CASES if args.case == "all" else [args.case]:
        bench(name, args.runs)


if __name__ == "__main__":
    main()
