"""Same input, same findings: the demo's fleet (same seed, same hour) judged the same whatever
the wall-clock start, the worker count and the pace it was recorded at.

The demo starts its fleet at "now minus the duration", so its phase against the report's 60 s
interval grid changes from run to run; the notebook it idles for ~56 min used to be found in
some runs only (it needed 60 min, or a run covering its whole window). Here one hour of the
demo's default fleet is generated at several starts (phases 0, 8, 17, 31, 45 and 53 s against
the grid, and days apart), through two worker processes, and through the paced recorder the
demo uses for `--speed`; the report's findings must be the same set of (rule, subject,
severity), with each evidence value within 1 % (timestamps measured from the fleet's start).

Ratios (0..1) are held to 1 % of the larger value too, or to half a percentage point where
both lie below 0.05: near 0 a relative bound means nothing (the notebook's idle activity is
0.000 at one phase and 0.0007 at another, both "idle"), and half a point is well inside what
any threshold tells apart. The duration-ladder rules read the interval where their state
changes for its share and leave it out of their means (findings/runs.py `with_edges`), so
their shares (throttled's `throttle_power` / `throttle_thermal`, one mixed interval of 54)
no longer move with it.

memory_leak's `duration_s` and `growth_bytes` (its rate times that duration) read the
interval where the warm-up ends for its share and the last interval for the seconds it
covers (analyze/memory.py `_steady_seconds`), so they hold to 1 % like the rest (they spanned
whole intervals, 3240 or 3300 s with the phase, before).

One figure is held to one interval's share of the finding's window instead:
engine_migration's `state_share` is, by definition, the share of the workload's whole steady
intervals classified in the target states (analyze/engines.py, the same figure the workloads
page shows): the interval where the eager server's warm-up ends is one state or the other,
and where the grid puts the warm-up's end decides whether it is steady at all, so numerator
and denominator both move by whole intervals (one of 58: 1.7 points).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpulens.app import session
from gpulens.app.analysis import report
from gpulens.clock import PacedClock
from gpulens.config import load_config
from gpulens.findings.model import Finding, Severity

pytestmark = pytest.mark.slow

NS = 1_000_000_000
DAY_S = 86_400
BASE_S = 1_796_155_200  # on the 60 s grid (and a multiple of an hour)
SPAN_S = 3600  # the demo's default duration
Simulate = Callable[..., Any]  # the `simulated_store` fixture (tests/conftest.py)
Key = tuple[str, tuple[tuple[str, str], ...], Severity]
Run = tuple[int, list[Finding]]  # the fleet's start and the report's findings

# (offset of the start from BASE_S in seconds, worker processes)
STARTS = [(0, 1), (8, 1), (17, 1), (31, 1), (45, 1), (53, 1), (DAY_S + 23, 2)]
PACED_OFFSET_S = 3 * DAY_S + 52


def _config(data_dir: Path) -> Any:
    # the demo's settings (present/cli.py `demo`): 3 hosts × 4 GPUs, every scenario
    return load_config(
        env={},
        overrides={
            "data_dir": str(data_dir),
            "host": "gen",
            "store.flush_seconds": 300.0,
            "collect.collectors": ["simulated"],
            "simulated.hosts": 3,
        },
    )


def _report(data_dir: Path) -> list[Finding]:
    """The findings `gpulens report` gives over the whole store."""
    cfg = _config(data_dir)
    session.tidy_store(cfg, compact_min_age_seconds=0)
    return report(cfg).findings


def _paced(data_dir: Path, start_ns: int) -> None:
    """The demo's `--speed` path: the fleet recorded at a paced simulated clock."""
    cfg = _config(data_dir)
    fleet = session.simulated_fleet(cfg, start_ns)
    clock = PacedClock(start_ns=start_ns, speed=1e6)
    result = session.record(
        cfg, session.fleet_collectors(fleet, clock), clock, duration_s=SPAN_S, inline=True
    )
    assert result.ticks == SPAN_S


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, simulated_store: Simulate) -> list[Run]:
    out = []
    for offset, workers in STARTS:
        data_dir = tmp_path_factory.mktemp(f"start{offset}w{workers}")
        start = (BASE_S + offset) * NS
        simulated_store(data_dir, start, SPAN_S, hosts=3, flush_s=300.0, workers=workers)
        out.append((start, _report(data_dir)))
    data_dir = tmp_path_factory.mktemp("paced")
    start = (BASE_S + PACED_OFFSET_S) * NS
    _paced(data_dir, start)
    out.append((start, _report(data_dir)))
    return out


def _key(f: Finding) -> Key:
    return (f.rule_id, tuple(sorted(f.subject.items())), f.severity)


def _evidence(start_ns: int, f: Finding) -> dict[str, float]:
    """Evidence by metric; timestamps as seconds from the fleet's start."""
    return {
        e.metric: ((e.value - start_ns) / NS if e.metric.endswith("_ns") else e.value)
        for e in f.evidence
    }


# (rule, metric) of a ratio held to one interval's share of the window (see the module's
# docstring)
WHOLE_INTERVALS = {("engine_migration", "state_share")}


def _close(rule: str, metric: str, a: float, b: float, intervals: float) -> bool:
    bound = 0.01 * max(abs(a), abs(b))
    if (rule, metric) in WHOLE_INTERVALS:
        bound = max(bound, 1.0 / max(intervals, 1.0))
    elif 0.0 <= a < 0.05 and 0.0 <= b < 0.05:  # a ratio near 0: half a point
        bound = max(bound, 0.005)
    return abs(a - b) <= bound + 1e-9


def test_the_same_fleet_gives_the_same_findings(runs: list[Run]) -> None:
    (start0, first), *others = runs
    want = sorted(_key(f) for f in first)
    for start, found in others:
        phase = (start - start0) // NS
        assert sorted(_key(f) for f in found) == want, f"start +{phase} s"


def test_evidence_agrees_within_one_percent(runs: list[Run]) -> None:
    (start0, first), *others = runs
    reference = {_key(f): _evidence(start0, f) for f in first}
    differ = []
    for start, found in others:
        for f in found:
            ref = reference.get(_key(f), {})
            intervals = (f.window[1] - f.window[0]) / NS / 60.0
            for metric, value in _evidence(start, f).items():
                if metric in ref and not _close(f.rule_id, metric, ref[metric], value, intervals):
                    phase = (start - start0) // NS
                    differ.append((phase, f.rule_id, metric, ref[metric], value))
    assert differ == []


def test_the_notebook_is_found_every_time_at_its_ladder_severity(runs: list[Run]) -> None:
    # the demo's notebook idles from the end of its warm-up (~4 min in) to the end of the hour
    for _start, found in runs:
        (idle,) = [f for f in found if f.rule_id == "idle_allocated"]
        seconds = next(e.value for e in idle.evidence if e.metric == "idle_seconds")
        assert 55 * 60 <= seconds < 57 * 60
        assert idle.severity is Severity.INFO  # 10 min ≤ 56 min < 60 min
