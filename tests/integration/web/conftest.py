"""A demo agent in a subprocess (a short simulated history, then live), and a headless system
Chromium driven by Playwright."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

CHROMIUM = Path("/usr/bin/chromium")
#: a name the browser resolves to 127.0.0.1, as a DNS rebinding attacker's name would
REBOUND_HOST = "rebind.attacker.example"
#: Chromium's own block on public pages reaching loopback, turned off: other browsers (Firefox,
#: Safari) have none, so the agent must refuse such requests by itself, and the tests show it
PRIVATE_NETWORK_ACCESS = (
    "BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,"
    "PrivateNetworkAccessRespectPreflightResults,LocalNetworkAccessChecks"
)
DEMO_SECONDS = 1800
STARTUP_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Demo:
    url: str
    data_dir: Path
    trace_dir: Path

    def ground_truth(self) -> list[dict[str, Any]]:
        return list(json.loads((self.data_dir / "ground_truth.json").read_text("utf-8")))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _trace(path: Path) -> None:
    events: list[dict[str, Any]] = []
    for i in range(40):
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": 100 * i,
                "dur": 5,
                "args": {"correlation": i + 1},
            }
        )
        events.append({"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "pid": 0,
                       "tid": 7, "ts": 100 * i + 10, "dur": 30 + i % 7,
                       "args": {"stream": 7, "correlation": i + 1}})  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """`gpulens demo` over 30 simulated minutes, then serving live on a free port. The idle
    and leak thresholds are shortened so that every scenario's finding fits in the span."""
    root = tmp_path_factory.mktemp("demo")
    data_dir, trace_dir = root / "data", root / "traces"
    trace_dir.mkdir()
    _trace(trace_dir / "step.json")
    port = _free_port()
    env = {
        **os.environ,
        "GPULENS_FINDINGS_IDLE_ALLOCATED_WARN_MINUTES": "10",
        "GPULENS_THRESHOLDS_MEMORY": "leak_min_duration_s=600",
        "GPULENS_AGENT_TRACE_DIRS": str(trace_dir),
        "GPULENS_AGENT_FINDINGS_EVERY_SECONDS": "10",
    }
    log = (root / "demo.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulens", "demo", "--duration", str(DEMO_SECONDS), "--speed",
         "0", "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"gpulens demo exited with {proc.returncode}; see {root / 'demo.log'}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"gpulens demo did not serve /healthz in {STARTUP_TIMEOUT_S:.0f} s")
            time.sleep(0.25)
        yield Demo(url, data_dir, trace_dir)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="session")
def rebound_host() -> str:
    """A name the browser resolves to 127.0.0.1 (`--host-resolver-rules`), as a DNS
    rebinding attacker's own name would."""
    return REBOUND_HOST


@pytest.fixture(scope="session")
def step_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small PyTorch profiler trace file."""
    path = tmp_path_factory.mktemp("trace") / "step.json"
    _trace(path)
    return path


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: $GPULENS_ARTIFACTS when set, else pytest's temporary directory."""
    override = os.environ.get("GPULENS_ARTIFACTS")
    path = Path(override) if override else tmp_path_factory.mktemp("artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists() and not os.environ.get("CI"):  # in CI: fail, never skip
        pytest.skip(f"no system Chromium at {CHROMIUM} (Debian package `chromium`)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chrome = pw.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                "--no-sandbox",
                f"--host-resolver-rules=MAP {REBOUND_HOST} 127.0.0.1",
                f"--disable-features={PRIVATE_NETWORK_ACCESS}",
            ],
            headless=True,
        )
        try:
            yield chrome
        finally:
            chrome.close()
