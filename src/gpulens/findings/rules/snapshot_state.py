"""snapshot_state: what a point-in-time view can say. A GPU seen in a lone snapshot (its
readings cover no time, see `gpulens.store.coverage`) has no duration, so no duration-based
rule looks at it; this rule reports, at INFO and marked as a snapshot, the states that make
sense at one instant: memory held at 0 % activity, throttled now, memory nearly full, and an
uncorrected ECC or XID error."""

from __future__ import annotations

import math

import numpy as np

from gpulens.analyze import peaks
from gpulens.findings.columns import floats, in_states, starts, step0, strings
from gpulens.findings.context import Context
from gpulens.findings.model import Evidence, Finding, Severity
from gpulens.numbers import is_nan

RULE_ID = "snapshot_state"
MEMORY_FULL = 0.95  # used ÷ total memory that is "nearly full"
THROTTLE_NOW = 0.5  # a power or thermal clock-event flag in at least this share of samples
SNAPSHOT_NOTE = "snapshot: one instant, no duration, no GPU-hours or cost"
_SUBJECT = ("host", "gpu_uuid", "gpu_index", "gpu_model", "mig_instance", "parent_uuid")


def snapshot_rows(ctx: Context) -> np.ndarray:
    """Rows whose readings cover no time (a frame without `covered_s` has none)."""
    if "covered_s" not in ctx.frame.column_names:
        return np.zeros(ctx.frame.num_rows, dtype=bool)
    return np.asarray(floats(ctx, "covered_s") == 0.0, dtype=bool)


def _limit_w(ctx: Context, i: int) -> float:
    """Row `i`'s power limit: the frame's, else the datasheet's of its model (NaN if neither)."""
    limit = float(floats(ctx, "power_limit_w")[i])
    if is_nan(limit):
        spec = peaks.lookup(strings(ctx, "gpu_model")[i])
        limit = float(spec.tdp_w) if spec is not None and spec.tdp_w else math.nan
    return limit


def _conditions(ctx: Context, i: int) -> list[tuple[str, Evidence]]:
    """(what holds, its evidence) for row `i`."""

    def at(name: str) -> float:
        return float(floats(ctx, name)[i])

    out: list[tuple[str, Evidence]] = []
    activity = float(np.fmax(at("duty"), at("sm_active")))
    used, total = at("memory_used_bytes"), at("memory_total_bytes")
    if activity <= ctx.states.idle_activity and used > ctx.states.idle_memory_bytes:
        out.append((f"{used / 1e9:.2f} GB of memory held at {activity:.0%} activity",
                    Evidence("memory_held_bytes", used, ctx.states.idle_memory_bytes, ">",
                             f"activity {activity:.2f}")))  # fmt: skip
    flagged = False
    for name, cause in (("throttle_power", "power"), ("throttle_thermal", "thermal")):
        if at(name) >= THROTTLE_NOW:
            flagged = True
            said = Evidence(name, at(name), THROTTLE_NOW, ">=", "share of samples")
            out.append((f"clocks held down by {cause} now", said))
    if not flagged and (in_states(ctx, "throttled")[i] or at("power_capped") > 0.5):
        power, limit, clock = at("power_w"), _limit_w(ctx, i), at("sm_clock_hz")
        of = f" of its {limit:.1f} W limit" if not is_nan(limit) else ""
        said = Evidence("sm_clock_hz", clock, note="power-capped or throttled state")
        out.append((f"clocks held down now: {clock / 1e6:.0f} MHz at {power:.1f} W{of}", said))
    if total > 0 and used / total >= MEMORY_FULL:
        out.append((f"memory {used / total:.0%} full",
                    Evidence("memory_used_ratio", used / total, MEMORY_FULL, ">=")))  # fmt: skip
    if at("ecc_dbe_total") > 0:
        out.append((f"{at('ecc_dbe_total'):.0f} uncorrected ECC error(s)",
                    Evidence("ecc_dbe_total", at("ecc_dbe_total"), 0.0, ">")))  # fmt: skip
    if at("xid_last") > 0:
        out.append((f"XID error {at('xid_last'):.0f}",
                    Evidence("xid_last", at("xid_last"), 0.0, ">")))  # fmt: skip
    return out


def check(ctx: Context) -> list[Finding]:
    """One INFO finding per snapshot row with something to say."""
    out = []
    start, step = starts(ctx), step0(ctx)
    labels = {k: strings(ctx, k) for k in _SUBJECT}
    for i in np.flatnonzero(snapshot_rows(ctx)):
        held = _conditions(ctx, int(i))
        if not held:
            continue
        subject = {k: str(v[i]) for k, v in labels.items() if v[i] is not None}
        subject["snapshot"] = "true"
        said = "; ".join(text for text, _ in held)
        out.append(
            Finding(
                RULE_ID,
                Severity.INFO,
                subject,
                (int(start[i]), int(start[i]) + round(float(step[i]) * 1e9)),
                f"snapshot: {said}",
                (*(e for _, e in held), Evidence("covered_seconds", 0.0, note=SNAPSHOT_NOTE)),
                recommendation=(
                    "A snapshot shows one instant: capture a series (`nvidia-smi -q -x -l 60`, "
                    "`nvidia-smi --query-gpu=timestamp,... --format=csv -l 5`, or the gpulens "
                    "agent) to learn how long this lasts and what it costs."
                ),
                docs=f"docs/findings/{RULE_ID}.md",
            )
        )
    return out
