"""`gpulens agent --prometheus URL --no-collect` over the 30-day cluster of tests/promdata.py,
backfilled into Debian's Prometheus with promtool: the Cluster page's figures (the node × time
heat map of useful work and duty cycle, allocation per queue, useful work, the idle-allocated
inventory with its owners and price, the off-peak heat map, the forecast) are checked against
the rule that built the history; the page renders in Chromium with its heat map and no console
error; and a Prometheus that goes away leaves the agent serving, with the error on the page.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gpulens.analyze.prices import Prices
from promdata import PROMETHEUS, PROMTOOL, ClusterSpec, Prometheus, backfill, free_port, truth

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()) and not os.environ.get("CI"),
        reason="needs Prometheus and promtool (Debian package `prometheus`; .ci/run installs it)",
    ),
]
SPEC = ClusterSpec()
SINCE, UNTIL = "2026-10-01T00:00:00Z", "2026-10-31T00:00:00Z"
MODEL = "NVIDIA H100 80GB HBM3"
#: the promdata levels: useful work (the busiest math pipe, tensor) and duty cycle of a state
USEFUL = {"free": 0.0, "idle": 0.0, "train": 0.45}
DUTY = {"free": 0.0, "idle": 0.0, "train": 0.95}
READ_TIMEOUT_S = 240.0


@dataclass
class Agent:
    url: str
    proc: subprocess.Popen[bytes]
    data_dir: Path
    log: Path

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def start_agent(home: Path, prometheus_url: str, *extra: str, tmpdir: Path | None = None) -> Agent:
    """`gpulens agent --prometheus URL --no-collect` on a free port, with a data directory
    that does not exist (and must not be created); `tmpdir`: its TMPDIR."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    data_dir = home / "never-created"
    env["GPULENS_DATA_DIR"] = str(data_dir)
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    log = home / f"agent-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpulens", "agent", "--prometheus", prometheus_url,
             "--no-collect", "--listen", f"127.0.0.1:{port}", *extra],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    agent = Agent(f"http://127.0.0.1:{port}", proc, data_dir, log)
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the agent exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{agent.url}/healthz", timeout=2).status_code == 200:
                return agent
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            agent.stop()
            pytest.fail("the agent did not serve /healthz in 120 s")
        time.sleep(0.3)


def wait_read(agent: Agent, after_ns: int = 0, error: bool = False) -> dict[str, Any]:
    """/api/cluster once a read newer than `after_ns` succeeded (or, with `error`, failed)."""
    deadline = time.monotonic() + READ_TIMEOUT_S
    while True:
        doc: dict[str, Any] = httpx.get(f"{agent.url}/api/cluster", timeout=60).json()
        st = doc["status"]
        stamp = st["failed_ns"] if error else st["refreshed_ns"]
        if stamp is not None and stamp > after_ns:
            return doc
        if time.monotonic() > deadline:
            pytest.fail(f"no {'failed' if error else 'good'} read in time: {st}")
        time.sleep(1.0)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """(a working directory, the URL of Debian's Prometheus over the backfilled cluster)."""
    home = tmp_path_factory.mktemp("cluster-page")
    backfill(SPEC, home / "data", home)
    with Prometheus(home, home / "data") as server:
        yield home, server.url


@pytest.fixture(scope="module")
def cluster(prometheus: tuple[Path, str]) -> Iterator[tuple[Agent, dict[str, Any]]]:
    home, url = prometheus
    agent = start_agent(home, url, "--since", SINCE, "--until", UNTIL)
    try:
        yield agent, wait_read(agent)
    finally:
        assert agent.stop() == 0, agent.log.read_text()[-2000:]
    assert not agent.data_dir.exists()  # no local store was written


# -- the ground truth --------------------------------------------------------------------------


