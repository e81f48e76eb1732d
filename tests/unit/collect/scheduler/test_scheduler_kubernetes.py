"""Kubernetes GPU pods and workloads from the real manifests in ../shared/data/scheduler, and
a pod list with pending and running pods and nodes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpulens.collect.scheduler.errors import SchedulerInputError
from gpulens.collect.scheduler.kubernetes import parse_kubernetes, read_kubernetes

S = "data/scheduler"


@pytest.mark.parametrize(
    ("name", "job_id", "queue", "gpus"),
    [
        ("NVIDIA_KAI-Scheduler/examples/quickstart/pods/gpu-pod.yaml", "default/gpu-pod",
         "default-queue", 1.0),
        ("NVIDIA_k8s-device-plugin/testdata/job-1.yaml", "Job/j-e2e-1", None, 1.0),
        ("volcano-sh_volcano/example/MindSpore-example/mindspore_gpu/mindspore-gpu.yaml",
         "Job/mindspore-gpu", None, 2.0),
        ("kubernetes-sigs_kueue/site/static/examples/serving-workloads/sample-hami.yaml",
         "Deployment/gpu-burn", "user-queue", 2.0),
    ],
)  # fmt: skip
def test_real_manifests(
    shared: Path, name: str, job_id: str, queue: str | None, gpus: float
) -> None:
    state = read_kubernetes(shared / S / name)
    rows = state.jobs.to_pylist()
    assert [(r["job_id"], r["queue"], r["gpus"]) for r in rows] == [(job_id, queue, gpus)]
    assert rows[0]["state"] == "PENDING"  # a manifest: asked for, held by nothing


def test_a_manifest_without_gpus_is_one_clear_error(shared: Path) -> None:
    path = shared / S / "volcano-sh_volcano/example/deployment/queue.yaml"
    with pytest.raises(SchedulerInputError, match=r"queue\.yaml: it holds no GPU pod"):
        read_kubernetes(path)


def _pod(name: str, phase: str, gpus: int, node: str | None = None, **labels: str) -> dict:
    status: dict = {"phase": phase}
    if phase == "Running":
        status["startTime"] = "2026-11-30T10:00:00Z"
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": labels,
            "creationTimestamp": "2026-11-30T09:00:00Z",
        },
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": status,
    }


def test_pod_list_pending_running_and_nodes() -> None:
    node = {
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    doc = {
        "kind": "List",
        "items": [
            _pod("train", "Running", 4, "n1", **{"kueue.x-k8s.io/queue-name": "lq"}),
            _pod("wait", "Pending", 8),
            _pod("cpu", "Running", 0, "n1"),
            node,
        ],
    }
    state = parse_kubernetes([json.loads(json.dumps(doc))], "dump.json")
    rows = {r["job_id"]: r for r in state.jobs.to_pylist()}
    assert set(rows) == {"team-a/train", "team-a/wait"}
    assert (rows["team-a/train"]["state"], rows["team-a/train"]["queue"]) == ("RUNNING", "lq")
    assert rows["team-a/train"]["start_s"] == datetime(2026, 11, 30, 10, tzinfo=UTC).timestamp()
    assert (rows["team-a/wait"]["state"], rows["team-a/wait"]["queue"]) == ("PENDING", "team-a")
    assert rows["team-a/wait"]["start_s"] is None
    assert state.nodes.to_pylist() == [
        {"node": "n1", "node_state": "READY", "gpus": 8.0, "used_gpus": 4.0, "queues": "lq"}
    ]


def test_pods_and_nodes_in_separate_files(tmp_path: Path) -> None:
    """`kubectl get pods -A -o json > pods.json; kubectl get nodes -o json > nodes.json`."""
    pods = tmp_path / "pods.json"
    nodes = tmp_path / "nodes.yaml"
    pods.write_text(json.dumps({"kind": "List", "items": [_pod("t", "Running", 2, "n1")]}))
    nodes.write_text(
        "kind: NodeList\nitems:\n- kind: Node\n  metadata: {name: n1}\n  status:\n"
        "    allocatable: {nvidia.com/gpu: '4'}\n    conditions: [{type: Ready, status: 'True'}]\n"
    )
    state = read_kubernetes(pods, nodes)
    assert state.nodes.to_pylist() == [
        {"node": "n1", "node_state": "READY", "gpus": 4.0, "used_gpus": 2.0, "queues": "team-a"}
    ]
