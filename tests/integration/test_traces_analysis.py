"""Every stored trace analyses and renders; the 2-rank pair is one job; figures cross-checked.

Reads ../shared/data/traces in place (the `shared` fixture). Cross-checks recompute a figure
from the raw JSON with the standard library only.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from gpulens.present.reports.trace import run_trace

TRACES = "data/traces"
HTA = "HolisticTraceAnalysis/tests/data"


def _doc(path: Path) -> dict[str, Any]:
    return dict(json.loads(run_trace([path], "json")))


def _raw_events(path: Path) -> list[dict[str, Any]]:
    """Events as the standard library reads them; decimals kept exact (`Decimal`)."""
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    return list(doc["traceEvents"] if isinstance(doc, dict) else doc)


def test_every_stored_trace_analyses(shared: Path) -> None:
    files = sorted((shared / TRACES).rglob("*.json.gz"))
    assert len(files) == 23
    for path in files:
        doc = _doc(path)
        (rank,) = doc["ranks"]
        causes = rank["idle_causes"]
        total = sum(c["idle_us"] for c in causes["causes"].values())
        assert total == pytest.approx(causes["idle_us"], abs=1e-6), path
        assert causes["idle_us"] <= causes["span_us"] + 1e-6, path
        shares = sum(c["share"] for c in rank["kernel_classes"]["classes"].values())
        assert shares == pytest.approx(1.0) or not rank["kernel_classes"]["classes"], path
        for finding in doc["findings"]:
            assert finding["evidence"] and finding["recommendation"], path


def test_two_rank_pair_is_one_job(shared: Path) -> None:
    doc = json.loads(run_trace([shared / TRACES / HTA / "trace_filter"], "json"))
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    cluster = doc["cluster"]
    assert cluster["ranks"] == 2 and cluster["world_size"] == 128
    # aligned on the end of the first SendRecv kernel of each rank; the pair is sampled, so later
    # SendRecv kernels do not pair one to one and the residual is reported
    assert cluster["alignment"] == "collective"
    assert [r["rank"] for r in cluster["per_rank"]] == [0, 1]
    first_end = {0: 1682725898094377 + 30669, 1: 1682725898129911 + 57924}  # µs, own clocks
    shifts = [r["clock_shift_us"] for r in cluster["per_rank"]]
    assert shifts == [0, first_end[0] - first_end[1]] == [0, -62789]
    assert cluster["alignment_residual_us"] > 1000
    assert "rank 1 shifted by -62,789.0 µs" in cluster["notes"][0]
    assert "do not pair one to one" in cluster["notes"][1]
    assert "2 of 128 ranks present" in cluster["notes"][-1]
    # rank 1 computes ~29 % longer while rank 0 spends longer in SendRecv
    assert cluster["straggler"] == 1
    assert {f["rule_id"] for f in doc["findings"]} >= {"straggler", "comm_exposed"}
    text = run_trace([shared / TRACES / HTA / "trace_filter"], "terminal")
    assert "Ranks (2 of 128" in text


def _intervals(events: list[dict[str, Any]], cats: set[str]) -> list[tuple[Decimal, Decimal]]:
    return [
        (Decimal(e["ts"]), Decimal(e["ts"]) + Decimal(e["dur"]))
        for e in events
        if e.get("cat") in cats and "dur" in e
    ]


def test_nccl_share_and_idle_cross_checked(shared: Path) -> None:
    path = shared / TRACES / HTA / "nccl_parser_config/nccl_data.json.gz"
    events = _raw_events(path)
    work = {"kernel", "gpu_memcpy", "gpu_memset"}
    total = sum(float(e["dur"]) for e in events if e.get("cat") in work)
    nccl = sum(
        float(e["dur"])
        for e in events
        if e.get("cat") == "kernel" and e["name"].lower().startswith("nccl")
    )
    # device idle: the gaps of the union of all GPU activity, merged by hand
    spans = sorted(_intervals(events, work))
    idle, end = Decimal(0), spans[0][1]
    for s, e in spans[1:]:
        if s > end:
            idle += s - end
        end = max(end, e)
    (rank,) = _doc(path)["ranks"]
    share = rank["kernel_classes"]["classes"]["communication"]["share"]
    assert share == pytest.approx(nccl / total, rel=1e-9)
    assert Decimal(str(rank["idle_causes"]["idle_us"])) == idle  # exact to the ns
    assert Decimal(str(rank["device_idle_us"])) == idle


def test_known_findings(shared: Path) -> None:
    resnet = _doc(shared / TRACES / "param/et_replay/tests/inputs/resnet_kineto.json.gz")
    rules = {f["rule_id"] for f in resnet["findings"]}
    assert rules >= {"input_bound", "low_tensor_use", "memcpy_pageable"}
    # the data loader ranges recorded in the file cover at least the gaps attributed to it
    events = _raw_events(shared / TRACES / "param/et_replay/tests/inputs/resnet_kineto.json.gz")
    loader = sum(
        float(e["dur"]) for e in events if "DataLoader" in str(e.get("name")) and "dur" in e
    )
    attributed = resnet["ranks"][0]["idle_causes"]["causes"]["data_loader"]["idle_us"]
    assert 0 < attributed <= loader * 2  # a gap counts when a loader range covers half of it
    queue = _doc(shared / TRACES / HTA / "negative_queue_length_values_check/rank0.json.gz")
    assert "sync_heavy" in {f["rule_id"] for f in queue["findings"]}