def hours_of(queue: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per hour: GPUs held and GPUs reporting (of `queue`, or all), from the spec's rule."""
    hours = SPEC.blocks * SPEC.block_s // 3600
    held, seen = np.zeros(hours), np.zeros(hours)
    per = SPEC.block_s // 3600
    for node in range(SPEC.nodes):
        if queue is not None and SPEC.queue(node) != queue:
            continue
        for block in range(SPEC.blocks):
            if SPEC.observed(node, block):
                busy = sum(SPEC.state(node, g, block) != "free" for g in range(SPEC.gpus))
                held[block * per : (block + 1) * per] += busy
                seen[block * per : (block + 1) * per] += SPEC.gpus
    return held, seen


def node_levels(node: int, levels: dict[str, float]) -> list[float | None]:
    """Per hour: the mean level of the node's GPUs (None while its exporter is down)."""
    out: list[float | None] = []
    for block in range(SPEC.blocks):
        value = None
        if SPEC.observed(node, block):
            value = float(np.mean([levels[SPEC.state(node, g, block)] for g in range(SPEC.gpus)]))
        out.extend([value] * (SPEC.block_s // 3600))
    return out


def held_blocks(state: str) -> dict[str, str]:
    """job id (the hpc_job label) → queue, for every observed block of that state."""
    return {
        f"{n}-{g}-{b}": SPEC.queue(n)
        for n in range(SPEC.nodes)
        for g in range(SPEC.gpus)
        for b in range(SPEC.blocks)
        if SPEC.observed(n, b) and SPEC.state(n, g, b) == state
    }


# -- the figures -------------------------------------------------------------------------------


def test_heat_map_is_each_nodes_useful_work_and_duty_cycle(cluster: Any) -> None:
    _, doc = cluster
    assert doc["step_s"] == 3600
    heat = doc["heat"]
    hosts = [SPEC.host(n) for n in range(SPEC.nodes)]
    assert sorted(heat["nodes"]) == hosts
    assert heat["gpus"] == [SPEC.gpus] * SPEC.nodes
    assert heat["metric"] == "useful"
    start_ns = int(datetime.fromisoformat(SINCE).timestamp()) * 10**9
    assert heat["times_ns"][0] == start_ns and len(heat["times_ns"]) == 30 * 24
    for row, name in enumerate(heat["nodes"]):
        node = hosts.index(name)
        assert heat["queues"][row] == SPEC.queue(node)
        for key, levels in (("useful", USEFUL), ("duty", DUTY)):
            want = node_levels(node, levels)
            got = heat[key][row]
            for hour, (w, g) in enumerate(zip(want, got, strict=True)):
                if w is None:
                    assert g is None, (name, key, hour, g)
                else:
                    assert g == pytest.approx(w, abs=1e-6), (name, key, hour)


def test_allocation_useful_work_and_teams_per_queue(cluster: Any) -> None:
    _, doc = cluster
    held, seen = hours_of()
    t = doc["totals"]
    assert t["gpus"] == SPEC.nodes * SPEC.gpus and t["nodes"] == SPEC.nodes
    assert t["pooled_allocation"] == pytest.approx(held.sum() / seen.sum())
    assert t["gpu_hours"] == pytest.approx(seen.sum())
    assert t["in_use_gpu_hours"] == pytest.approx(held.sum())
    # useful work is GPU-time: the last reading before the exporter's gap covers on (the
    # interval frame's coverage rule, which `truth` follows)
    train_hours = truth(SPEC, 3600).train_hours
    assert t["useful_gpu_hours"] == pytest.approx(train_hours * USEFUL["train"], rel=1e-5)
    # GPU series carry no pending jobs: pending-while-idle is unknown, never 0
    assert t["pending_while_idle_share"] is None
    queues = {q["queue"]: q for q in doc["queues"]}
    assert set(queues) == {SPEC.queue(n) for n in range(SPEC.nodes)}
    for name, q in queues.items():
        h, r = hours_of(name)
        assert q["allocation"] == pytest.approx(h.sum() / r.sum())
        assert q["gpus"] == r.max()
        # the gap is on a node of the other queue: here every train block counts 6 h
        gap_queue = SPEC.queue(SPEC.gap_node or 0)
        jobs = sum(1 for queue in held_blocks("train").values() if queue == name)
        hours = jobs * SPEC.block_s / 3600
        if name == gap_queue:
            other = sum(1 for queue in held_blocks("train").values() if queue != name)
            hours = train_hours - other * SPEC.block_s / 3600
        assert q["useful_gpu_hours"] == pytest.approx(hours * USEFUL["train"], rel=1e-5)
        assert q["mean_tensor_active"] > 0 and q["pending_gpu_hours"] is None
    assert [r["gpus"] for r in doc["teams"]] == [SPEC.nodes * SPEC.gpus]


def test_idle_allocated_inventory_names_owners_durations_and_prices(cluster: Any) -> None:
    _, doc = cluster
    idle = held_blocks("idle")  # one run per idle block: a state never repeats next block
    assert doc["idle_total"] == len(idle) == len(doc["idle"])
    price = Prices().gpu_hour_price(MODEL)
    owners = set()
    for row in doc["idle"]:
        job = re.fullmatch(r"job_id=(\S+)", row["owner"])
        assert job is not None, row["owner"]
        owners.add(job.group(1))
        assert row["duration_s"] == SPEC.block_s
        assert row["wasted_gpu_hours"] == pytest.approx(SPEC.block_s / 3600)
        assert row["cost"] == pytest.approx(row["wasted_gpu_hours"] * price)
    assert owners == set(idle)
    t = doc["totals"]
    assert t["idle_allocated_gpu_hours"] == pytest.approx(len(idle) * SPEC.block_s / 3600)
    assert t["idle_allocated_cost"] == pytest.approx(t["idle_allocated_gpu_hours"] * price)


def test_plans_off_peak_heat_map_and_forecast(cluster: Any) -> None:
    _, doc = cluster
    held, _ = hours_of()
    weekday0 = datetime.fromtimestamp(SPEC.start_s, UTC).weekday()
    how = (np.arange(held.size) + weekday0 * 24) % 168
    demand = np.bincount(how, held, 168) / np.bincount(how, minlength=168)
    o = doc["offpeak"]
    assert np.allclose(np.array(o["demand_gpus"], dtype=float).reshape(-1), demand, atol=1e-6)
    assert o["peak_gpus"] == pytest.approx(demand.max())
    c = doc["consolidation"]
    assert c["jobs_considered"] + c["jobs_unknown"] == len(held_blocks("idle")) + len(
        held_blocks("train")
    )
    f = doc["forecast"]
    assert f is not None, doc["notes"]  # statsmodels is installed with the dev extra
    assert len(f["mean"]) == 168 and f["times_ns"][0] == SPEC.end_s * 10**9
    assert np.isfinite(f["test_mase"]) and np.isfinite(f["baseline_mase"])


def test_page_shows_the_figures_with_units(cluster: Any) -> None:
    agent, _ = cluster
    html = httpx.get(f"{agent.url}/cluster", headers={"accept": "text/html"}, timeout=60).text
    held, seen = hours_of()
    assert f"{100 * held.sum() / seen.sum():.0f}%" in html
    assert f"{SPEC.nodes} nodes, {SPEC.nodes * SPEC.gpus} GPUs" in html
    for q in ("q0", "q1"):
        assert f"<tr><td>{q}</td>" in html
    assert 'id="source-error" class="error-banner" role="alert" hidden' in html
    for unit in ("GPU-h", "USD", "GPUs", "MASE"):
        assert unit in html
    assert re.search(r"for</th>.*?<td class=\"n\">6 ?h", html, re.S)  # idle runs of 6 h
    # the root of a --no-collect agent is its Cluster page; /metrics has nothing of its own
    root = httpx.get(f"{agent.url}/", headers={"accept": "text/html"}, follow_redirects=False)
    assert root.status_code == 303 and root.headers["location"] == "/cluster"
    assert httpx.get(f"{agent.url}/metrics").text == ""


# -- in a browser ------------------------------------------------------------------------------


@pytest.mark.browser
def test_page_renders_its_heat_map_without_console_errors(
    cluster: Any, browser: Any, artifacts: Path
) -> None:
    agent, _ = cluster
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        response = page.goto(f"{agent.url}/cluster", wait_until="load")
        assert response is not None and response.status == 200
        page.wait_for_function(
            "() => { const c = document.getElementById('chart-heatmap');"
            " return c && Array.isArray(c.data) && c.data.length > 0; }",
            timeout=30_000,
        )
        heat = page.evaluate(
            "() => { const t = document.getElementById('chart-heatmap').data[0];"
            " return {type: t.type, rows: t.z.length, cols: t.z[0].length, y: t.y}; }"
        )
        assert heat["type"] == "heatmap" and heat["rows"] == SPEC.nodes
        assert heat["cols"] == 30 * 24
        assert page.locator("#chart-heatmap .main-svg").count() > 0  # drawn, not only data
        for chart in ("queues", "offpeak", "forecast"):
            assert page.evaluate(f"() => document.getElementById('chart-{chart}').data.length")
        page.wait_for_function(
            "() => document.getElementById('now').textContent.includes('no collection')",
            timeout=30_000,
        )
        page.click("text=duty cycle")
        page.wait_for_function(
            "() => { const c = document.getElementById('chart-heatmap');"
            " return c && c.data && c.data[0].colorbar.title.text === 'duty cycle'; }",
            timeout=30_000,
        )
        page.screenshot(path=str(artifacts / "cluster.png"), full_page=True)
    finally:
        context.close()
    assert errors == []


@pytest.mark.browser
def test_a_recording_agents_cluster_page_renders_its_store(demo: Any, browser: Any) -> None:
    """`gpulens demo`'s agent records its simulated fleet: its Cluster page is its store's,
    one heat-map row per simulated node, drawn without a console error."""
    hosts = {g["host"] for g in httpx.get(f"{demo.url}/api/gpus", timeout=60).json()}
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        response = page.goto(f"{demo.url}/cluster?range=1h", wait_until="load")
        assert response is not None and response.status == 200
        page.wait_for_function(
            "() => { const c = document.getElementById('chart-heatmap');"
            " return c && Array.isArray(c.data) && c.data.length > 0; }",
            timeout=60_000,
        )
        rows = page.evaluate("() => document.getElementById('chart-heatmap').data[0].y")
        assert {str(r).split(" (")[0] for r in rows} == hosts
        assert "Source: store" in page.content()
    finally:
        context.close()
    assert errors == []


def test_a_read_in_flight_does_not_hold_up_the_shutdown(
    prometheus: tuple[Path, str], tmp_path: Path
) -> None:
    home, url = prometheus
    agent = start_agent(home, url, "--since", SINCE, "--until", UNTIL, tmpdir=tmp_path)
    status = httpx.get(f"{agent.url}/api/cluster", timeout=30).json()["status"]
    assert status["reading"] and status["refreshed_ns"] is None  # the first read, 30 days
    started = time.monotonic()
    assert agent.stop() == 0
    assert time.monotonic() - started < 3.0  # the read is abandoned, not waited for
    left = sorted(str(x.relative_to(tmp_path)) for x in tmp_path.rglob("*"))
    assert left == [], "\n".join(left)  # and its temporary store is gone with the agent


# -- Prometheus away ---------------------------------------------------------------------------


def test_agent_keeps_serving_when_prometheus_goes_away(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    spec = ClusterSpec(days=4, gap_node=None)
    home = tmp_path_factory.mktemp("cluster-away")
    backfill(spec, home / "data", home)
    since = datetime.fromtimestamp(spec.start_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    until = datetime.fromtimestamp(spec.end_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    server = Prometheus(home, home / "data")
    try:
        agent = start_agent(home, server.url, "--since", since, "--until", until,
                            "--cluster-every", "30")  # fmt: skip
        first = wait_read(agent)
        assert first["totals"]["gpus"] == spec.nodes * spec.gpus
        server.stop()
        failed = wait_read(agent, error=True)
        st = failed["status"]
        assert st["error"] and server.url.split("//")[1] in st["error"]
        # the last good read is still shown, with the error above it
        assert failed["totals"] == first["totals"]
        assert st["refreshed_ns"] == first["status"]["refreshed_ns"]
        page = httpx.get(f"{agent.url}/cluster", headers={"accept": "text/html"}, timeout=30)
        assert page.status_code == 200
        banner = re.search(r'<div id="source-error"[^>]*>(.*?)</div>', page.text, re.S)
        assert banner is not None and "hidden" not in banner.group(0).split(">")[0]
        assert "Prometheus could not be read" in banner.group(1)
        assert "showing the read of" in banner.group(1)
        assert httpx.get(f"{agent.url}/healthz").status_code == 200
        charts = httpx.get(f"{agent.url}/charts/cluster", timeout=30).json()
        assert charts["status"]["error"] == st["error"]
    finally:
        server.stop()
        if "agent" in locals():
            assert agent.stop() == 0


def test_agent_started_without_prometheus_says_so_and_serves(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    home = tmp_path_factory.mktemp("cluster-none")
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    agent = start_agent(home, nobody)
    try:
        doc = wait_read(agent, error=True)
        assert doc["start_ns"] is None and doc["heat"]["nodes"] == []
        assert doc["status"]["next_ns"] - doc["status"]["failed_ns"] <= 30 * 10**9  # retried
        page = httpx.get(f"{agent.url}/cluster", headers={"accept": "text/html"}, timeout=30)
        assert page.status_code == 200
        assert "Prometheus could not be read" in page.text
        assert "nothing to show until a read succeeds" in page.text
    finally:
        assert agent.stop() == 0
    assert not agent.data_dir.exists()
