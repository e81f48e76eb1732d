"""Alerts delivered: the rules `gpulens rules` writes, loaded into Debian's Prometheus on
loopback, fire on an idle GPU; Prometheus sends the alert to Debian's Alertmanager, which
posts it to `gpulens alerts receive`. The alert that arrives names the job, the user, the GPU
and the node.

The series are the agent's (`gpulens_gpu_state`, one 0/1 series per state), or
dcgm-exporter's (`gpulens rules --dcgm`: memory held with GPU_UTIL at 0), served by a small
exporter in the test: GPU 0 of node-a idle while job 4242 of alice holds it, GPU 1 working.
The idle alert's `for:` is 2 s (`gpulens rules --idle-for 2s`) and every interval is 1 s, so
the alert arrives within seconds."""

from __future__ import annotations

import json
import shutil
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

from promdata import PROMETHEUS, Prometheus, free_port

ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
pytestmark = pytest.mark.skipif(
    not (Path(PROMETHEUS).exists() and Path(ALERTMANAGER).exists()),
    reason="needs Debian's prometheus and prometheus-alertmanager",
)

IDLE_UUID = "GPU-5d3c0a1e-0000-4000-8000-000000000000"
BUSY_UUID = "GPU-5d3c0a1e-0001-4000-8000-000000000000"
STATES = ("idle_allocated", "compute_tensor")


def _agent_page() -> bytes:
    """The agent's series: one 0/1 `gpulens_gpu_state` series per state."""
    lines = ["# TYPE gpulens_gpu_state gauge"]
    for uuid, gpu, job, user, now in _GPUS:
        for state in STATES:
            labels = (f'gpu="{gpu}",UUID="{uuid}",Hostname="node-a",modelName="NVIDIA H100",'
                      f'job_id="{job}",user="{user}",state="{state}"')  # fmt: skip
            lines.append(f"gpulens_gpu_state{{{labels}}} {1 if state == now else 0}")
    return ("\n".join(lines) + "\n").encode()


def _dcgm_page() -> bytes:
    """dcgm-exporter's series on a Slurm node (`hpc_job`; `user` added by the site)."""
    lines = []
    for family, idle, busy in (("DCGM_FI_DEV_FB_USED", 20480, 40960),
                               ("DCGM_FI_DEV_GPU_UTIL", 0, 95)):  # fmt: skip
        lines.append(f"# TYPE {family} gauge")
        for uuid, gpu, job, user, now in _GPUS:
            labels = (f'gpu="{gpu}",UUID="{uuid}",Hostname="node-a",modelName="NVIDIA H100",'
                      f'hpc_job="{job}",user="{user}"')  # fmt: skip
            lines.append(f"{family}{{{labels}}} {idle if now == 'idle_allocated' else busy}")
    return ("\n".join(lines) + "\n").encode()


_GPUS = ((IDLE_UUID, "0", "4242", "alice", "idle_allocated"),
         (BUSY_UUID, "1", "4243", "bob", "compute_tensor"))  # fmt: skip
PAGES = {"agent": (_agent_page, [], "gpulens.rules.yml"),
         "dcgm": (_dcgm_page, ["--dcgm"], "gpulens-dcgm.rules.yml")}  # fmt: skip


@pytest.fixture(params=sorted(PAGES))
def exporter(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    kind = request.param
    body = PAGES[kind][0]()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield kind, f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not become ready:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_idle_gpu_alert_reaches_the_receiver_through_alertmanager(
    tmp_path: Path, exporter: tuple[str, str]
) -> None:
    kind, target = exporter
    _page, flags, rules_name = PAGES[kind]
    rules_dir = tmp_path / "rules"
    made = subprocess.run(
        [sys.executable, "-m", "gpulens", "rules", "-o", str(rules_dir), "--idle-for", "2s",
         *flags],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    rules_file = rules_dir / rules_name
    assert "for: 2s" in rules_file.read_text()

    received = tmp_path / "alerts.jsonl"
    receiver_port = free_port()
    receiver_log = tmp_path / "receiver.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with receiver_log.open("wb") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "gpulens", "alerts", "receive", "--listen",
                 f"127.0.0.1:{receiver_port}", "--output", str(received), "--format", "json"],
                stdout=log, stderr=subprocess.STDOUT,
            ))  # fmt: skip
        am_port = free_port()
        am_config = {
            "route": {"receiver": "gpulens", "group_by": ["alertname", "job_id"],
                      "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"},
            "receivers": [{"name": "gpulens", "webhook_configs": [
                {"url": f"http://127.0.0.1:{receiver_port}/", "send_resolved": True}]}],
        }  # fmt: skip
        (tmp_path / "alertmanager.yml").write_text(json.dumps(am_config))
        am_log = tmp_path / "alertmanager.log"
        with am_log.open("wb") as log:
            am = subprocess.Popen(
                [ALERTMANAGER, f"--config.file={tmp_path / 'alertmanager.yml'}",
                 f"--storage.path={tmp_path / 'am-data'}",
                 f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            procs.append(am)
        _wait_ready(f"http://127.0.0.1:{am_port}/-/ready", am, am_log)
        prom_config: dict[str, Any] = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules_file)],
            "scrape_configs": [
                {"job_name": "gpulens", "static_configs": [{"targets": [target]}]}],
            "alerting": {"alertmanagers": [
                {"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
        }  # fmt: skip
        with Prometheus.with_config(tmp_path / "prom", prom_config):
            alerts = _wait_for_alerts(received, timeout_s=60)
    finally:
        for proc in procs:
            _stop(proc)
    idle = [a for a in alerts if a["alertname"] == "GpulensGpuIdleAllocated"]
    assert idle, f"no idle alert among {alerts}"
    alert = idle[0]
    assert alert["status"] == "firing"
    assert (alert["job"], alert["user"], alert["gpu"], alert["node"]) == (
        "4242", "alice", IDLE_UUID, "node-a",
    )  # fmt: skip
    assert alert["rule_id"] == "idle_allocated" and alert["severity"] == "warning"
    assert "node-a" in alert["summary"] and "job 4242 of alice" in alert["summary"]
    # the working GPU raised no idle alert
    assert all(a["gpu"] != BUSY_UUID for a in idle)


def _wait_for_alerts(path: Path, timeout_s: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            if any(r["alertname"] == "GpulensGpuIdleAllocated" for r in rows):
                return rows
        time.sleep(0.5)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
