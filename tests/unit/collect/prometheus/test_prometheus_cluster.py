"""Kueue's ClusterQueue series and kube-state-metrics' pod series → scheduler tables. No capture
of these series exists in the shared data (its MANIFEST says so), so the inputs are label sets
in the shape Kueue's and kube-state-metrics' documentation gives."""

from __future__ import annotations

import numpy as np

from gpulens.cluster_schema import SEQUENCE_SCHEMA
from gpulens.collect.prometheus.cluster import kueue_sequence, pending_workloads, pod_owners
from gpulens.collect.prometheus.parse import Series


def _s(labels: dict[str, str], ts_s: list[int], values: list[float]) -> Series:
    return Series(labels, np.array(ts_s, dtype=np.int64) * 1000, np.array(values))


def test_kueue_quota_and_usage_become_the_cluster_sequence() -> None:
    gpu = {"resource": "nvidia.com/gpu", "cohort": "c"}
    quota = [
        _s({**gpu, "cluster_queue": "team-a", "flavor": "h100"}, [3600, 7200], [8, 8]),
        _s({**gpu, "cluster_queue": "team-a", "flavor": "a100"}, [3600, 7200], [4, 4]),
        _s({"resource": "cpu", "cluster_queue": "team-a", "flavor": "h100"}, [3600], [96]),
        _s({**gpu, "cluster_queue": "team-b", "flavor": "h100"}, [3600], [16]),
    ]
    usage = [
        _s({**gpu, "cluster_queue": "team-a", "flavor": "h100"}, [3600, 7200], [6, 2]),
        _s({**gpu, "cluster_queue": "team-b", "flavor": "h100"}, [3600], [16]),
    ]
    seq = kueue_sequence(quota, usage, 3600)
    assert seq.schema == SEQUENCE_SCHEMA
    assert seq.to_pylist() == [
        {"ts_s": 0, "queue": "team-a", "total_gpus": 12.0, "in_use_gpus": 6.0,
         "pending_gpus": None},
        {"ts_s": 3600, "queue": "team-a", "total_gpus": 12.0, "in_use_gpus": 2.0,
         "pending_gpus": None},
        {"ts_s": 0, "queue": "team-b", "total_gpus": 16.0, "in_use_gpus": 16.0,
         "pending_gpus": None},
    ]  # fmt: skip
    waiting = [_s({"cluster_queue": "team-a", "status": "active"}, [3600, 7200], [2, 4])]
    assert pending_workloads(waiting) == {"team-a": 3.0}


def test_pod_labels_and_owner_attribute_pods() -> None:
    labels = [{"namespace": "ml", "pod": "train-0", "label_team": "vision"},
              {"namespace": "ml", "pod": "nb", "label_app": "jupyter"}]  # fmt: skip
    owners = [
        {"namespace": "ml", "pod": "train-0", "owner_kind": "Job", "owner_name": "train"},
        {"namespace": "ml", "pod": "nb", "owner_kind": "<none>", "owner_name": "<none>"},
    ]
    assert pod_owners(labels, owners, "label_team") == {
        ("ml", "train-0"): {"team": "vision", "job_id": "train"}
    }
