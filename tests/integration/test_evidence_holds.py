"""Evidence never contradicts itself: every row with a comparison holds for the value it shows.

Walks every telemetry rule over every simulated scenario (one 4 × 4 fleet running all of them
for two hours, analysed fleet-wide with quotas, so `unfair_share` has something to judge, and
then job by job, so each scenario is also judged alone) and over the real dcgm-exporter pages,
and every trace rule over every stored trace (each file alone, and each directory of several
rank files as one job). A row `value comparison threshold` must hold with the raw numbers, and
not read the other way round once value and threshold are rounded as the reports show them
(3 significant digits): rounding may make them equal, never reverse them. A row that is
context has no comparison; a rule that fires on one of several conditions shows the one that
held.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from gpulens.app.analysis import analyse
from gpulens.app.traces import analyze_paths
from gpulens.collect.dcgm.parse import parse_exposition
from gpulens.collect.simulated.scenarios import EXTRA_SCENARIOS, SCENARIOS
from gpulens.findings.model import Finding
from gpulens.store import SegmentWriter, Store

START = 1_764_374_400 * 1_000_000_000
SPAN_S = 2 * 3600
NS = 1_000_000_000
ORDER = [*SCENARIOS, *EXTRA_SCENARIOS]
TRACES = "data/traces"
PAGES = "data/telemetry/cncf_k8s-ai-conformance/v1.35"

STRICT: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
# once rounded for display, a strict comparison may read as equal, never reversed
SHOWN: dict[str, Callable[[float, float], bool]] = {
    "<": operator.le,
    "<=": operator.le,
    ">": operator.ge,
    ">=": operator.ge,
}

Simulate = Callable[..., Any]  # the `simulated_store` fixture (tests/conftest.py)


def _shown(x: float) -> float:
    """`x` as the reports print it (`:.3g`)."""
    return float(f"{x:.3g}")


def contradictions(findings: Iterable[Finding]) -> list[str]:
    """Every evidence row whose comparison does not hold for its value, described."""
    out = []
    for f in findings:
        for e in f.evidence:
            if not e.comparison:
                continue
            row = f"{f.rule_id} {dict(f.subject)}: {e.metric} {e.value!r} {e.comparison} "
            row += f"{e.threshold!r} ({e.note})"
            if e.comparison not in STRICT or e.threshold is None:
                out.append(row + ": no such comparison or no threshold")
            elif math.isnan(e.value) or math.isnan(e.threshold):
                out.append(row + ": not measured")
            elif not STRICT[e.comparison](e.value, e.threshold):
                out.append(row)
            elif not SHOWN[e.comparison](_shown(e.value), _shown(e.threshold)):
                out.append(row + ": reversed once rounded for display")
    return out


def test_the_check_catches_a_contradiction() -> None:
    from gpulens.findings.model import Evidence, Severity

    def one(*rows: Evidence) -> list[Finding]:
        return [Finding("r", Severity.INFO, {}, (0, 1), "s", rows)]

    assert contradictions(one(Evidence("x", 0.036, 0.1, ">="))) != []
    assert contradictions(one(Evidence("x", float("nan"), 0.1, "<"))) != []
    assert contradictions(one(Evidence("x", 0.2, None, "<"))) != []
    assert contradictions(one(Evidence("x", 0.2, 0.1, ">"), Evidence("y", 0.0))) == []


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory, simulated_store: Simulate
) -> tuple[Path, list[dict[str, Any]]]:
    data_dir = tmp_path_factory.mktemp("evidence")
    sim = simulated_store(data_dir, START, SPAN_S, hosts=4, scenarios=ORDER, workers=2)
    return data_dir, sim.ground_truth()


def test_fleet_evidence_holds(fleet: tuple[Path, list[dict[str, Any]]]) -> None:
    data_dir, truth = fleet
    users = {j["user"] for j in truth}
    # two users on a fifth of the others' quota: both hold far more than their share
    quotas = {u: 0.2 if u in ("alice", "bob") else 1.0 for u in users}
    with Store(data_dir) as store:
        found = analyse(store, quotas=quotas).findings
    rules = {f.rule_id for f in found}
    assert {"unfair_share", "throttled", "hollow_busy", "input_bound", "low_tensor_use"} <= rules
    assert contradictions(found) == []


@pytest.mark.parametrize("scenario", ORDER)
def test_scenario_evidence_holds(fleet: tuple[Path, list[dict[str, Any]]], scenario: str) -> None:
    data_dir, truth = fleet
    job = next(j for j in truth if j["scenario"] == scenario)
    with Store(data_dir) as store:
        found = analyse(store, scope={"job_id": job["job_id"]}).findings
    assert contradictions(found) == []


def _page_jobs(shared: Path) -> list[Path]:
    return sorted((shared / PAGES).rglob("*.prom"))


def test_dcgm_page_evidence_holds(shared: Path, tmp_path: Path) -> None:
    pages = _page_jobs(shared)
    assert pages
    for i, page in enumerate(pages):
        result = parse_exposition(
            page.read_text(encoding="utf-8"), page.name, START + 30 * NS, default_host="capture"
        )
        data_dir = tmp_path / str(i)
        with SegmentWriter(data_dir, "capture") as writer:
            writer.append(result.readings)
        with Store(data_dir) as store:
            found = analyse(store, step_s=60.0).findings
        assert contradictions(found) == [], page


def _trace_jobs(shared: Path) -> list[list[Path]]:
    """Every stored trace file alone, and every directory of several as one job."""
    files = sorted((shared / TRACES).rglob("*.json.gz"))
    by_dir: dict[Path, list[Path]] = {}
    for f in files:
        by_dir.setdefault(f.parent, []).append(f)
    return [[f] for f in files] + [group for group in by_dir.values() if len(group) > 1]


def test_trace_evidence_holds(shared: Path) -> None:
    jobs = _trace_jobs(shared)
    assert len(jobs) > 23  # every file, and the two-rank pair
    bad, rules = [], set()
    for paths in jobs:
        found = analyze_paths(paths).findings
        rules |= {f.rule_id for f in found}
        bad += [f"{paths[0].name}: {row}" for row in contradictions(found)]
    assert {"memcpy_pageable", "straggler", "low_tensor_use", "comm_exposed"} <= rules
    assert bad == []
