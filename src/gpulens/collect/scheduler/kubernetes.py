"""Kubernetes pods (``kubectl get pods -A -o json`` or YAML, a List, or manifests): GPU pods,
pending and running, and GPU nodes (pure parse; `read_kubernetes` reads a file).

A pod's GPUs are its ``nvidia.com/gpu`` requests (a limit alone counts, as the device plugin
sets request = limit), the larger of the app containers' sum and any init container. Its queue
is a Volcano Job's ``spec.queue``, else the first of the Kueue, KAI, Volcano or YuniKorn
queue labels/annotations, else its namespace. Workloads given as manifests (Job, Deployment,
StatefulSet, ReplicaSet, Volcano Job) count their pod template × replicas. An object without
status (a manifest, nothing observed yet) is pending: it asks for GPUs nothing holds. A
``Node`` gives its allocatable GPUs; its used GPUs are those of the running pods bound to it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpulens.cluster_schema import (
    END,
    GPUS,
    JOB_ID,
    JOB_SCHEMA,
    NODE,
    NODE_SCHEMA,
    NODE_STATE,
    NODES,
    QUEUE,
    QUEUES,
    START,
    STATE,
    SUBMIT,
    TEAM,
    USED,
    USER,
)
from gpulens.collect.scheduler.errors import SchedulerInputError

GPU = "nvidia.com/gpu"
QUEUE_KEYS = (
    "kueue.x-k8s.io/queue-name",
    "kai.scheduler/queue",
    "runai/queue",
    "scheduling.volcano.sh/queue-name",
    "volcano.sh/queue-name",
    "yunikorn.apache.org/queue",
)
FIX = "Pass `kubectl get pods -A -o json` (or -o yaml), optionally with `kubectl get nodes`"
_PHASES = {"Pending": "PENDING", "Running": "RUNNING", "Succeeded": "COMPLETED"}


@dataclass(frozen=True, slots=True)
class KubernetesState:
    """The pods (as jobs) and GPU nodes of a dump; `skipped` counts objects of other kinds."""

    jobs: pa.Table
    nodes: pa.Table
    skipped: int


def quantity(value: Any) -> float:
    """A Kubernetes quantity of a countable resource (``"2"``, ``2``, ``"1k"``) as a number."""
    text = str(value).strip()
    scale = {"k": 1e3, "M": 1e6, "G": 1e9}.get(text[-1:], 1.0)
    try:
        return float(text[:-1] if scale != 1.0 else text) * scale
    except ValueError:
        return 0.0


def pod_gpus(spec: Mapping[str, Any]) -> float:
    """GPUs a pod spec asks for."""

    def one(container: Any) -> float:
        res = container.get("resources") or {} if isinstance(container, Mapping) else {}
        asked = (res.get("requests") or {}).get(GPU, (res.get("limits") or {}).get(GPU, 0))
        return quantity(asked)

    main = sum(one(c) for c in spec.get("containers") or [])
    init = max((one(c) for c in spec.get("initContainers") or []), default=0.0)
    return max(main, init)


def iso_seconds(stamp: Any) -> float | None:
    """An RFC 3339 time of the Kubernetes API as epoch seconds; None when absent or not one."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _queue(meta: Mapping[str, Any]) -> str | None:
    for where in (meta.get("labels") or {}, meta.get("annotations") or {}):
        for key in QUEUE_KEYS:
            if where.get(key):
                return str(where[key])
    return str(meta["namespace"]) if meta.get("namespace") else None


def _pod_row(pod: Mapping[str, Any]) -> dict[str, Any]:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    finished = [
        iso_seconds((cs.get("state") or {}).get("terminated", {}).get("finishedAt"))
        for cs in status.get("containerStatuses") or []
    ]
    ends = [f for f in finished if f is not None]
    return {
        JOB_ID: f"{meta.get('namespace', 'default')}/{meta.get('name', '')}",
        QUEUE: _queue(meta),
        USER: None,
        TEAM: meta.get("namespace"),
        STATE: _PHASES.get(phase, phase.upper()),
        GPUS: pod_gpus(spec),
        SUBMIT: iso_seconds(meta.get("creationTimestamp")),
        START: iso_seconds(status.get("startTime")) if phase != "Pending" else None,
        END: max(ends) if ends and phase in ("Succeeded", "Failed") else None,
        NODES: spec.get("nodeName"),
    }


def _templates(obj: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, Any], float]]:
    """(pod template, replicas) of a workload manifest."""
    spec = obj.get("spec") or {}
    kind = obj.get("kind")
    if kind == "Job" and "tasks" in spec:  # batch.volcano.sh
        for task in spec.get("tasks") or []:
            yield task.get("template") or {}, float(task.get("replicas", 1))
    elif kind == "Job":
        yield spec.get("template") or {}, float(spec.get("parallelism", 1))
    elif kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        yield spec.get("template") or {}, float(spec.get("replicas", 1))


