"""`report`, `fleet` and `ingest --prometheus` against Debian's Prometheus on loopback.

- 30 days of a 4-node, 8-GPU, 2-partition cluster backfilled with `promtool tsdb
  create-blocks-from openmetrics` (tests/promdata.py): the report, its `--by queue` breakdown,
  the fleet summary and an ingested store agree with the GPU-hours known by construction
  (capacity, allocated, idle-allocated; a 12-hour exporter gap is no data, not idle).
- two simulated gpulens agents scraped every second (hosts relabelled per scrape job);
- a replayer serving the real dcgm-exporter pages of the shared data with values that change
  every scrape: the report's per-GPU duty cycle is the mean of what was served.

Everything starts and stops inside the tests. Skipped without /usr/bin/prometheus and
promtool, except in CI (`.ci/run` installs them).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import promdata
from gpulens.app import prometheus as prom_app
from gpulens.config import load_config
from promdata import PROMETHEUS, PROMTOOL, ClusterSpec, Prometheus, backfill, truth

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()) and not os.environ.get("CI"),
        reason="needs Prometheus and promtool (Debian package `prometheus`; .ci/run installs it)",
    ),
]
GPULENS = [sys.executable, "-m", "gpulens"]
SPEC = ClusterSpec()
SINCE, UNTIL = "2026-10-01T00:00:00Z", "2026-10-31T00:00:00Z"
NS = 1_000_000_000


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}


def _run(*args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [*GPULENS, *args], capture_output=True, text=True, env=_env(), timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout)) if proc.stdout.strip().startswith("{") else {}


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prometheus serving the backfilled 30-day cluster (no scrapes)."""
    home = tmp_path_factory.mktemp("prom-history")
    written = backfill(SPEC, home / "data", home)
    assert written > 200_000
    with Prometheus(home, home / "data") as server:
        yield server.url


def test_report_matches_the_cluster_built(history: str, tmp_path: Path) -> None:
    doc = _run(
        "report", "--prometheus", history, "--since", SINCE, "--until", UNTIL,
        "--format", "json", "--by", "queue", "--data-dir", str(tmp_path / "unused"),
    )  # fmt: skip
    want = truth(SPEC, 3600)
    assert doc["step_s"] == 3600  # the automatic step of a 30-day report
    totals = doc["totals"]
    assert totals["gpus"] == want.gpus == 8
    assert totals["gpu_hours"] == pytest.approx(want.gpu_hours, abs=1e-6)
    assert totals["allocated_gpu_hours"] == pytest.approx(want.allocated_hours, abs=1e-6)
    # idle-allocated time is the waste: the idle jobs' hours, and nothing else
    assert totals["wasted_gpu_hours"] == pytest.approx(want.idle_allocated_hours, abs=1e-6)
    idle = [f for f in doc["findings"] if f["rule_id"] == "idle_allocated"]
    assert sum(f["impact"]["wasted_gpu_hours"] for f in idle) == pytest.approx(
        want.idle_allocated_hours, abs=1e-6
    )
    assert {g["host"] for g in doc["gpus"]} == want.hosts
    by = {r["queue"]: r for r in doc["groups"]["rows"]}
    assert set(by) == set(want.by_queue)
    for queue, (hours, allocated) in want.by_queue.items():
        assert by[queue]["gpu_hours"] == pytest.approx(hours, abs=1e-6)
        assert by[queue]["allocated_gpu_hours"] == pytest.approx(allocated, abs=1e-6)
    # the 12-hour gap of one node is no data, said once, never idle time
    gap_hours = SPEC.gpus * (SPEC.gap_blocks * SPEC.block_s / 3600 - 1)
    assert any(f"{gap_hours:g} GPU-hours without data" in n for n in doc["notes"])
    assert any("GPU series from dcgm-exporter" in n for n in doc["notes"])


def test_fleet_summary_matches_the_cluster_built(history: str) -> None:
    doc = _run("fleet", "--prometheus", history, "--since", SINCE, "--until", UNTIL,
               "--format", "json")  # fmt: skip
    want = truth(SPEC, 3600)
    usage = {r["queue"]: r for r in doc["usage"]["by_queue"]}
    for queue, (hours, allocated) in want.by_queue.items():
        assert usage[queue]["gpu_hours"] == pytest.approx(hours, abs=1e-6)
        assert usage[queue]["allocation"] == pytest.approx(allocated / hours, abs=1e-9)
    # the per-step sequence: GPUs reporting and held in each step, counted from the rule
    queues = {q["name"]: q for q in doc["queues"]}
    for queue in want.by_queue:
        nodes = [n for n in range(SPEC.nodes) if SPEC.queue(n) == queue]
        total = held = 0
        for block in range(SPEC.blocks):
            for n in nodes:
                if SPEC.observed(n, block):
                    total += SPEC.gpus * SPEC.block_s // 3600
                    held += sum(SPEC.state(n, g, block) != "free" for g in range(SPEC.gpus)) * (
                        SPEC.block_s // 3600
                    )
        assert queues[queue]["allocation"] == pytest.approx(held / total, abs=1e-9)
    assert doc["pooled_allocation"] == pytest.approx(
        sum(q["in_use_gpu_hours"] for q in doc["queues"])
        / sum(q["gpu_hours"] for q in doc["queues"]),
        abs=1e-9,
    )


