"""NVML failing per call under a real agent (the fault matrix of docs/reliability.md): a lost
GPU, a timed-out call, a call not supported and an unknown error, each on its own GPU of eight,
through the binding seam (tests/integration/agent_nvml_faults_worker.py).

The agent keeps recording every other GPU each second; the lost GPU says so once (a gpu_lost
event in the store) and leaves /metrics and the live strip; a failed call leaves
only its metrics out, never as 0, and is counted per call and NVML error in /metrics; the
collector stays up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.faults import free_port, wait_healthy

from gpulens import catalog
from gpulens.model import Kind

WORKER = Path(__file__).with_name("agent_nvml_faults_worker.py")
RUN_S = 8.0


def gpu_values(text: str) -> dict[str, dict[str, float]]:
    """GPU index (the `gpu` label) -> metric -> value, for the last tick's GPU readings in a
    scrape (not the waste counters of closed intervals, which outlive a lost GPU by design)."""
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            index = s.labels.get("gpu")
            metric = catalog.METRICS.get(s.name.removeprefix("gpulens_"))
            if index is not None and metric is not None and metric.kind is Kind.GPU:
                out.setdefault(index, {})[s.name] = s.value
    return out


@pytest.mark.slow
def test_nvml_errors_per_call_leave_the_other_gpus_recording(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "gpulens.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\nhost = "faults"\n[store]\nflush_seconds = 1.0\n'
        f'[simulated]\nhosts = 1\ngpus_per_host = 8\n[agent]\nlisten = "127.0.0.1:{port}"\n',
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url)
        started = time.time()
        time.sleep(RUN_S)
        text = httpx.get(url + "/metrics", timeout=10).text
        now = httpx.get(url + "/api/now", timeout=60).text
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    gpus = gpu_values(text)
    assert "1" not in gpus, "a lost GPU is no longer shown"
    assert {"0", "2", "3", "4", "5", "6", "7"} <= gpus.keys()
    assert "gpulens_gpu_util_ratio" not in gpus["2"] and "gpulens_power_watts" in gpus["2"]
    assert "gpulens_power_watts" not in gpus["3"] and "gpulens_gpu_util_ratio" in gpus["3"]
    assert "gpulens_memory_used_bytes" not in gpus["4"] and "gpulens_power_watts" in gpus["4"]
    for healthy in ("0", "5"):
        assert {"gpulens_gpu_util_ratio", "gpulens_power_watts"} <= gpus[healthy].keys()
    up = {
        s.labels["collector"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "gpulens_collector_up"
    }
    assert up["nvml@sim-node-0"] == 1.0
    failed_calls = {
        (s.labels["call"], s.labels["error"]): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "gpulens_collector_call_errors_total"
        and s.labels["collector"] == "nvml@sim-node-0"
    }
    # one failure a tick for each failing call, from FAULT_AFTER_S on; lost and not supported
    # are events, not counts
    assert set(failed_calls) == {("utilization", "timeout"), ("memory", "unknown")}
    assert all(n >= RUN_S - 5 for n in failed_calls.values()), failed_calls
    assert '"gpus":7' in now  # the live strip counts the GPUs still read

    data = tmp_path / "data"
    gpu_files = [str(f) for f in (data / "gpu").rglob("*.parquet")]
    rows = duckdb.sql(
        f"SELECT gpu_index, count(DISTINCT ts) AS ticks, count(power_watts) AS power "
        f"FROM read_parquet({gpu_files!r}, union_by_name=true) "
        f"WHERE epoch(ts) >= {started + RUN_S - 5} AND epoch(ts) < {started + RUN_S - 1} "
        "GROUP BY gpu_index ORDER BY gpu_index"
    ).fetchall()
    ticks = {index: n for index, n, _ in rows}
    power = {index: n for index, _, n in rows}
    expected = 3  # of 4 seconds, once every fault is on
    for index in ("0", "2", "3", "4", "5", "6", "7"):
        assert ticks[index] >= expected, (index, ticks)  # a tick a second, faults or not
    assert "1" not in ticks  # lost, never read again
    assert power["3"] == 0  # absent, not 0
    event_files = [str(f) for f in (data / "event").rglob("*.parquet")]
    ((lost,),) = duckdb.sql(
        f"SELECT count(*) FROM read_parquet({event_files!r}, union_by_name=true) "
        "WHERE event = 'gpu_lost' AND gpu_index = '1'"
    ).fetchall()
    assert lost == 1
