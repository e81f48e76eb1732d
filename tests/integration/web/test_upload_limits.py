"""Uploads to a running `gpulens agent` are bounded: bad and oversized traces get one 4xx with
a clear message (never a 500, never a traceback in the log), the agent's memory stays small, a
client that goes away mid-upload is one log line, at most two uploads run at once, and SIGTERM
still stops the agent promptly afterwards.

The agent runs with `limits.max_inflated_bytes` lowered to 32 MiB (through its environment) so
that small files exercise the same limits as GB-size ones.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.corpus import traces as corpus

MiB = 1 << 20
INFLATED_LIMIT = 32 * MiB


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[str], str]]:
    tmp = tmp_path_factory.mktemp("agent")
    port = _free_port()
    config = tmp / "gpulens.toml"
    config.write_text(
        f'data_dir = "{tmp / "data"}"\n[collect]\ncollectors = ["simulated"]\n'
        f'[simulated]\nhosts = 1\n[agent]\nlisten = "127.0.0.1:{port}"\n',
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env["GPULENS_LIMITS_MAX_INFLATED_BYTES"] = str(INFLATED_LIMIT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulens", "agent", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"agent exited early: {proc.communicate()}")
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("agent did not come up")
            time.sleep(0.2)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _post(url: str, path: Path, name: str) -> httpx.Response:
    return httpx.post(
        f"{url}/api/traces/upload",
        params={"name": name},
        content=path.read_bytes(),
        headers={"content-type": "application/octet-stream"},
        timeout=60,
    )


CASES = [
    ("gzip_zeros", 512 * MiB, 422, "not valid JSON"),
    ("gzip_events", 64 * MiB, 413, "limits.max_inflated_bytes"),
    ("huge_string", 8 * MiB, 413, "limits.max_string_bytes"),
    ("huge_metadata_string", 8 * MiB, 413, "limits.max_string_bytes"),
    ("deep_nesting", 1_000_000, 413, "limits.max_nesting"),
    ("bad_times", 64 * 1024, 422, "out of range"),
    ("string_times", 64 * 1024, 422, "`ts` of an event is 'abc'"),
    ("garbage", 1 * MiB, 422, "not valid JSON"),
    ("no_trace_events", 4 * MiB, 422, "no `traceEvents`"),
    ("truncated", 1 * MiB, 422, "not valid JSON"),
    ("whitespace", 16 * MiB, 422, "empty file"),
]


def test_bad_uploads_are_one_clear_4xx_and_memory_stays_small(
    agent: tuple[subprocess.Popen[str], str], tmp_path: Path
) -> None:
    proc, url = agent
    for name, size, status, words in CASES:
        path = corpus.CASES[name](tmp_path, size)
        start = time.monotonic()
        r = _post(url, path, f"{name}.json")
        detail = r.json()["detail"]
        assert r.status_code == status, (name, r.status_code, detail)
        assert detail.startswith(f"{name}.json: ") and words in detail, (name, detail)
        assert "gpulens-upload" not in detail  # no server path
        assert time.monotonic() - start < 30, name
        path.unlink()
    ok = corpus.valid_gzip(tmp_path, 4 * MiB)
    assert _post(url, ok, "fine.json.gz").status_code == 200
    assert _peak_rss_mib(proc.pid) < 600  # a 512 MiB bomb and a 64 MiB one never inflated


def test_two_uploads_at_a_time_and_a_client_that_leaves(
    agent: tuple[subprocess.Popen[str], str],
) -> None:
    _, url = agent
    port = int(url.rsplit(":", 1)[1])
    slow = []
    for i in range(2):  # two uploads that send their headers and part of their body, then wait
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(
            f"POST /api/traces/upload?name=slow{i}.json HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/octet-stream\r\nContent-Length: 10000000\r\n\r\n".encode()
            + b'{"traceEvents": ['
            + b" " * 100_000
        )
        slow.append(s)
    time.sleep(1.0)
    busy = httpx.post(
        f"{url}/api/traces/upload",
        content=b'{"traceEvents": []}',
        headers={"content-type": "application/octet-stream"},
        timeout=10,
    )
    assert busy.status_code == 503 and busy.headers["retry-after"] == "5"
    for s in slow:  # both clients go away mid-upload
        s.close()
    time.sleep(1.0)
    after = httpx.post(
        f"{url}/api/traces/upload?name=t.json",
        content=b'{"traceEvents": []}',
        headers={"content-type": "application/octet-stream"},
        timeout=10,
    )
    assert after.status_code == 200  # the slots are free again
    assert httpx.get(url + "/healthz", timeout=5).status_code == 200


def test_sigterm_after_the_uploads_and_a_log_without_tracebacks(
    agent: tuple[subprocess.Popen[str], str], tmp_path: Path
) -> None:
    proc, url = agent
    big = corpus.huge_string(tmp_path, 64 * MiB)  # was never answered, and SIGTERM ignored
    start = time.monotonic()
    r = _post(url, big, "big.json")
    assert r.status_code == 413 and time.monotonic() - start < 30
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=20)
    assert time.monotonic() - start < 15
    assert "Traceback" not in stderr, stderr[-3000:]
    left = [line for line in stderr.splitlines() if "disconnected" in line]
    assert len(left) == 2 and all("upload 'slow" in line for line in left), stderr[-3000:]