def test_ingest_then_report_on_the_store(history: str, tmp_path: Path) -> None:
    """A week copied at 900 s into a store reports the same hours as the construction."""
    store = tmp_path / "store"
    since, until = "2026-10-08T00:00:00Z", "2026-10-15T00:00:00Z"
    proc = subprocess.run(
        [
            *GPULENS,
            "ingest",
            "--prometheus",
            history,
            "--since",
            since,
            "--until",
            until,
            "--step",
            "900",
            "--data-dir",
            str(store),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "7 day(s)" in proc.stdout
    doc = _run("report", "--data-dir", str(store), "--since", since, "--until", until,
               "--step", "3600", "--format", "json")  # fmt: skip
    lo = SPEC.start_s + 7 * 86400
    want = truth(SPEC, 900, lo, lo + 7 * 86400)  # the store holds one reading per 900 s
    assert doc["totals"]["gpu_hours"] == pytest.approx(want.gpu_hours, abs=1e-6)
    assert doc["totals"]["allocated_gpu_hours"] == pytest.approx(want.allocated_hours, abs=1e-6)


def test_a_range_without_gpu_series_is_one_clear_error(history: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            *GPULENS,
            "report",
            "--prometheus",
            history,
            "--since",
            "2026-01-01T00:00:00Z",
            "--until",
            "2026-01-02T00:00:00Z",
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert proc.returncode != 0
    assert "no GPU series in this range" in proc.stderr
    assert "Traceback" not in proc.stderr


# -- live scrapes ------------------------------------------------------------------------------


def _agent(tmp: Path, seed: int) -> tuple[subprocess.Popen[str], str]:
    port = promdata.free_port()
    config = tmp / "gpulens.toml"
    config.write_text(
        f'data_dir = "{tmp / "data"}"\n[collect]\ncollectors = ["simulated"]\n'
        f'[simulated]\nhosts = 1\nseed = {seed}\n[agent]\nlisten = "127.0.0.1:{port}"\n',
        encoding="utf-8",
    )
    proc = subprocess.Popen(
        [*GPULENS, "agent", "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        try:
            if "gpulens_gpu_util_ratio{" in httpx.get(url + "/metrics", timeout=2).text:
                return proc, f"127.0.0.1:{port}"
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the agent did not come up"
        time.sleep(0.3)


def test_report_on_simulated_agents_scraped_live(tmp_path: Path) -> None:
    agents = []
    for name, seed in (("a", 1), ("b", 2)):
        (tmp_path / name).mkdir()
        agents.append(_agent(tmp_path / name, seed))
    try:
        home = tmp_path / "prom"
        jobs = [
            {
                "job_name": f"agent-{name}",
                "static_configs": [{"targets": [target]}],
                "metric_relabel_configs": [
                    {
                        "source_labels": ["Hostname"],
                        "regex": "(.*)",
                        "target_label": "Hostname",
                        "replacement": f"{name}-$1",
                    },
                ],
            }
            for name, (_, target) in zip("ab", agents, strict=True)
        ]
        config = {"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}
        with Prometheus.with_config(home, config) as live:
            start = time.time()
            time.sleep(15)
            end = time.time()
            cfg = load_config(None, env={}, overrides={"data_dir": str(tmp_path / "unused")})
            view = prom_app.report(
                cfg, live.url, int(start * NS), int(end * NS), int(end * NS), step_s=5
            )
    finally:
        for proc, _ in agents:
            proc.terminate()
            proc.wait(30)
    hosts = {g["host"] for g in view.gpus}
    assert hosts == {"a-sim-node-0", "b-sim-node-0"}
    assert len(view.gpus) == 8  # two agents, four simulated GPUs each
    assert any("GPU series from gpulens agents" in n for n in view.notes)
    assert view.totals["allocated_gpu_hours"] > 0  # the simulated jobs hold GPUs
    assert all(g.get("mean_duty") is not None for g in view.gpus)


# -- a replayer of real dcgm-exporter pages ----------------------------------------------------

PAGES = (
    "data/telemetry/cncf_k8s-ai-conformance/v1.35/ericsson-ccd/accelerator_metrics.prom",
    "data/telemetry/cncf_k8s-ai-conformance/v1.35/rafay/accelator_metrics.prom",
)


# GPU_UTIL's factor, one step per scrape of a page: every scrape serves another value. The
# report reads the range at a 1 s step, the scrape interval, so each point holds about one
# scrape; the expected mean is worked out from the samples Prometheus stored, with their own
# times, since a late scrape moves a value across a point's edge
CYCLE = (0.2, 0.9, 0.4, 1.0, 0.3, 0.7, 0.5)


class _Replayer:
    """Serves real dcgm-exporter pages, GPU_UTIL scaled by a factor that changes every
    request (CYCLE); records (time, GPU_UTIL served) per page."""

    def __init__(self, pages: list[str]) -> None:
        self.pages = pages
        self.served: dict[int, list[tuple[float, float]]] = {i: [] for i in range(len(pages))}
        replayer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                index = int(self.path.strip("/").split("/")[0])
                body = replayer.page(index).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def page(self, index: int) -> str:
        factor = CYCLE[len(self.served[index]) % len(CYCLE)]
        out = []
        for line in self.pages[index].splitlines():
            if line.startswith("DCGM_FI_DEV_GPU_UTIL{"):
                head, value = line.rsplit(" ", 1)
                util = round(float(value) * factor, 3) if float(value) else round(50 * factor, 3)
                self.served[index].append((time.time(), util))
                line = f"{head} {util}"
            out.append(line)
        return "\n".join(out) + "\n"

    def close(self) -> None:
        self.server.shutdown()


def test_report_on_replayed_dcgm_exporter_pages(shared: Path, tmp_path: Path) -> None:
    pages = [(shared / p).read_text() for p in PAGES]
    replayer = _Replayer(pages)
    try:
        targets = [f"127.0.0.1:{replayer.port}"]
        config = {
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": f"dcgm-{i}",
                    "metrics_path": f"/{i}/metrics",
                    "static_configs": [{"targets": targets}],
                }
                for i in range(len(pages))
            ],
        }
        with Prometheus.with_config(tmp_path / "prom", config) as live:
            time.sleep(3)
            start = time.time()
            time.sleep(15)
            # on a loaded machine Prometheus may scrape late: wait for 18 scrapes of each page
            # since the start (at most a minute), so the window below holds at least 10
            deadline = start + 60
            while (
                time.time() < deadline
                and min(sum(t >= start for t, _ in got) for got in replayer.served.values()) < 18
            ):
                time.sleep(0.5)
            end = time.time()
            cfg = load_config(None, env={}, overrides={"data_dir": str(tmp_path / "unused")})
            view = prom_app.report(cfg, live.url, int(start * NS), int(end * NS), 0, step_s=1)
            # the raw samples Prometheus stored, each with the time of its scrape
            lo, hi = math.floor(start), math.floor(end)
            raw = httpx.get(
                f"{live.url}/api/v1/query",
                params={"query": f"DCGM_FI_DEV_GPU_UTIL[{hi - lo + 5}s]", "time": hi},
            ).json()["data"]["result"]
    finally:
        replayer.close()
    assert len(view.gpus) == 2
    assert {g["gpu_model"] for g in view.gpus} == {"Tesla T4"}
    for index, page in enumerate(pages):
        host = next(
            line.split('Hostname="')[1].split('"')[0]
            for line in page.splitlines()
            if line.startswith("DCGM_FI_DEV_GPU_UTIL{")
        )
        (gpu,) = [g for g in view.gpus if g["host"] == host]
        (series,) = [r["values"] for r in raw if r["metric"].get("Hostname") == host]
        samples = [(float(t), float(v) / 100) for t, v in series if lo - 1 <= float(t) <= hi]
        served = {u / 100 for _, u in replayer.served[index]}
        assert {v for _, v in samples} <= served  # Prometheus stored what the page served
        assert len({v for _, v in samples}) == len(CYCLE)  # the values changed scrape by scrape
        # the report's point at t is the mean of the samples in [t - 1 s, t] (avg_over_time at a
        # 1 s step), for t from lo + 1 to hi; its mean duty is the mean of those points
        points = [[v for ts, v in samples if t - 1 <= ts <= t] for t in range(lo + 1, hi + 1)]
        means = [sum(p) / len(p) for p in points if p]
        assert len(means) >= 10
        assert gpu["mean_duty"] == pytest.approx(sum(means) / len(means), abs=0.005)
