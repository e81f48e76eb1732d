"""Alertmanager's webhook payloads, as real Alertmanagers posted them (shared scheduler data,
section 7 of its MANIFEST), through the parser and the receiver."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx
import pytest

from gpulens.collect.alertmanager import (
    WebhookError,
    WebhookMessage,
    WebhookReceiver,
    gpu_alert,
    parse_webhook,
)

MSTEAMS = "data/scheduler/prometheus-msteams_prometheus-msteams"
ONE = f"{MSTEAMS}/pkg/card/testdata/prom_post_request.json"
TWO = f"{MSTEAMS}/alert/testdata/prom_post_request_2_alerts.json"


def test_one_alert(shared: Path) -> None:
    message = parse_webhook((shared / ONE).read_bytes(), "one")
    assert (message.version, message.status, message.receiver) == ("4", "firing", "teams_proxy")
    assert message.group_labels == {"alertname": "high_memory_load"}
    assert message.common_labels["monitor"] == "master"
    assert message.external_url == "http://docker.for.mac.host.internal:9093"
    assert message.group_key == '{}:{alertname="high_memory_load"}'
    (alert,) = message.alerts
    assert alert.name == "high_memory_load" and alert.status == "firing"  # from the message
    assert alert.starts_at == "2018-03-07T06:33:21.873077559-05:00"
    assert alert.ends_at is None  # 0001-01-01T00:00:00Z: still firing
    assert alert.fingerprint is None and alert.generator_url is None  # an older sender
    assert alert.annotations["summary"] == "Server High Memory usage"
    row = gpu_alert(alert)
    # `job` is Prometheus's scrape job (docker_nodes), never taken for the Slurm job
    assert row["job"] is None and row["labels"]["job"] == "docker_nodes"
    # no Hostname: the node is the instance label
    assert row["node"] == "instance-with-hyphen_and_underscore"
    assert row["gpu"] is None and row["user"] is None


def test_two_alerts_of_one_group(shared: Path) -> None:
    message = parse_webhook(json.loads((shared / TWO).read_text()), "two")
    assert [a.name for a in message.alerts] == ["high_memory_load", "high_memory_load2"]
    assert [a.annotations["description"] for a in message.alerts] == [
        "10.80.40.11 reported high memory usage with 23.28%.",
        "10.80.40.12 reported high memory usage with 61.54%.",
    ]
    assert message.truncated_alerts == 0


def test_gpu_labels_of_agent_and_dcgm_alerts() -> None:
    agent = {"alertname": "GpulensGpuIdleAllocated", "job_id": "77", "user": "ana",
             "UUID": "GPU-1", "gpu": "3", "Hostname": "n1", "instance": "n1:9477",
             "job": "gpulens"}  # fmt: skip
    dcgm = {"alertname": "GpulensGpuIdleAllocated", "hpc_job": "88", "gpu": "2",
            "instance": "10.0.0.5:9400", "pod": "p", "namespace": "ns"}  # fmt: skip
    body = {"version": "4", "status": "resolved", "alerts": [
        {"status": "firing", "labels": agent, "startsAt": "2026-01-01T00:00:00Z"},
        {"labels": dcgm, "endsAt": "2026-01-01T01:00:00Z"}]}  # fmt: skip
    first, second = (gpu_alert(a) for a in parse_webhook(body).alerts)
    assert (first["job"], first["user"], first["gpu"], first["node"]) == (
        "77",
        "ana",
        "GPU-1",
        "n1",
    )
    assert first["status"] == "firing" and first["gpu_index"] == "3"
    assert (second["job"], second["gpu"], second["node"]) == ("88", "2", "10.0.0.5")
    assert second["status"] == "resolved" and second["ends_at"] == "2026-01-01T01:00:00Z"


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"not json", "not JSON"),
        (b"[]", "no 'alerts' list"),
        (b'{"alerts": {}}', "no 'alerts' list"),
        (b'{"alerts": [1]}', r"alerts\[0\] is not an object"),
        (b'{"alerts": [{"labels": ["a"]}]}', r"alerts\[0\].labels is not an object"),
    ],
)
def test_bad_bodies_say_what_is_wrong(body: bytes, match: str) -> None:
    with pytest.raises(WebhookError, match=match):
        parse_webhook(body, "POST /")


def test_receiver_hands_each_message_over_and_refuses_bad_bodies(shared: Path) -> None:
    got: list[WebhookMessage] = []
    receiver = WebhookReceiver("127.0.0.1", 0, got.append)
    receiver.start()
    try:
        host, port = receiver.address
        url = f"http://{host}:{port}/"
        ok = httpx.post(url, content=(shared / TWO).read_bytes(), timeout=10)
        bad = httpx.post(url, content=b'{"status": "firing"}', timeout=10)
    finally:
        receiver.close()
    assert ok.status_code == 200 and bad.status_code == 400
    assert "no 'alerts' list" in bad.text
    assert len(got) == 1 and len(got[0].alerts) == 2


def test_alerts_parse_command(shared: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "gpulens", "alerts", "parse", str(shared / TWO), "--format", "json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["alertname"] for r in rows] == ["high_memory_load", "high_memory_load2"]
    text = subprocess.run(
        [sys.executable, "-m", "gpulens", "alerts", "parse", str(shared / ONE)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert text.stdout.startswith("FIRING high_memory_load (no holder; GPU ? on instance-with")
    bad = subprocess.run(
        [sys.executable, "-m", "gpulens", "alerts", "parse", str(shared / MSTEAMS / "LICENSE")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode == 4 and "not JSON" in " ".join(bad.stderr.split())


def test_receiver_answers_bad_requests_and_failing_output(shared: Path) -> None:
    # a Content-Length that is not a number, or negative; an output that cannot be written
    def refuse(message: WebhookMessage) -> None:
        raise OSError(28, "No space left on device")

    receiver = WebhookReceiver("127.0.0.1", 0, refuse)
    receiver.start()
    try:
        host, port = receiver.address
        answers = []
        for length in (b"abc", b"-1"):
            with socket.create_connection((host, port), timeout=10) as conn:
                conn.sendall(
                    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n"
                )
                answers.append(conn.recv(4096).split(b"\r\n", 1)[0])
        full = httpx.post(f"http://{host}:{port}/", content=(shared / TWO).read_bytes(), timeout=10)
    finally:
        receiver.close()
    assert answers == [b"HTTP/1.0 400 Bad Request", b"HTTP/1.0 413 Request Entity Too Large"]
    assert full.status_code == 500 and "No space left on device" in full.text
