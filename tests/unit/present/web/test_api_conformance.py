"""The API against its own OpenAPI schema: the schemathesis command with `--checks all` (status
codes, response bodies and headers as declared, schema-valid requests accepted, invalid ones
rejected, 405 with `Allow`, stateful links) against the app served by uvicorn on loopback, in
its own process.

Two constraints cannot be stated in OpenAPI, so a schema-valid request may still be 422 there:
a window's end must follow its start by at most 366 days (both given), and an upload's body
must be a trace. The configuration below says so for those operations only."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
CONFIG = """
[[operations]]
include-path-regex = "^/api/(window|fleet|cluster|gpus/[^/]+|workloads|people|findings)$"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "422"]

[[operations]]
include-path = "/api/traces/upload"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "413", "422",
                                                     "503"]
"""
#: examples per operation and phase: bounds the run to about half a minute on two cores
MAX_EXAMPLES = 3


SERVE = """
import sys
from pathlib import Path
import uvicorn
from gpulens.app.agent import AgentContext
from gpulens.present.web.app import create_app
data, traces, port = sys.argv[1:]
ctx = AgentContext(data_dir=Path(data), live=None, trace_dirs=(Path(traces),),
                   max_upload_bytes=64 * 1024)
uvicorn.run(create_app(ctx), host="127.0.0.1", port=int(port), log_level="error")
"""


@pytest.fixture(scope="module")
def served(store_dir: Path, trace_dir: Path) -> Iterator[str]:
    """The app over the small store, served by uvicorn in its own process on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(store_dir), str(trace_dir), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.slow
def test_schemathesis_checks_all(served: str, tmp_path: Path) -> None:
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG, encoding="utf-8")
    result = subprocess.run(
        [str(SCHEMATHESIS), "--config-file", str(config), "run", f"{served}/openapi.json",
         "--checks", "all", "--max-examples", str(MAX_EXAMPLES), "--seed", "1",
         "--workers", "2", "--no-color"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, check=False,
    )  # fmt: skip
    summary = re.search(r"(\d+) generated, (\d+) passed", result.stdout)
    assert result.returncode == 0 and summary, result.stdout[-6000:]
    generated, passed = map(int, summary.groups())
    print(f"schemathesis --checks all: {summary.group(0)} in {result.stdout.splitlines()[-1]}")
    assert generated == passed and generated >= 300, summary.group(0)
    selected = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)", result.stdout)
    assert selected, result.stdout[-3000:]
    chosen, total, tested = map(int, selected.groups())
    assert chosen == total == tested >= 13, selected.group(0)  # every operation was exercised
