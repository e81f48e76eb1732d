"""What a running agent, scraped by Prometheus and never viewed, holds in memory: no pandas
(pyarrow's probe for it is answered before the first list is converted), no web framework, no
HTTP client without a dcgm source, and no DuckDB (the live frame is computed with numpy, the
findings pass runs in a child process), after its live state has been refreshed and a findings
pass has run. Together these are tens of MB on every node."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

WATCHED = ("pandas", "fastapi", "starlette", "httpx", "duckdb")

RUN = """
import json, sys, time
settings, lean = json.loads(sys.argv[1]), sys.argv[2] == "lean"
if lean:
    from gpulens.app.lean import keep_pandas_out
    keep_pandas_out()
from gpulens.app import session
from gpulens.app.agent import Agent
from gpulens.clock import SystemClock
from gpulens.config import load_config
from gpulens.present.prometheus.exporter import metrics_source
from gpulens.present.web.front import lazy_app

cfg = load_config(env={}, overrides=settings)
clock = SystemClock()
agent = Agent(cfg, session.build_collectors(cfg, clock), clock, web=lazy_app,
              metrics=metrics_source(cfg))
agent._web(agent.context)  # what the agent serves, before any dashboard request
if sys.argv[4] == "viewed":
    agent.context.viewed()  # as a dashboard request does
agent.start_background()
deadline = time.monotonic() + 90
text = b""
while time.monotonic() < deadline:
    time.sleep(0.5)
    text = agent.context.exposition()  # a scrape
    if agent.live.refreshes >= 2 and agent.live.snapshot().findings_ts is not None:
        break
agent.shutdown()
print(json.dumps({
    "refreshes": agent.live.refreshes,
    "findings": agent.live.snapshot().findings_ts is not None,
    "states": b"gpulens_gpu_state{" in text,
    "loaded": sorted(m for m in sys.argv[3].split(",") if m in sys.modules),
}))
"""


def settings(tmp_path: Path) -> dict[str, object]:
    return {
        "data_dir": str(tmp_path / "data"),
        "collect.collectors": ["simulated"],
        "collect.interval_seconds": 0.5,
        "simulated.hosts": 1,
        "simulated.gpus_per_host": 2,
        "agent.state_window_seconds": 5.0,
        "agent.findings_every_seconds": 5.0,
        "agent.findings_window_seconds": 60.0,
        "store.flush_seconds": 2.0,
    }


def run(tmp_path: Path, lean: bool, viewed: bool = False) -> dict[str, object]:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            RUN,
            json.dumps(settings(tmp_path)),
            "lean" if lean else "-",
            ",".join(WATCHED),
            "viewed" if viewed else "-",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_a_scraped_agent_never_viewed_loads_no_pandas_web_framework_http_client_or_duckdb(
    tmp_path: Path,
) -> None:
    result = run(tmp_path, lean=True)
    assert result["refreshes"] >= 2 and result["findings"], result  # the work was done
    assert result["states"], "the scrape shows the refreshed states"
    assert result["loaded"] == [], result


@pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas not installed")
def test_without_the_probe_answered_pyarrow_loads_pandas(tmp_path: Path) -> None:
    """The control: the same agent without `keep_pandas_out` loads pandas where it is
    installed, so the test above can fail."""
    result = run(tmp_path, lean=False)
    assert "pandas" in result["loaded"], result


def test_a_viewed_agent_runs_its_findings_pass_in_process_with_duckdb(tmp_path: Path) -> None:
    """The control of the DuckDB check: with a viewer, the pass runs on the agent's own store
    connection, which loads DuckDB."""
    result = run(tmp_path, lean=True, viewed=True)
    assert result["findings"], result
    assert result["loaded"] == ["duckdb"], result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc")
@pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas not installed")
def test_the_agent_command_keeps_pandas_and_duckdb_out_of_its_process(tmp_path: Path) -> None:
    """`gpulens agent` as started on a node: after a refresh and findings pass, no pandas or
    DuckDB library is mapped into the process."""
    port = free_port()
    cfg = tmp_path / "gpulens.toml"
    values = settings(tmp_path)
    cfg.write_text(
        f'data_dir = "{values["data_dir"]}"\n'
        '[collect]\ninterval_seconds = 0.5\ncollectors = ["simulated"]\n'
        "[simulated]\nhosts = 1\ngpus_per_host = 2\n"
        "[agent]\nstate_window_seconds = 5.0\nfindings_every_seconds = 5.0\n"
        "findings_window_seconds = 60.0\n"
        "[store]\nflush_seconds = 2.0\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    agent = subprocess.Popen(
        [sys.executable, "-m", "gpulens", "agent", "--config", str(cfg),
         "--listen", f"127.0.0.1:{port}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        text = ""
        while time.monotonic() < deadline and agent.poll() is None:
            time.sleep(1.0)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                continue
            if "gpulens_gpu_state{" in text and "findings_last_run_timestamp_seconds" in text:
                break
        assert agent.poll() is None, agent.stderr.read().decode()[-2000:] if agent.stderr else ""
        assert "gpulens_gpu_state{" in text, "no refreshed state in time"
        assert "findings_last_run_timestamp_seconds" in text, "no findings pass in time"
        maps = Path(f"/proc/{agent.pid}/maps").read_text(encoding="utf-8")
        pyarrow_libs = [ln for ln in maps.splitlines() if "/pyarrow/" in ln]
        pandas_libs = [ln.split()[-1] for ln in maps.splitlines() if "/pandas/" in ln]
        duckdb_libs = [ln.split()[-1] for ln in maps.splitlines() if "duckdb" in ln]
        assert pyarrow_libs, "the agent maps pyarrow (the check looks at the right process)"
        assert pandas_libs == [], sorted(set(pandas_libs))[:5]
        assert duckdb_libs == [], sorted(set(duckdb_libs))[:5]
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