def _objects(doc: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(doc, Mapping):
        if isinstance(doc.get("items"), list):
            for item in doc["items"]:
                yield from _objects(item)
        elif doc.get("kind"):
            yield doc
    elif isinstance(doc, list):
        for item in doc:
            yield from _objects(item)


def parse_kubernetes(docs: list[Any], source: str) -> KubernetesState:
    """Jobs (one per GPU pod or workload) and GPU nodes of decoded Kubernetes documents."""
    rows, nodes, skipped = [], [], 0
    for obj in (o for d in docs for o in _objects(d)):
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        if kind == "Pod":
            row = _pod_row(obj)
            if row[GPUS] > 0:
                rows.append(row)
        elif kind == "Node":
            alloc = (obj.get("status") or {}).get("allocatable") or {}
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (obj.get("status") or {}).get("conditions") or []
            )
            down = not ready or (obj.get("spec") or {}).get("unschedulable")
            nodes.append(
                {
                    NODE: str(meta.get("name", "")),
                    NODE_STATE: "DOWN" if down else "READY",
                    GPUS: quantity(alloc.get(GPU, 0)),
                    USED: 0.0,
                    QUEUES: "",
                }
            )
        elif templates := list(_templates(obj)):
            for template, replicas in templates:
                gpus = pod_gpus(template.get("spec") or {}) * replicas
                if gpus > 0:
                    queue = (obj.get("spec") or {}).get("queue") or _queue(
                        {**(template.get("metadata") or {}), **meta}
                    )
                    rows.append(
                        {
                            JOB_ID: f"{kind}/{meta.get('name', '')}",
                            QUEUE: queue,
                            STATE: "PENDING",
                            GPUS: gpus,
                        }
                    )
        else:
            skipped += 1
    _bind(nodes, rows)
    return KubernetesState(
        jobs=pa.Table.from_pylist(rows, schema=JOB_SCHEMA),
        nodes=pa.Table.from_pylist(nodes, schema=NODE_SCHEMA),
        skipped=skipped,
    )


def _bind(nodes: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    """Used GPUs per node from its running pods; a node's queues are those of its pods."""
    used: dict[str, float] = defaultdict(float)
    queues: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        if row.get(STATE) == "RUNNING" and row.get(NODES):
            used[row[NODES]] += row[GPUS]
            queues[row[NODES]].add(str(row[QUEUE]))
    for node in nodes:
        node[USED] = used.get(node[NODE], 0.0)
        node[QUEUES] = ",".join(sorted(queues.get(node[NODE], ())))


def _documents(path: Path) -> list[Any]:
    data = path.read_bytes()
    try:
        return [json.loads(data)]
    except ValueError:
        pass
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        raise SchedulerInputError(
            str(path), "it is not JSON, and reading YAML needs PyYAML", FIX + "."
        ) from None
    try:
        return [d for d in yaml.safe_load_all(data) if d is not None]
    except yaml.YAMLError as exc:
        raise SchedulerInputError(str(path), f"not JSON or YAML ({exc})", FIX + ".") from None


def read_kubernetes(*paths: Path) -> KubernetesState:
    """`parse_kubernetes` of JSON or YAML files read as one cluster (pods and nodes may come in
    separate files; YAML needs PyYAML)."""
    docs = []
    for path in paths:
        try:
            docs += _documents(path)
        except OSError as exc:
            raise SchedulerInputError(str(path), f"not readable ({exc})", FIX + ".") from None
    where = ", ".join(str(p) for p in paths)
    state = parse_kubernetes(docs, where)
    if state.jobs.num_rows == 0 and state.nodes.num_rows == 0:
        raise SchedulerInputError(where, "it holds no GPU pod, workload or node", FIX + ".")
    return state


def run_kubectl(timeout_s: float = 60.0) -> KubernetesState:
    """Run ``kubectl get pods,nodes -A -o json`` here (its current context) and parse it."""
    binary = shutil.which("kubectl")
    if binary is None:
        raise SchedulerInputError(
            "kubectl", "it is not on PATH", "Install kubectl, or pass a dump with --k8s FILE."
        )
    args = [binary, "get", "pods,nodes", "--all-namespaces", "-o", "json"]
    try:
        done = subprocess.run(args, capture_output=True, timeout=timeout_s, check=True)
        doc = json.loads(done.stdout)
    except subprocess.CalledProcessError as exc:
        detail = exc.stderr.decode("utf-8", "replace").strip()[-300:]
        raise SchedulerInputError("kubectl", f"it failed: {detail}", FIX + ".") from None
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise SchedulerInputError("kubectl", f"it failed ({exc})", FIX + ".") from None
    return parse_kubernetes([doc], "kubectl get pods,nodes")
