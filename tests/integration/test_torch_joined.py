"""With GPU telemetry, the tracker's app readings and the telemetry combine on the job: the
agent's process readings carry the job (GPULENS_JOB, as ProcAttribution reads it from the real
/proc of a process started with it), the report's frame joins the tracker's data wait into the
job's GPU intervals, and input_bound comes from the telemetry rule, once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.integration.integrations_check import report  # noqa: E402

import gpulens.torch as gt  # noqa: E402
from gpulens.collect.procs.attribution import ProcAttribution  # noqa: E402
from gpulens.model import Kind, Reading  # noqa: E402
from gpulens.store import SegmentWriter  # noqa: E402

JOB = "joined-a"
UUID = "GPU-5c1d0a4e-0000-4000-8000-00000000a100"


def _agent_labels() -> dict[str, str]:
    """The identity labels the agent gives a process started with GPULENS_JOB=JOB."""
    env = {"PATH": "/usr/bin:/bin", "GPULENS_JOB": JOB}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        deadline = time.monotonic() + 10
        labels: dict[str, str] = {}
        while time.monotonic() < deadline and "job_id" not in labels:
            labels = dict(ProcAttribution(Path("/proc")).identify(child.pid))
            time.sleep(0.05)
        return labels
    finally:
        child.kill()
        child.wait()


def _telemetry(data_dir: Path, start_ns: int, end_ns: int, labels: dict[str, str]) -> None:
    """One GPU at 1 s, as the agent records it: a process of the job holding 20 GB while the
    GPU is a third busy (what a loader-starved training step looks like from outside)."""
    gpu = {
        "host": "node-1",
        "gpu_uuid": UUID,
        "gpu_index": "0",
        "gpu_model": "NVIDIA A100-SXM4-80GB",
    }
    with SegmentWriter(data_dir, "node-1") as writer:
        for ts in range(start_ns, end_ns, 1_000_000_000):
            writer.append(
                [
                    Reading(Kind.GPU, ts, gpu, {"gpu_util_ratio": 0.4, "sm_active_ratio": 0.3,
                                                "memory_used_bytes": 20e9,
                                                "memory_total_bytes": 80e9}),
                    Reading(Kind.PROCESS, ts, {**gpu, "pid": str(os.getpid()), **labels},
                            {"process_memory_used_bytes": 20e9}),
                ]
            )  # fmt: skip


def _slow_loader(n: int):  # type: ignore[no-untyped-def]
    for _ in range(n):
        time.sleep(0.15)  # the loader: 150 ms of each step
        yield torch.randn(32, 64)


def test_tracker_and_telemetry_join_on_the_job(tmp_path: Path) -> None:
    labels = _agent_labels()
    assert labels["job_id"] == JOB
    store = tmp_path / "store"
    start = time.time_ns()
    model = torch.nn.Linear(64, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gt.track(job=JOB, data_dir=store, model=model, optimizer=opt, interval_s=0.5) as run:
        for x in run.wrap(_slow_loader(12)):
            model(x).sum().backward()
            opt.step()
            run.step(samples=32)
    end = time.time_ns()
    # the GPU's readings over the run's span: every interval of the job then has both sides
    # (an interval with telemetry and no app reading would fall back to the host's CPU)
    _telemetry(store, start, end, labels)

    doc = report(store, JOB)
    [entry] = doc["training"]
    assert entry["telemetry"] is True and entry["data_wait_ratio"] > 0.5
    assert [g["gpu_uuid"] for g in doc["gpus"]] == [UUID]
    bound = [f for f in doc["findings"] if f["rule_id"] == "input_bound"]
    assert len(bound) == 1, bound  # the telemetry rule's, not a second one from app readings
    metrics = {e["metric"]: e for e in bound[0]["evidence"]}
    assert "sm_active" in metrics  # the GPU's side
    assert metrics["data_wait"]["value"] > 0.5  # the framework's side, joined on the job
    assert "framework's timing" not in metrics["data_wait"]["note"]
