"""Profiling on demand of a real tracked training loop in another process: `gpulens profile`
asks it through the request file, it captures the steps with torch.profiler, the trace is
analysed (as `gpulens trace` does) and linked to the input_bound finding of that job in
`gpulens report` and on the dashboard's finding page; SIGUSR2 asks one process directly;
automatic requests are once per job and rate-limited."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
from typer.testing import CliRunner

from gpulens.app import profiles
from gpulens.config import load_config
from gpulens.findings.model import Finding, Severity
from gpulens.present.cli import app
from gpulens.store import Store

WORKER = Path(__file__).with_name("profile_worker.py")
SLEEP_S = 0.004  # per item, 4 items a batch: ~16 ms of loader wait against a tiny step


def start(data_dir: Path, job: str, seconds: float = 90.0) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(data_dir), job, str(seconds), str(SLEEP_S)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def finish(proc: subprocess.Popen[str], data_dir: Path) -> list[str]:
    (data_dir / "stop").write_text("")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    return out.split()


def invoke(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output[-3000:]
    return result.stdout


@pytest.mark.slow
def test_profile_of_a_tracked_loop_is_captured_analysed_and_linked(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    proc = start(store, "starved")
    try:
        out = invoke(
            "profile", "--job", "starved", "--steps", "4", "--finding", "input_bound",
            "--data-dir", str(store), "--wait", "60", "--format", "json",
        )  # fmt: skip
    finally:
        words = finish(proc, store)
    (result,) = json.loads(out)
    assert result["job_id"] == "starved" and result["steps"] == 4
    assert result["last_step"] - result["first_step"] == 3 and result["first_step"] > 1
    assert result["finding"]["rule_id"] == "input_bound"
    trace = Path(result["trace_path"])
    assert trace.is_file()
    assert str(trace).removesuffix(".pt.trace.json") + ".json" in words  # the worker wrote it
    # the loader sleeps ~16 ms a batch against a step of well under a millisecond of compute
    assert result["loader_share"] > 0.5 and not result["device"]
    assert result["profiled_steps"] == 4
    assert result["summary"].startswith(
        f"profiled steps {result['first_step']}-{result['last_step']}: "
    )
    # the trace itself is a Kineto trace `gpulens trace` reads
    text = invoke("trace", str(trace), "--format", "json")
    assert json.loads(text)["ranks"][0]["steps"]
    with Store(store) as s:
        events = s.query("SELECT job_id, message FROM event WHERE event = 'profile_captured'")
    assert events.num_rows == 1 and events.to_pylist()[0]["job_id"] == "starved"

    # the report's input_bound finding on that job links to the profile
    doc = json.loads(
        invoke("report", "--data-dir", str(store), "--job", "starved", "--format", "json")
    )
    rules = [f["rule_id"] for f in doc["findings"]]
    assert "input_bound" in rules
    (link,) = doc["profiles"]
    assert link["rule_id"] == "input_bound" and rules[link["finding"]] == "input_bound"
    assert link["trace_path"] == str(trace) and link["summary"] == result["summary"]
    page = invoke("report", "--data-dir", str(store), "--job", "starved", "--format", "html")
    assert "Profiles captured on demand" in page and result["summary"] in page

    # ...and so does the dashboard's finding page for that finding
    found = Finding("input_bound", Severity.WARNING, {"job_id": "starved"}, (0, 1), "s")
    other = Finding("idle_allocated", Severity.WARNING, {"job_id": "starved"}, (0, 1), "s")
    links = profiles.links(store, [other, found])
    assert list(links) == [1] and links[1][0]["summary"] == result["summary"]


@pytest.mark.slow
def test_sigusr2_asks_one_process(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    proc = start(store, "signalled")
    try:
        proc.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 60
        while not profiles.captures(store, "signalled") and time.monotonic() < deadline:
            time.sleep(0.3)
    finally:
        finish(proc, store)
    (meta,) = profiles.captures(store, "signalled")
    result = profiles.analyse(meta)
    assert result["request_id"].startswith("signal-") and result["finding"] is None
    assert result["steps"] == 5  # the profile.steps setting's default
    assert result["loader_share"] > 0.5


def test_automatic_requests_are_once_per_job_and_rate_limited(tmp_path: Path) -> None:
    data_dir = tmp_path / "runs"
    off = load_config(overrides={"data_dir": str(data_dir)})
    on = load_config(
        overrides={
            "data_dir": str(data_dir),
            "profile.auto": True,
            "profile.auto_every_minutes": 10,
        }
    )

    def bound(job: str) -> Finding:
        return Finding("input_bound", Severity.WARNING, {"job_id": job}, (0, 1), "input-bound")

    idle = Finding("idle_allocated", Severity.WARNING, {"job_id": "a"}, (0, 1), "idle")
    t0 = 1_800_000_000 * 10**9
    assert profiles.auto_requests(off, [bound("a")], t0) == []  # off by default
    assert profiles.auto_requests(on, [idle], t0) == []  # only the rules that ask
    (first,) = profiles.auto_requests(on, [bound("a")], t0)
    body = json.loads(first.path.read_text())
    assert body["job_id"] == "a" and body["finding"]["rule_id"] == "input_bound"
    assert body["steps"] == 5 and body["expires_ns"] > t0
    assert profiles.auto_requests(on, [bound("a")], t0 + 3600 * 10**9) == []  # once per job
    assert profiles.auto_requests(on, [bound("b")], t0 + 60 * 10**9) == []  # rate-limited
    (second,) = profiles.auto_requests(on, [bound("b")], t0 + 11 * 60 * 10**9)
    assert second.job_id == "b"


@pytest.mark.slow
def test_the_dashboard_finding_page_shows_the_profile(tmp_path: Path) -> None:
    from tests.unit.present.web.helpers import TestClient

    from gpulens.app.agent import AgentContext
    from gpulens.app.generate import generate
    from gpulens.present.web.app import create_app

    store = tmp_path / "runs"
    cfg = load_config(
        env={},
        overrides={
            "data_dir": str(store),
            "host": "gen",
            "simulated.hosts": 1,
            "simulated.gpus_per_host": 2,
            "simulated.scenarios": ["eager_inference"],
            "store.flush_seconds": 600.0,
        },
    )
    now = time.time_ns()
    generate(cfg, now - 1200 * 10**9, now, workers=1)
    page = TestClient(create_app(AgentContext(live=None, data_dir=store))).get(
        "/api/findings?range=1h"
    )
    found = [f for f in page.json()["findings"] if f["subject"].get("job_id")]
    assert found, "the simulated store should give a finding on a job"
    rule, job = found[0]["rule_id"], found[0]["subject"]["job_id"]

    proc = start(store, job)
    try:
        out = invoke(
            "profile", "--job", job, "--steps", "3", "--finding", rule,
            "--data-dir", str(store), "--wait", "60", "--format", "json",
        )  # fmt: skip
    finally:
        finish(proc, store)
    (result,) = json.loads(out)
    html = TestClient(create_app(AgentContext(live=None, data_dir=store))).get(
        "/findings?range=1h", headers={"accept": "text/html"}
    )
    assert html.status_code == 200
    block = html.text.split(f'data-rule="{rule}"')[1].split('<div class="finding')[0]
    assert "<b>Profiled:</b>" in block
    assert result["summary"] in block and result["trace_path"] in block


def test_no_answer_is_one_clear_error(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    args = ["profile", "--job", "nobody", "--data-dir", str(store), "--wait", "0.5"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert "no tracked process of job 'nobody' answered within 0.5 s" in str(result.exception)
    body = json.loads((store / "profile-requests" / "nobody.json").read_text())
    assert body["job_id"] == "nobody" and body["steps"] == 5  # the request stays, to expire
    listed = CliRunner().invoke(app, ["profile", "--job", "nobody", "--data-dir", str(store),
                                      "--list", "--format", "json"])  # fmt: skip
    assert listed.exit_code == 0 and json.loads(listed.stdout) == []
