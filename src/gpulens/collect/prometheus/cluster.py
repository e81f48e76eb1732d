"""Cluster series → scheduler tables (pure): Kueue's ClusterQueues and kube-state-metrics' pods.

- Kueue (`kueue_cluster_queue_nominal_quota`, `kueue_cluster_queue_resource_usage` by
  `cluster_queue`, `flavor` and `resource`): per ClusterQueue and step, the GPUs of its quota
  (total) and in use, summed over flavors, as rows of the cluster sequence
  (`gpulens.cluster_schema`). Kueue counts pending *workloads* (`kueue_pending_workloads`),
  not pending GPUs: pending demand stays unknown (null) and the count is kept apart.
- kube-state-metrics: `kube_pod_labels` gives a pod's team (a `label_<name>` label) and
  `kube_pod_owner` its owner (the Job or ReplicaSet), so a GPU series that names only a pod
  is attributed to a team and a job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from gpulens.cluster_schema import IN_USE, PENDING, QUEUE, SEQUENCE_SCHEMA, TOTAL, TS
from gpulens.collect.prometheus.parse import Series
from gpulens.series_catalog import GPU_RESOURCES

#: (namespace, pod) → labels its GPU series gain (team, job_id)
Owners = dict[tuple[str, str], dict[str, str]]


def _gpu_series(series: Sequence[Series]) -> dict[str, dict[int, float]]:
    """cluster_queue → step time (ms) → GPUs, summed over flavors."""
    out: dict[str, dict[int, float]] = {}
    for s in series:
        if s.labels.get("resource", "") not in GPU_RESOURCES:
            continue
        queue = s.labels.get("cluster_queue", "")
        if not queue:
            continue
        per = out.setdefault(queue, {})
        for t, v in zip(s.ts_ms.tolist(), s.values.tolist(), strict=True):
            per[t] = per.get(t, 0.0) + v
    return out


def kueue_sequence(quota: Sequence[Series], usage: Sequence[Series], step_s: float) -> pa.Table:
    """The cluster sequence of Kueue's GPU quota and usage series (steps stamped at their
    start; pending demand null)."""
    totals = _gpu_series(quota)
    used = _gpu_series(usage)
    step_ms = round(step_s * 1000)
    rows: dict[str, list[object]] = {TS: [], QUEUE: [], TOTAL: [], IN_USE: [], PENDING: []}
    for queue in sorted(set(totals) | set(used)):
        q_total, q_used = totals.get(queue, {}), used.get(queue, {})
        for t in sorted(set(q_total) | set(q_used)):
            rows[TS].append((t - step_ms) // 1000)
            rows[QUEUE].append(queue)
            rows[TOTAL].append(q_total.get(t))
            rows[IN_USE].append(q_used.get(t, 0.0) if t in q_total else q_used.get(t))
            rows[PENDING].append(None)
    return pa.table(rows, schema=SEQUENCE_SCHEMA)


def pending_workloads(series: Sequence[Series]) -> dict[str, float]:
    """cluster_queue → the mean number of pending workloads over the range."""
    sums: dict[str, list[float]] = {}
    for s in series:
        queue = s.labels.get("cluster_queue", "")
        if queue and len(s.values):
            sums.setdefault(queue, []).append(float(np.mean(s.values)))
    return {q: float(sum(v)) for q, v in sums.items()}


def pod_owners(
    labels: Sequence[Mapping[str, str]], owners: Sequence[Mapping[str, str]], team_label: str
) -> Owners:
    """(namespace, pod) → {team, job_id} from the label sets of `kube_pod_labels` and
    `kube_pod_owner` (a `series` answer)."""
    out: Owners = {}
    for ls in labels:
        team = ls.get(team_label, "")
        if team and ls.get("pod"):
            out.setdefault((ls.get("namespace", ""), ls["pod"]), {})["team"] = team
    for ls in owners:
        name = ls.get("owner_name", "")
        if name and name != "<none>" and ls.get("pod"):
            out.setdefault((ls.get("namespace", ""), ls["pod"]), {})["job_id"] = name
    return out
