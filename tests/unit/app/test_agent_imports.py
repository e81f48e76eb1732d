"""What an agent scraped by Prometheus and never viewed loads: no HTTP client without a dcgm
source, no web framework before the first dashboard request (each is memory on every node)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

COMPOSE = """
import json, sys
from gpulens.app import session
from gpulens.app.agent import Agent
from gpulens.clock import SystemClock
from gpulens.config import load_config
from gpulens.present.prometheus.exporter import metrics_source
from gpulens.present.web.front import lazy_app

cfg = load_config(env={}, overrides=json.loads(sys.argv[1]))
clock = SystemClock()
collectors = session.build_collectors(cfg, clock)
agent = Agent(cfg, collectors, clock, web=lazy_app, metrics=metrics_source(cfg))
app = agent._web(agent.context)  # what the agent serves, before any dashboard request
agent.context.exposition()  # one /metrics scrape
print(json.dumps(sorted(m for m in ("httpx", "fastapi", "pydantic", "starlette")
                        if m in sys.modules)))
"""


def loaded(overrides: dict[str, object]) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", COMPOSE, json.dumps(overrides)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("collectors", "expected"),
    [
        (["simulated"], []),
        (["simulated", "dcgm"], ["httpx"]),
    ],
)
def test_the_agent_loads_the_http_client_and_the_web_app_only_when_needed(
    tmp_path: Path, collectors: list[str], expected: list[str]
) -> None:
    overrides: dict[str, object] = {
        "data_dir": str(tmp_path / "data"),
        "collect.collectors": collectors,
        "dcgm.urls": ["http://127.0.0.1:9/metrics"],
        "simulated.hosts": 1,
        "simulated.gpus_per_host": 2,
    }
    assert loaded(overrides) == expected
