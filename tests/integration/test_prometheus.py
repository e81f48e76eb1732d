"""The rules and the dashboard against a real Prometheus scraping a real agent.

The demo agent (simulated fleet, a 5 s state window so states and waste come quickly, DCGM
names on) runs as a subprocess; `promtool` checks both rule files; a Prometheus (Debian's
`prometheus`) scrapes the agent every second and evaluates both rule files every second. Then
every dashboard panel's PromQL returns data, and the idle-allocated alert of each rule file
fires for the simulated notebook, naming its job and user (the dcgm-exporter rules read the
agent's DCGM names). Skipped without /usr/bin/prometheus and promtool (CI installs them:
`.ci/run`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from gpulens.present.prometheus import grafana
from gpulens.present.prometheus.rules import DCGM_RULES_FILE, RULES_FILE, rule_groups, write_rules

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(  # never skipped in CI, where a missing install must fail
        not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()) and not os.environ.get("CI"),
        reason="needs Prometheus and promtool on PATH or in /usr/bin (Debian package "
        "`prometheus`; .ci/run installs it)",
    ),
]
T = TypeVar("T")
#: Grafana's template variables, as the dashboard's "All" and a short time range expand them
VARIABLES = {"$Hostname": ".*", "$user": ".*", "$job_id": ".*", "$__range": "2m"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, fn: Callable[[], T | None], timeout_s: float, log: Path | None = None) -> T:
    """Poll `fn` until it returns something truthy; fail with `what` (and the log) otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = fn()
        except httpx.HTTPError:
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}\n{tail}")
        time.sleep(0.5)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s: the process is gone when this returns."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The demo agent on a free port: (base URL, data dir)."""
    data = tmp_path_factory.mktemp("agent")
    log = data / "agent.log"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env["GPULENS_AGENT_STATE_WINDOW_SECONDS"] = "5"
    env["GPULENS_AGENT_DCGM_NAMES"] = "true"
    args = ["demo", "--duration", "600", "--speed", "0", "--data-dir", str(data / "store")]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpulens", *args, "--listen", f"127.0.0.1:{port}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        url = f"http://127.0.0.1:{port}"

        def states() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"the agent exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            return "gpulens_gpu_state{" in httpx.get(f"{url}/metrics", timeout=5).text

        wait_for("the agent's first GPU states on /metrics", states, 60, log)
        yield url, data / "store"
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def rules_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rules")
    write_rules(out, idle_for="5s")
    write_rules(out, idle_for="5s", dcgm=True)
    return out


@pytest.fixture(scope="module")
def prometheus(
    agent: tuple[str, Path], rules_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A Prometheus scraping the agent every second, with both rule files loaded."""
    home = tmp_path_factory.mktemp("prometheus")
    target = agent[0].removeprefix("http://")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules_dir / RULES_FILE), str(rules_dir / DCGM_RULES_FILE)],
        "scrape_configs": [{"job_name": "gpulens", "static_configs": [{"targets": [target]}]}],
    }
    (home / "prometheus.yml").write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    log = home / "prometheus.log"
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={home / 'prometheus.yml'}",
                f"--storage.tsdb.path={home / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for("Prometheus to be ready", lambda: ready(url), 30, log)
        wait_for(
            "a scrape of the agent",
            lambda: query(url, 'count(gpulens_gpu_state{job="gpulens"})'),
            30,
            log,
        )
        yield url
    finally:
        stop(proc)


def ready(url: str) -> bool:
    return httpx.get(f"{url}/-/ready", timeout=5).status_code == 200


def query(url: str, promql: str) -> list[dict[str, Any]]:
    """The result of an instant query (an error fails the test: the PromQL is wrong)."""
    reply = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10)
    body = reply.json()
    assert body.get("status") == "success", f"{promql}\n{body}"
    return list(body["data"]["result"])


def expand(promql: str) -> str:
    for name, value in VARIABLES.items():
        promql = promql.replace(name, value)
    return promql


@pytest.mark.parametrize("name", [RULES_FILE, DCGM_RULES_FILE])
def test_promtool_accepts_the_rules(rules_dir: Path, name: str) -> None:
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(rules_dir / name)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_dashboard_panel_returns_data(prometheus: str) -> None:
    model = grafana.dashboard()
    assert all("$" not in expand(q) for _, q in grafana.queries(model))
    pending = {f"{title}: {expand(q)}" for title, q in grafana.queries(model)}

    def all_answered() -> bool:
        for item in sorted(pending):
            if query(prometheus, item.split(": ", 1)[1]):
                pending.discard(item)
        return not pending

    deadline = time.monotonic() + 40
    while not all_answered() and time.monotonic() < deadline:
        time.sleep(1)
    assert not pending, "panels without data:\n" + "\n".join(sorted(pending))


def rule_alerts(url: str, group: str, alert: str) -> list[dict[str, Any]]:
    """The active alerts of one alerting rule of one group, from /api/v1/rules."""
    reply = httpx.get(f"{url}/api/v1/rules", params={"type": "alert"}, timeout=5).json()
    for g in reply["data"]["groups"]:
        if g["name"] == group:
            for rule in g["rules"]:
                if rule["name"] == alert:
                    assert rule["health"] == "ok", rule
                    return list(rule["alerts"])
    raise AssertionError(f"no alerting rule {alert} in group {group}")


@pytest.mark.parametrize("group", ["gpulens.alerts", "gpulens-dcgm.alerts"])
def test_idle_allocated_alert_fires_for_the_notebook(
    prometheus: str, agent: tuple[str, Path], group: str
) -> None:
    truth = json.loads((agent[1] / "ground_truth.json").read_text(encoding="utf-8"))
    notebook = next(job for job in truth if job["scenario"] == "idle_allocated")

    def firing() -> dict[str, Any] | None:
        for alert in rule_alerts(prometheus, group, "GpulensGpuIdleAllocated"):
            if alert["state"] == "firing" and alert["labels"].get("job_id") == notebook["job_id"]:
                return alert
        return None

    alert = wait_for(f"{group}: the idle-allocated alert for the notebook", firing, 40)
    labels = alert["labels"]
    assert labels["alertname"] == "GpulensGpuIdleAllocated"
    assert labels["user"] == notebook["user"]
    assert labels["Hostname"] == notebook["host"]
    assert labels["UUID"] in notebook["gpu_uuids"]
    assert labels["rule_id"] == "idle_allocated" and labels["severity"] == "warning"
    assert labels["job"] == "gpulens"  # the scrape job's, next to our job_id
    assert "more than 5s" in alert["annotations"]["summary"]
    # no other GPU of the simulated fleet is idle but allocated
    others = [
        a["labels"]
        for a in rule_alerts(prometheus, group, "GpulensGpuIdleAllocated")
        if a["labels"].get("job_id") != notebook["job_id"]
    ]
    assert others == []


def test_dcgm_recording_rules_read_the_dcgm_names(prometheus: str) -> None:
    rules = [r for g in rule_groups(dcgm=True) for r in g["rules"] if "record" in r]
    pending = {r["record"] for r in rules}

    def all_answered() -> bool:
        for name in sorted(pending):
            if query(prometheus, name):
                pending.discard(name)
        return not pending

    wait_for(f"data for the recording rules {sorted(pending)}", all_answered, 30)
    (util,) = query(prometheus, "fleet:gpulens_dcgm_gpu_util_ratio:avg")
    assert 0 < float(util["value"][1]) <= 1  # DCGM's percent back to a ratio
    (diff,) = query(prometheus, "avg(DCGM_FI_DEV_GPU_UTIL) / 100 - avg(gpulens_gpu_util_ratio)")
    assert abs(float(diff["value"][1])) < 1e-9  # one scrape, both names
