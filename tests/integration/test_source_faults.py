"""A real `gpulens agent` beside dcgm-exporter URLs that fail in every way (a dead port,
garbage, HTTP 500, a hang, one line a second, an endless page): the other collectors keep their
ticks, memory stays bounded, every failure shows in /metrics per endpoint, and SIGTERM ends the
agent within its 5 s bound. `gpulens doctor` gives each check a deadline and calls an endpoint
working only when it serves GPU series."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.faults import FaultServer, dead_url, free_port, wait_healthy

from gpulens.app.agent import SHUTDOWN_S

GPULENS = [sys.executable, "-m", "gpulens"]
T4 = "data/telemetry/cncf_k8s-ai-conformance/v1.35/ericsson-ccd/accelerator_metrics.prom"
RUN_S = 8.0


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    out["COLUMNS"] = "400"
    return out


@pytest.fixture(scope="module")
def server(shared: Path) -> Iterator[FaultServer]:
    with FaultServer(page=(shared / T4).read_text(encoding="utf-8"), slow_every_s=1.0) as s:
        yield s


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def test_failing_dcgm_urls_stall_nothing_and_show_in_metrics(
    server: FaultServer, tmp_path: Path
) -> None:
    urls = [dead_url()] + [server.url(m) for m in ("garbage", "error", "hang", "slow", "huge")]
    port = free_port()
    config = tmp_path / "gpulens.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\nhost = "faults"\n'
        '[collect]\ncollectors = ["simulated", "dcgm"]\n'
        "[store]\nflush_seconds = 1.0\n[simulated]\nhosts = 1\n"
        f"[dcgm]\nurls = {urls!r}\ntimeout_seconds = 1.0\nmax_page_bytes = 1048576\n"
        f'[agent]\nlisten = "127.0.0.1:{port}"\n'.replace("'", '"'),
        encoding="utf-8",
    )
    proc = subprocess.Popen(
        [*GPULENS, "agent", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url)
        started = time.time()
        agent = psutil.Process(proc.pid)
        baseline = peak = agent.memory_info().rss
        while time.time() - started < RUN_S:
            peak = max(peak, agent.memory_info().rss)
            time.sleep(0.25)
        t0 = time.monotonic()
        text = httpx.get(url + "/metrics", timeout=5).text
        assert time.monotonic() - t0 < 1.0
        got = samples(text)

        # the dcgm collector is down and counts its failures, each URL on its own
        dcgm = frozenset({("collector", "dcgm")})
        assert got[("gpulens_collector_up", dcgm)] == 0.0
        assert got[("gpulens_collector_errors_total", dcgm)] >= 1
        for u in urls:
            ep = frozenset({("collector", "dcgm"), ("endpoint", u)})
            assert got[("gpulens_collector_endpoint_up", ep)] == 0.0, u
            assert got[("gpulens_collector_endpoint_errors_total", ep)] >= 1, u
        # the simulated collectors were never held up
        sim = frozenset({("collector", "nvml@sim-node-0")})
        assert got[("gpulens_collector_up", sim)] == 1.0
        assert got[("gpulens_collector_timeouts_total", sim)] == 0.0
        assert time.time() - got[("gpulens_collector_last_success_timestamp_seconds", sim)] < 3
        # an endless page is cut off at the byte limit, never held
        assert peak - baseline < 150 * 2**20, f"RSS grew by {(peak - baseline) / 2**20:.0f} MB"

        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - stopped
        assert proc.returncode == 0, stderr
        assert took < SHUTDOWN_S, f"SIGTERM took {took:.1f} s"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    files = [str(f) for f in (tmp_path / "data" / "gpu").rglob("*.parquet")]
    ((ticks,),) = duckdb.sql(
        f"SELECT count(DISTINCT ts) FROM read_parquet({files!r}, union_by_name=true) "
        f"WHERE host = 'sim-node-0' AND epoch(ts) >= {started} AND epoch(ts) < {started + RUN_S}"
    ).fetchall()
    assert ticks >= RUN_S - 1  # one tick a second, whatever the dcgm URLs did


def doctor(tmp_path: Path, urls: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    config = tmp_path / "doctor.toml"
    config.write_text(f"[dcgm]\nurls = {urls!r}\n".replace("'", '"'), encoding="utf-8")
    started = time.monotonic()
    proc = subprocess.run(
        [*GPULENS, "doctor", "--config", str(config)],
        capture_output=True,
        text=True,
        env={**env(), "COLUMNS": "3000"},  # one table row per source, nothing cut
        timeout=60,
    )
    return proc, time.monotonic() - started


def test_doctor_has_a_deadline_and_wants_gpu_series(server: FaultServer, tmp_path: Path) -> None:
    proc, took = doctor(tmp_path, [server.url("slow"), server.url("garbage")])
    assert proc.returncode == 0, proc.stderr
    assert took < 15, f"doctor took {took:.1f} s"
    (row,) = [line for line in proc.stdout.splitlines() if line.lstrip("│ ").startswith("dcgm")]
    assert " no " in row
    assert "no complete page within 2 s" in row  # the slow URL, cut at its deadline
    assert "not a sample line" in row  # 5,000 random bytes are not an exposition

    proc, _ = doctor(tmp_path, [server.url("ok")])
    (row,) = [line for line in proc.stdout.splitlines() if line.lstrip("│ ").startswith("dcgm")]
    assert " yes " in row and "1 GPU(s)" in row
