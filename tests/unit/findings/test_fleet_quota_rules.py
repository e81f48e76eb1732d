"""starvation and monopoly on a history with known quota violations; the quota of one queue
read from a real Kueue ClusterQueue manifest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpulens.analyze.cluster.grid import Grid
from gpulens.analyze.cluster.quotas import quota_report
from gpulens.collect.scheduler.quotas import read_quotas
from gpulens.findings.fleet import FleetContext, run_fleet_rules
from gpulens.findings.model import Severity
from gpulens.quota_model import QueueQuota, Quotas

pytest.importorskip("yaml")


def _grid() -> Grid:
    """Hourly, 10 h: tas-user-queue (Kueue, quota 16) holds 20 with nothing pending for
    5 h while batch (quota 8) holds 2 with 6 pending; then both sit within quota."""
    in_use = np.array([[2.0] * 5 + [8.0] * 5, [20.0] * 5 + [12.0] * 5])
    pending = np.array([[6.0] * 5 + [0.0] * 5, [0.0] * 10])
    return Grid(("batch", "tas-user-queue"), 0, 3600, np.full((2, 10), 24.0), in_use, pending)


def test_starvation_and_monopoly_findings(shared: Path) -> None:
    quotas = read_quotas(
        [
            shared
            / "data/scheduler/kubernetes-sigs_kueue/site/static/examples/tas/sample-gpu-queues.yaml"
        ]
    )
    quotas.queues["batch"] = QueueQuota(
        "batch", 8.0, parent="research", source="quotas.toml (TOML)"
    )
    report = quota_report(_grid(), quotas)
    found = {f.rule_id: f for f in run_fleet_rules(FleetContext(summary=None, quotas=report))}
    assert set(found) == {"starvation", "monopoly"}
    starved, mono = found["starvation"], found["monopoly"]
    assert starved.subject == {"queue": "batch"}
    ev = {e.metric: e for e in starved.evidence}
    assert ev["starved_gpu_hours"].value == 5 * 6.0  # min(6 pending, 8 - 2 owed) for 5 h
    assert all(e.holds() for e in starved.evidence)
    assert "tas-user-queue held GPUs over quota" in starved.summary
    assert "reclaimWithinCohort" in starved.recommendation
    assert starved.severity is Severity.WARNING  # half the steps
    assert mono.subject == {"queue": "tas-user-queue", "starved": "batch"}
    mev = {e.metric: e for e in mono.evidence}
    assert mev["monopoly_gpu_hours"].value == 5 * 4.0  # 4 over quota, 6 owed to batch
    assert "borrowingLimit" in mono.recommendation
    assert "Kueue ClusterQueue" in mev["quota_gpus"].note


def test_no_quotas_no_findings() -> None:
    assert run_fleet_rules(FleetContext(summary=None)) == []


def test_unknown_pending_raises_no_finding() -> None:
    g = _grid()
    blind = Grid(g.queues, 0, 3600, g.total, g.in_use, np.full_like(g.pending, np.nan))
    quotas = Quotas(
        queues={
            "batch": QueueQuota("batch", 8.0),
            "tas-user-queue": QueueQuota("tas-user-queue", 16.0),
        }
    )
    report = quota_report(blind, quotas)
    assert run_fleet_rules(FleetContext(summary=None, quotas=report)) == []
