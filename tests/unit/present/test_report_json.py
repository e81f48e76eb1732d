"""Findings as the JSON report writes them: the same text `json.dumps` gives, written faster."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from gpulens.findings.model import Evidence, Finding, Impact, Severity
from gpulens.present.reports.fleet import dumps


def _finding(i: int) -> Finding:
    return Finding(
        rule_id="memory_leak",
        severity=Severity.WARNING,
        subject={"job_id": f"job-{i}", "host": "nöde→1", "gpu_uuid": "GPU-\x7f"},
        window=(1_764_374_400 * 10**9 + i, 1_764_378_000 * 10**9),
        summary="GPU memory grows 0.25 MiB/s (12.3 GB → 45.6 GB) at 45 °C",
        evidence=(
            Evidence("rate_bytes_per_second", 262144.0 / (i + 1), 0.0, ">", "0.9 GiB/h"),
            Evidence("r2", 1e-7 * i, None),
            Evidence("oom_at_ns", 1.7643744e18),
        ),
        impact=Impact(wasted_gpu_hours=i / 7, cost=1e-5, energy_kwh=0.0, co2e_kg=-0.0),
        recommendation="Find what keeps tensors alive: `retain_graph=True`\tand lists.\n",
        docs="docs/findings/memory_leak.md",
    )


def test_findings_dump_as_json_dumps_does() -> None:
    doc = {"findings": [_finding(i).to_dict() for i in range(50)], "notes": []}
    assert dumps(doc) == json.dumps(doc, indent=2, default=str) + "\n"


def test_odd_values_dump_as_json_dumps_does() -> None:
    doc: dict[Any, Any] = {
        "floats": [1.5, 1e-4, 9.99e-5, 1e16, 1e300, 5e-324, -0.0, math.nan, math.inf, -math.inf],
        "numpy": [np.float64(0.25), np.float64(3e-7), np.int64(3), np.bool_(True)],
        "nested": {"empty": {}, "list": [], "tuple": (1, "two"), "none": None, "yes": True},
        1: "int key",
        2.5e-6: "float key",
        None: "null key",
        False: "bool key",
        "text": 'control \x01\x1f, quote " and backslash \\',
    }
    assert dumps(doc) == json.dumps(doc, indent=2, default=str) + "\n"
    doc["ké→y"] = "a key json escapes"
    assert dumps(doc) == json.dumps(doc, indent=2, default=str) + "\n"
