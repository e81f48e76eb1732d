"""`gpulens agent` as a service manager runs it: one port for /metrics, the dashboard and the
API; a token beyond loopback; SIGTERM and SIGINT stop it with the buffer flushed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

GPULENS = [sys.executable, "-m", "gpulens"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_agent(
    tmp: Path, listen: str, token: str | None = None, *options: str
) -> subprocess.Popen[str]:
    config = tmp / "gpulens.toml"
    lines = [
        f'data_dir = "{tmp / "data"}"',
        'host = "agent-test"',
        "[collect]",
        'collectors = ["simulated"]',
        "[store]",
        "flush_seconds = 3600.0  # nothing reaches disk before the shutdown flush",
        "[simulated]",
        "hosts = 1",
        "[agent]",
        f'listen = "{listen}"',
        "findings_every_seconds = 5.0",
    ]
    if token:
        lines.append(f'token = "{token}"')
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env["COLUMNS"] = "500"
    return subprocess.Popen(
        [*GPULENS, "agent", "--config", str(config), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_ready(proc: subprocess.Popen[str], url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"agent exited early: {proc.communicate()}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("agent did not come up")


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str, Path]]:
    port = free_port()
    proc = start_agent(tmp_path, f"127.0.0.1:{port}")
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(proc, url)
        yield proc, url, tmp_path / "data"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_metrics_then_sigterm_flushes(agent: tuple[subprocess.Popen[str], str, Path]) -> None:
    proc, url, data = agent
    families: dict[str, object] = {}
    deadline = time.monotonic() + 30
    wanted = {"gpulens_gpu_state", "gpulens_sm_active_ratio", "gpulens_collector_up"}
    while time.monotonic() < deadline and not wanted <= families.keys():
        time.sleep(1)
        text = httpx.get(url + "/metrics", timeout=5).text
        families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "gpulens_gpu_state" in families, sorted(families)
    assert "gpulens_sm_active_ratio" in families and "gpulens_collector_up" in families
    time.sleep(2)
    stopped_at = time.time()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "flushed" in stderr
    files = list((data / "gpu").rglob("*.parquet"))
    assert files, "the shutdown flush wrote no GPU segment"
    (newest,) = duckdb.sql(
        f"SELECT epoch(max(ts)) AS t, count(DISTINCT gpu_uuid) AS g "
        f"FROM read_parquet({[str(f) for f in files]!r})"
    ).fetchall()
    assert newest[1] == 4  # one simulated host, four GPUs
    assert stopped_at - newest[0] < 5  # readings up to the moment it was stopped


TOKEN = "s3cret-token-0123456789"


@pytest.mark.parametrize("show", [False, True], ids=["quiet", "show-token"])
def test_token_beyond_loopback_and_sigint(tmp_path: Path, show: bool) -> None:
    port = free_port()
    options = ["--show-token"] if show else []
    proc = start_agent(tmp_path, f"0.0.0.0:{port}", TOKEN, *options)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(proc, url)
        assert httpx.get(url + "/metrics", timeout=5).status_code == 401
        bad = {"Authorization": "Bearer nope"}
        assert httpx.get(url + "/metrics", headers=bad, timeout=5).status_code == 401
        good = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(url + "/metrics", headers=good, timeout=5).status_code == 200
        # the query string is a credential for a dashboard page's first load only
        assert httpx.get(f"{url}/metrics?token={TOKEN}", timeout=5).status_code == 401
        with httpx.Client(follow_redirects=True, timeout=30) as browser:
            page = browser.get(f"{url}/?token={TOKEN}")
            assert page.status_code == 200 and page.url.params.get("token") is None
            assert browser.get(f"{url}/api/now").status_code == 200  # with the cookie
        time.sleep(1)  # the ready line is printed once the server has started
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr
        assert "gpulens agent: dashboard" in stdout
        assert (TOKEN in stdout + stderr) is show, stdout  # printed only when asked
        if show:
            assert f"?token={TOKEN}" in stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_weak_token_is_refused_without_printing_it(tmp_path: Path) -> None:
    proc = start_agent(tmp_path, f"127.0.0.1:{free_port()}", "short-7")
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stderr
    assert "agent.token" in stderr and "at least 16" in stderr
    assert "short-7" not in stdout + stderr and "Traceback" not in stderr


def test_a_rebinding_host_and_a_cross_site_post_are_refused(
    agent: tuple[subprocess.Popen[str], str, Path],
) -> None:
    """What any web page the user visits could do to a loopback agent without a token."""
    _, url, _ = agent
    rebound = httpx.get(url + "/api/now", headers={"Host": "rebind.attacker.example"}, timeout=5)
    assert rebound.status_code == 400 and "loopback" in rebound.json()["detail"]
    body = b'{"traceEvents": []}'
    form = {"content-type": "text/plain", "origin": "http://attacker.example"}
    post = httpx.post(url + "/api/traces/upload", content=body, headers=form, timeout=5)
    assert post.status_code == 403, post.text
    plain = httpx.post(
        url + "/api/traces/upload", content=body, headers={"content-type": "text/plain"}
    )
    assert plain.status_code == 415, plain.text
    assert httpx.get(url + "/api/now", headers={"Host": "localhost"}, timeout=5).status_code == 200


def test_beyond_loopback_without_token_is_refused(tmp_path: Path) -> None:
    proc = start_agent(tmp_path, f"0.0.0.0:{free_port()}")
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "without a token" in stderr and "agent.token" in stderr


def test_port_in_use_is_one_clear_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = start_agent(tmp_path, f"127.0.0.1:{port}")
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stderr
    assert f"could not listen on 127.0.0.1:{port}" in stderr
    assert "Traceback" not in stderr


def test_unusable_data_dir_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("a file where the store should go\n")
    proc = start_agent(tmp_path, f"127.0.0.1:{free_port()}")
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stderr
    assert "cannot be created" in stderr and "--data-dir" in stderr
    assert "Traceback" not in stderr


def test_speed_needs_simulated_collectors(tmp_path: Path) -> None:
    config = tmp_path / "gpulens.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[collect]\ncollectors = ["simulated", "nvml"]\n',
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    proc = subprocess.run(
        [*GPULENS, "agent", "--config", str(config), "--speed", "60"],
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "500"},
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--speed 60 needs simulated collectors only" in proc.stderr
    assert "'nvml'" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "data").exists()  # refused before anything started
