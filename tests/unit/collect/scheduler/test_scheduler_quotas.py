"""Quota parsers on the real Kueue, KAI and Volcano manifests, and TOML tables."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpulens.collect.scheduler.errors import SchedulerInputError
from gpulens.collect.scheduler.quotas import (
    parse_quota_objects,
    parse_quota_toml,
    quantity,
    read_quotas,
)

pytest.importorskip("yaml")

KUEUE = "data/scheduler/kubernetes-sigs_kueue"
KAI = "data/scheduler/NVIDIA_KAI-Scheduler"
VOLCANO = "data/scheduler/volcano-sh_volcano"


def test_kueue_cluster_and_local_queues(shared: Path) -> None:
    q = read_quotas([shared / KUEUE / "site/static/examples/tas/sample-gpu-queues.yaml"])
    tas = q.queues["tas-cluster-queue"]
    assert tas.gpus == 16.0 and tas.limit == 16.0 and tas.parent == ""
    assert q.of("tas-user-queue") is tas and q.of("default/tas-user-queue") is tas
    assert "Kueue ClusterQueue" in tas.source


def test_kueue_cohort_queues_without_borrowing_limit_are_unlimited(shared: Path) -> None:
    q = read_quotas(
        [
            shared / KUEUE / "cmd/kueueviz/examples/01-cluster-queues.yaml",
            shared / KUEUE / "cmd/kueueviz/examples/01.5-cohorts.yaml",
        ]
    )
    # only emergency-cluster-queue covers the "gpu" resource (quantity 1Gi, as written)
    assert set(q.queues) == {"emergency-cluster-queue"}
    e = q.queues["emergency-cluster-queue"]
    assert e.gpus == 2.0**30 and math.isnan(e.limit) and e.parent == "ai-for-humanity-foundation"
    assert "reclaimWithinCohort=Any" in e.preemption
    assert q.cohorts["research"] == "organization" and q.cohorts["organization"] == ""


def test_kai_queues(shared: Path) -> None:
    q = read_quotas([shared / KAI / "docs/priority/example/limited-queue.yaml"])
    assert q.queues["test"].gpus == 1.0 and q.queues["test"].limit == 1.0
    assert q.queues["test"].parent == "default"
    two = read_quotas(
        [shared / KAI / "examples/time-based-fairshare/two-queue-oscillation/queues.yaml"]
    )
    assert {n: (x.gpus, x.weight, x.parent) for n, x in two.queues.items()} == {
        "training-department": (0.0, 1.0, ""),
        "team-a": (0.0, 1.0, "training-department"),
        "team-b": (0.0, 1.0, "training-department"),
    }
    assert math.isnan(two.queues["team-a"].limit)  # limit -1: none


def test_volcano_queue_without_gpus_is_not_a_gpu_quota(shared: Path) -> None:
    path = shared / VOLCANO / "staging/src/volcano.sh/apis/artifacts/queue.yaml"
    with pytest.raises(SchedulerInputError, match="no queue in these files has a GPU quota"):
        read_quotas([path])
    import yaml

    (doc,) = yaml.safe_load_all(path.read_text())
    # the same Queue with GPUs added the way Volcano's docs write them
    doc["spec"]["capability"]["nvidia.com/gpu"] = 8
    doc["spec"]["deserved"] = {"nvidia.com/gpu": "4"}
    doc["metadata"]["annotations"] = {"volcano.sh/hierarchy": "root/eng/default"}
    q = parse_quota_objects([doc], "queue.yaml")
    v = q.queues["default"]
    assert (v.gpus, v.limit, v.weight, v.parent) == (4.0, 8.0, 1.0, "root/eng")
    assert v.preemption == "reclaimable=True"


def test_toml_table(tmp_path: Path) -> None:
    path = tmp_path / "quotas.toml"
    path.write_text('[quotas.vision]\ngpus = 16\nlimit = 24\nparent = "research"\n'
                    "[quotas.nlp]\ngpus = 8\n")  # fmt: skip
    q = read_quotas([path])
    assert q.queues["vision"].limit == 24.0 and q.queues["vision"].parent == "research"
    assert q.queues["nlp"].gpus == 8.0 and math.isnan(q.queues["nlp"].limit)
    with pytest.raises(SchedulerInputError, match=r"\[quotas.x\] needs gpus"):
        parse_quota_toml({"quotas": {"x": {"gpus": "many"}}}, "q.toml")


def test_quantities() -> None:
    assert quantity("16") == 16 and quantity("500m") == 0.5 and quantity(2) == 2
    assert quantity("1Ki") == 1024 and quantity("2k") == 2000


def test_kubectl_json_list_and_bad_input(shared: Path, tmp_path: Path) -> None:
    import json

    import yaml

    src = shared / KAI / "examples/time-based-fairshare/two-queue-oscillation/queues.yaml"
    items = [d for d in yaml.safe_load_all(src.read_text()) if d]
    listed = tmp_path / "queues.json"
    listed.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    assert set(read_quotas([listed]).queues) == {"training-department", "team-a", "team-b"}
    bad = tmp_path / "broken.yaml"
    bad.write_text("kind: Queue\n  spec: [\n")
    with pytest.raises(SchedulerInputError, match=r"broken\.yaml"):
        read_quotas([bad])
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(
        "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: x}\n"
        "spec: {resources: {gpu: {quota: lots}}}\n"
    )
    with pytest.raises(SchedulerInputError, match=r"wrong\.yaml.*Queue 'x'"):
        read_quotas([wrong])
    with pytest.raises(SchedulerInputError, match=r"missing\.yaml: No such file"):
        read_quotas([tmp_path / "missing.yaml"])
