"""The fleet rules: pending_while_idle on a hand-made sequence, fragmented_capacity on the real
node list of a university cluster; their evidence holds and agrees with the summary text."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from gpulens.analyze.cluster.fragmentation import fragmentation
from gpulens.analyze.cluster.grid import to_grid
from gpulens.analyze.cluster.queues import summarise
from gpulens.cluster_schema import JOB_SCHEMA, NODE_SCHEMA, SEQUENCE_SCHEMA
from gpulens.collect.scheduler.slurm import read_slurm
from gpulens.findings.fleet import FleetContext, FleetThresholds, run_fleet_rules
from gpulens.findings.model import Severity

T0 = 1_764_374_400


def _sequence(minutes: int, waiting: int) -> pa.Table:
    """Queue a: 8 GPUs all busy, `waiting` pending in the first half; b: 8 GPUs, 2 busy."""
    rows = []
    for i in range(minutes):
        rows.append({"ts_s": T0 + 60 * i, "queue": "a", "total_gpus": 8, "in_use_gpus": 8,
                     "pending_gpus": waiting if i < minutes // 2 else 0})  # fmt: skip
        rows.append({"ts_s": T0 + 60 * i, "queue": "b", "total_gpus": 8, "in_use_gpus": 2,
                     "pending_gpus": 0})  # fmt: skip
    return pa.Table.from_pylist(rows, schema=SEQUENCE_SCHEMA)


def test_pending_while_idle_fires_with_evidence_that_holds() -> None:
    summary = summarise(to_grid(_sequence(120, 4)))
    [f] = run_fleet_rules(FleetContext(summary=summary))
    assert f.rule_id == "pending_while_idle"
    assert f.severity is Severity.CRITICAL  # half of the steps
    assert f.subject == {"queues_waiting": "a", "queues_idle": "b"}
    ev = {e.metric: e for e in f.evidence}
    assert all(e.holds() for e in f.evidence)
    assert ev["pending_while_idle_share"].value == pytest.approx(0.5)
    assert ev["pending_while_idle_gpu_hours"].value == pytest.approx(60 * 4 / 60)
    assert f.impact.wasted_gpu_hours == ev["pending_while_idle_gpu_hours"].value
    # a waits 4 GPUs in each of its first 60 minutes: the busiest hour is the first, 4 GPU-h
    assert ev["peak_hour_gpu_hours"].value == pytest.approx(4.0)
    assert "the hour from 2025-11-29 00:00 UTC" in ev["peak_hour_gpu_hours"].note
    assert "50% of the 120 steps of 60 s" in f.summary and "4.0 GPU-hours" in f.summary
    assert f.window == (T0 * 10**9, (T0 + 120 * 60) * 10**9)


def test_below_the_thresholds_nothing_fires() -> None:
    summary = summarise(to_grid(_sequence(120, 4)))
    strict = FleetThresholds(pending_while_idle_gpu_hours=5.0)
    assert run_fleet_rules(FleetContext(summary=summary, thresholds=strict)) == []
    assert run_fleet_rules(FleetContext(summary=summarise(to_grid(_sequence(120, 0))))) == []


def test_stranded_and_free_gpus_on_real_nodes(shared: Path) -> None:
    """The real v0.0.40 node list: in partition gpu, n0162 (MIXED) has 12 of 21 MIG slices
    free; n0163 has 16 free but no CPU left (ALLOCATED): stranded, not schedulable; n0164 is
    drained; queues without GPU nodes are left out."""
    path = "data/scheduler/lcrownover_prometheus-slurm-exporter/testdata/V0040OpenapiNodesResp.json"
    nodes = read_slurm(shared / path).nodes
    rows = {r["node"]: r for r in nodes.to_pylist()}
    assert rows["n0163"]["node_state"] == "ALLOCATED"
    frag = {f.queue: f for f in fragmentation(nodes, JOB_SCHEMA.empty_table())}
    gpu = frag["gpu"]
    assert gpu.free_gpus == rows["n0162"]["gpus"] - rows["n0162"]["used_gpus"] == 12
    assert gpu.stranded_gpus == rows["n0163"]["gpus"] - rows["n0163"]["used_gpus"] == 16
    assert "amt" not in frag and all(f.nodes > 0 for f in frag.values())


def _node(name: str, gpus: float, used: float, state: str = "MIXED") -> dict[str, object]:
    return {"node": name, "node_state": state, "gpus": gpus, "used_gpus": used, "queues": "q"}


def test_fragmented_capacity() -> None:
    """3 + 3 + 2 GPUs free on three 8-GPU nodes: a 6-GPU job fits the queue, no node; a
    3-GPU job fits a node; a 9-GPU job fits neither (not fragmentation, just full)."""
    nodes = pa.Table.from_pylist(
        [_node("n1", 8, 5), _node("n2", 8, 5), _node("n3", 8, 6), _node("n4", 8, 0, "DOWN")],
        schema=NODE_SCHEMA,
    )
    jobs = pa.Table.from_pylist(
        [
            {"job_id": "six", "queue": "q", "state": "PENDING", "gpus": 6.0},
            {"job_id": "three", "queue": "q", "state": "PENDING", "gpus": 3.0},
            {"job_id": "nine", "queue": "q", "state": "PENDING", "gpus": 9.0},
            {"job_id": "run", "queue": "q", "state": "RUNNING", "gpus": 8.0},
        ],
        schema=JOB_SCHEMA,
    )
    [q] = fragmentation(nodes, jobs)
    assert q.free_per_node == (3.0, 3.0, 2.0) and q.free_gpus == 8.0
    assert q.pending_sizes == (6.0, 3.0, 9.0)
    assert (q.fragmented_jobs, q.fragmented_gpus) == (("six",), 6.0)
    summary = summarise(to_grid(_sequence(2, 0)))
    [f] = run_fleet_rules(FleetContext(summary=summary, fragmentation=(q,)))
    assert f.rule_id == "fragmented_capacity" and f.subject == {"queue": "q"}
    assert all(e.holds() for e in f.evidence)
    assert "ask for 6 GPUs; 8 GPUs are free, but at most 3 on one node" in f.summary
