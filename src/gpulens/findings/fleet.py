"""Cluster findings: the fleet rules, their context and `run_fleet_rules`.

A fleet rule is a module in `gpulens.findings.fleet_rules` with `RULE_ID` and
`check(ctx: FleetContext)`; like the capture rules (engine.py) each has its page
docs/findings/<RULE_ID>.md. They read the cluster summary (analyze/cluster), not a capture
frame, so they live in a registry of their own.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gpulens.analyze.cluster.fragmentation import QueueFragmentation
from gpulens.analyze.cluster.queues import ClusterSummary
from gpulens.analyze.cluster.quotas import QuotaReport
from gpulens.findings import fleet_rules as rules_package
from gpulens.findings.engine import RuleError, sort_key
from gpulens.findings.model import Finding


@dataclass(frozen=True, slots=True)
class FleetThresholds:
    """When a fleet finding is raised and how severe it is."""

    pending_while_idle_share: float = 0.05  # of the steps: Helios's consolidation signal
    pending_while_idle_gpu_hours: float = 1.0  # ...and at least this much movable GPU time
    warning_share: float = 0.2  # a warning from this share of the steps
    critical_share: float = 0.5  # critical from this share
    starved_gpu_hours: float = 1.0  # starvation: GPU-hours owed under quota, at least
    monopoly_gpu_hours: float = 1.0  # monopoly: GPU-hours over quota while others starved


@dataclass(frozen=True, slots=True)
class FleetContext:
    """What the fleet rules read."""

    summary: ClusterSummary | None
    fragmentation: tuple[QueueFragmentation, ...] = ()
    quotas: QuotaReport | None = None
    thresholds: FleetThresholds = field(default_factory=FleetThresholds)
    errors: list[RuleError] = field(default_factory=list)


FleetCheck = Callable[[FleetContext], Iterable[Finding]]


def discover() -> dict[str, FleetCheck]:
    """rule id → check, from every public module of `gpulens.findings.fleet_rules`."""
    found: dict[str, FleetCheck] = {}
    for info in pkgutil.iter_modules(rules_package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{rules_package.__name__}.{info.name}")
        found[module.RULE_ID] = module.check
    return dict(sorted(found.items()))


FLEET_RULES: Mapping[str, FleetCheck] = MappingProxyType(discover())


def run_fleet_rules(ctx: FleetContext) -> list[Finding]:
    """Every fleet rule over `ctx`, sorted by impact; a rule that raises is a `RuleError` in
    `ctx.errors` and the others still run."""
    ctx.errors.clear()
    out: list[Finding] = []
    for name, check in FLEET_RULES.items():
        try:
            out.extend(check(ctx))
        except Exception as exc:  # a broken rule must not take the summary down with it
            ctx.errors.append(RuleError(name, type(exc).__name__, str(exc)))
    return sorted(out, key=sort_key)
