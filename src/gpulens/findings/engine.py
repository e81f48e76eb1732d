"""The finding engine: the rule registry and `run_rules`.

A rule is a module in `gpulens.findings.rules` with a `RULE_ID` (its name, its docs page
docs/findings/<RULE_ID>.md) and `check(ctx) -> Iterable[Finding]`. `RULES` maps each rule id
to its check, discovered from that package (modules starting with "_" are helpers).
`run_rules(ctx)` runs them, isolates failures (a rule that raises becomes a `RuleError` in
`ctx.errors`, the other rules still run) and sorts the findings by impact: wasted GPU-hours,
then severity, then rule and window. Rows whose readings cover no time (a lone snapshot) are
seen only by `INSTANT_RULES`; a duration is never inferred from a snapshot.

    ctx = build_context(frame, events)
    for f in run_rules(ctx):
        print(f.severity, f.rule_id, f.subject, f.summary)
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType

import pyarrow.compute as pc

from gpulens.findings import rules as rules_package
from gpulens.findings.context import (
    Context,
    FindingThresholds,
    RuleError,
    build_context,
)
from gpulens.findings.model import Finding, Severity

Check = Callable[[Context], Iterable[Finding]]

__all__ = [
    "RULES",
    "Check",
    "Context",
    "FindingThresholds",
    "RuleError",
    "build_context",
    "discover",
    "run_rules",
]

_SEVERITY_RANK = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}


def discover() -> dict[str, Check]:
    """rule id → check, from every public module of `gpulens.findings.rules`."""
    found: dict[str, Check] = {}
    for info in pkgutil.iter_modules(rules_package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{rules_package.__name__}.{info.name}")
        rule_id = getattr(module, "RULE_ID", None)
        check = getattr(module, "check", None)
        if not isinstance(rule_id, str) or not callable(check):
            raise TypeError(
                f"findings rule module {module.__name__} needs RULE_ID (a str) and check(ctx); "
                f"got RULE_ID={rule_id!r}"
            )
        if rule_id in found:
            raise ValueError(f"rule id {rule_id!r} is declared twice (second in {module.__name__})")
        found[rule_id] = check
    return dict(sorted(found.items()))


RULES: Mapping[str, Check] = MappingProxyType(discover())


def sort_key(f: Finding) -> tuple[float, int, str, int]:
    """Largest waste first, then the most severe, then rule id and window start."""
    return (-f.impact.wasted_gpu_hours, _SEVERITY_RANK[f.severity], f.rule_id, f.window[0])


#: rules that read snapshot rows (readings covering no time); every other rule is
#: duration-based and sees only the rows that cover time
INSTANT_RULES: frozenset[str] = frozenset({"snapshot_state"})


def _over_time(ctx: Context) -> Context:
    """`ctx` without its snapshot rows (`covered_s` = 0), sharing its errors list."""
    if "covered_s" not in ctx.frame.column_names:
        return ctx
    keep = pc.fill_null(pc.greater(ctx.frame["covered_s"], 0.0), True)
    if pc.all(keep).as_py():
        return ctx
    return replace(ctx, frame=ctx.frame.filter(keep), errors=ctx.errors, _cache={})


def run_rules(
    ctx: Context, only: Iterable[str] | None = None, rules: Mapping[str, Check] | None = None
) -> list[Finding]:
    """Every rule (or those named in `only`) over `ctx`, sorted by impact. `ctx.errors` is
    cleared first and then lists the rules that raised."""
    table = RULES if rules is None else rules
    names = list(table) if only is None else list(only)
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"unknown finding rule(s) {unknown}: expected some of {sorted(table)}")
    ctx.errors.clear()
    timed = _over_time(ctx)
    out: list[Finding] = []
    for name in names:
        try:
            out.extend(table[name](ctx if name in INSTANT_RULES else timed))
        except Exception as exc:  # a broken rule must not take the report down with it
            ctx.errors.append(RuleError(name, type(exc).__name__, str(exc)))
    return sorted(out, key=sort_key)
