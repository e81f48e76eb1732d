"""What every rule reads: the analysed interval frame, optional tables, thresholds, prices.

`build_context(frame, ...)` runs the analysis a rule needs and nothing more: it classifies the
frame when it has no `state` column (`analyze.efficiency.classify`), adds useful work when it
has no `useful_ratio` (`efficiency.useful_work`) and the waste and price annotation when it is
missing (`analyze.waste.annotate`). Tables that only some rules need (memory leaks,
over-provisioning) are computed once, on first use, through `Context.cached`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

import pyarrow as pa

from gpulens.analyze.baselines import BaselineSettings
from gpulens.analyze.carbon import DEFAULT_REGION
from gpulens.analyze.efficiency import Thresholds, classify, useful_work
from gpulens.analyze.engines import EngineSettings
from gpulens.analyze.memory import MemorySettings
from gpulens.analyze.prices import Prices
from gpulens.analyze.waste import ANNOTATION_COLUMNS, annotate
from gpulens.findings.model import Severity

T = TypeVar("T")
IDLE_RULE = "idle_allocated"  # the rule with a ladder of its own (jobstats' idle GPU)


@dataclass(frozen=True, slots=True)
class FindingThresholds:
    """When a finding is raised and how severe it is; defaults from DESIGN.md's reference list
    (jobstats / Job Defense Shield, NVIDIA DCGM guidance). The state thresholds themselves are
    `analyze.efficiency.Thresholds`; memory ones are `analyze.memory.MemorySettings`."""

    min_duration_s: float = 600.0  # a state must last this long to be a finding...
    min_duration: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    whole_window: bool = True  # ...unless it covers all the frame shows of that GPU or job
    util_red: float = 0.15  # jobstats: GPU util < 15 % is red
    util_warning: float = 0.25  # jobstats: < 25 % warns
    # the idle ladder (config: findings.idle_allocated.*_minutes): an idle run is a finding
    # from idle_info_s (info), warns from idle_warn_s (jobstats: a job at 0 % for 60 min
    # warns) and is critical from idle_critical_s (jobstats: 120 min is actionable)
    idle_info_s: float = 600.0
    idle_warn_s: float = 3600.0
    idle_critical_s: float = 7200.0
    # the ladder of the other duration-based rules: info from their minimum duration, warning
    # from warning_duration_s, critical from critical_duration_s
    warning_duration_s: float = 3600.0
    critical_duration_s: float = 7200.0
    warning_gpu_hours: float = 0.5  # wasted GPU-hours that make a finding a warning
    critical_gpu_hours: float = 8.0  # ... critical (rules without a duration ladder)
    straggler_min_share: float = 0.6  # the same GPU is the slowest in this share of intervals
    straggler_clock_gap: float = 0.05  # a clock this far below its peers' is the likely cause
    leak_critical_s: float = 2 * 3600.0  # out of memory within this: critical
    leak_warning_s: float = 48 * 3600.0  # ... within this: warning, else info
    regression_critical_drop: float = 0.25  # a drop of a quarter after a version change
    unfair_over_quota: float = 1.5  # allocation share ÷ quota share that is unfair
    unfair_min_share: float = 0.1  # ... for a group holding at least this share
    unfair_by: str = "user"
    monopoly_share: float = 0.5
    monopoly_min_hours: float = 24.0
    batch_headroom_bytes: float = 4e9  # memory headroom worth a larger batch
    low_tensor_sm: float = 0.5  # SM activity that makes missing tensor work matter

    def duration_for(self, rule_id: str) -> float:
        """The minimum duration of `rule_id`'s state runs (per-rule override, else default;
        `idle_info_s` for idle_allocated)."""
        if rule_id == IDLE_RULE:
            return self.idle_info_s
        return float(self.min_duration.get(rule_id, self.min_duration_s))

    def ladder(self, rule_id: str) -> tuple[float, float, float]:
        """(info, warning, critical) durations in seconds of a duration-based rule: a run is
        a finding from the first, warns from the second, is critical from the third."""
        if rule_id == IDLE_RULE:
            return (self.idle_info_s, self.idle_warn_s, self.idle_critical_s)
        return (self.duration_for(rule_id), self.warning_duration_s, self.critical_duration_s)

    def level(self, rule_id: str, duration_s: float) -> Severity:
        """The ladder's severity of a `rule_id` run lasting `duration_s` (info below the
        warning level, a run shorter than the minimum included: it covers its whole window)."""
        _info, warn, act = self.ladder(rule_id)
        if duration_s >= act:
            return Severity.CRITICAL
        if duration_s >= warn:
            return Severity.WARNING
        return Severity.INFO


@dataclass(frozen=True, slots=True)
class RuleError:
    """A rule that raised: reported, not fatal (the other rules still run)."""

    rule_id: str
    error: str
    message: str


@dataclass(frozen=True, slots=True)
class Context:
    """Everything a rule's `check(ctx)` reads. `frame` is classified, useful-work and
    waste-annotated (see `build_context`); `events` is the event table (ts, event, message and
    labels) or None; `leaks` / `overprovisioned` are `analyze.memory` tables, computed on first
    use when None; `quotas` maps a `thresholds.unfair_by` group to its GPU quota (any unit).
    `errors` collects the rules that raised during `run_rules`."""

    frame: pa.Table
    events: pa.Table | None = None
    leaks: pa.Table | None = None
    overprovisioned: pa.Table | None = None
    thresholds: FindingThresholds = field(default_factory=FindingThresholds)
    states: Thresholds = field(default_factory=Thresholds)
    memory: MemorySettings = field(default_factory=MemorySettings)
    baselines: BaselineSettings = field(default_factory=BaselineSettings)
    engines: EngineSettings = field(default_factory=EngineSettings)
    prices: Prices = field(default_factory=Prices)
    region: str | float = DEFAULT_REGION
    quotas: Mapping[str, float] | None = None
    # per (job, model, engine): serving latency measured in-process (analyze.inference)
    latency: tuple[Mapping[str, Any], ...] = ()
    errors: list[RuleError] = field(default_factory=list, compare=False)
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def cached(self, key: str, compute: Callable[..., T], *args: Any) -> T:
        """`compute(*args)` once per context under `key` (rules share derived tables this
        way)."""
        try:
            value: T = self._cache[key]
        except KeyError:
            value = self._cache[key] = compute(*args)
        return value


def build_context(
    frame: pa.Table,
    events: pa.Table | None = None,
    *,
    thresholds: FindingThresholds | None = None,
    states: Thresholds | None = None,
    memory: MemorySettings | None = None,
    baselines: BaselineSettings | None = None,
    engines: EngineSettings | None = None,
    prices: Prices | None = None,
    region: str | float = DEFAULT_REGION,
    quotas: Mapping[str, float] | None = None,
    leaks: pa.Table | None = None,
    overprovisioned: pa.Table | None = None,
    latency: tuple[Mapping[str, Any], ...] = (),
) -> Context:
    """A Context over `frame`, running classify / useful_work / annotate where their columns
    are missing (a frame that has them is used as is)."""
    states = states or Thresholds()
    prices = prices or Prices()
    if "state" not in frame.column_names:
        frame = classify(frame, states)
    if "useful_ratio" not in frame.column_names:
        frame = useful_work(frame)
    if not all(c in frame.column_names for c in ANNOTATION_COLUMNS):
        frame = annotate(frame, prices, region)
    return Context(
        frame=frame,
        events=events,
        leaks=leaks,
        overprovisioned=overprovisioned,
        thresholds=thresholds or FindingThresholds(),
        states=states,
        memory=memory or MemorySettings(),
        baselines=baselines or BaselineSettings(),
        engines=engines or EngineSettings(),
        prices=prices,
        region=region,
        quotas=quotas,
        latency=latency,
    )
