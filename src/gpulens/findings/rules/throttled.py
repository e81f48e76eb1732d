"""throttled: the SM clock held below its maximum by the power limit or by heat."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpulens.analyze import peaks
from gpulens.analyze.peaks import GpuSpec
from gpulens.findings.columns import combined_codes, floats, in_states, label_codes
from gpulens.findings.context import Context
from gpulens.findings.model import Evidence, Finding, which_held
from gpulens.findings.runs import finding, hours, impact, mean, qualifying
from gpulens.numbers import is_nan

RULE_ID = "throttled"


def _fill_from_spec(
    ctx: Context, values: np.ndarray, spec_value: Callable[[GpuSpec], float | None]
) -> np.ndarray:
    """`values` with NaN rows filled from the datasheet of the row's GPU model (looked up once
    per model), where the datasheet has a figure."""
    missing = np.isnan(values)
    if not missing.any():
        return values.copy()
    code, models = label_codes(ctx, "gpu_model")
    sheet = []
    for model in models:
        spec = peaks.lookup(model)
        value = spec_value(spec) if spec is not None else None
        sheet.append(np.nan if value is None else float(value))
    return np.where(missing, np.asarray(sheet, dtype=np.float64)[code], values)


def _max_clock(ctx: Context) -> np.ndarray:
    """The frame's maximum SM clock, else the datasheet boost clock the state used."""
    return _fill_from_spec(
        ctx,
        floats(ctx, "sm_clock_max_hz"),
        lambda spec: spec.boost_clock_mhz * 1e6 if spec.boost_clock_mhz else None,
    )


def _limit(ctx: Context) -> np.ndarray:
    return _fill_from_spec(
        ctx, floats(ctx, "power_limit_w"), lambda spec: float(spec.tdp_w) if spec.tdp_w else None
    )


def check(ctx: Context) -> list[Finding]:
    """Runs of `throttled` or power-capped intervals per GPU, with the cause (power, thermal)."""
    th, t = ctx.states, ctx.thresholds
    capped = np.asarray(floats(ctx, "power_capped") > 0.5)
    mask = in_states(ctx, RULE_ID) | capped
    gpu_owner = combined_codes(ctx, "host", "gpu_uuid", "mig_instance")
    clock, top, limit = floats(ctx, "sm_clock_hz"), _max_clock(ctx), _limit(ctx)
    ratio = clock / top
    out = []
    # the clock ratio sets the state apart from the intervals around it
    for run in qualifying(ctx, RULE_ID, mask, signal=ratio, owner=gpu_owner):
        rows = run.rows
        r = mean(ctx, ratio, run)
        power = mean(ctx, "power_w", run)
        lim = mean(ctx, limit, run)
        flag_p, flag_t = mean(ctx, "throttle_power", run), mean(ctx, "throttle_thermal", run)
        temp = mean(ctx, "temperature_c", run)
        flagged = not is_nan(flag_p) and flag_p >= th.throttle_fraction
        by_power = flagged or bool(capped[rows].any())
        by_heat = not is_nan(flag_t) and flag_t >= th.throttle_fraction
        causes = [c for c, on in (("power", by_power), ("thermal", by_heat)) if on] or ["unknown"]
        evidence = [
            Evidence("clock_ratio", r, th.clock_throttled, "<", "SM clock / maximum"),
            Evidence("sm_clock_hz", mean(ctx, "sm_clock_hz", run)),
            # the cause: at the power limit, or power or thermal clock-event flags
            *which_held(
                Evidence("power_w", power, th.power_capped_ratio * lim, ">=", f"limit {lim:.1f} W"),
                Evidence("throttle_power", flag_p, th.throttle_fraction, ">=", "share of samples"),
                Evidence(
                    "throttle_thermal", flag_t, th.throttle_fraction, ">=", "share of samples"
                ),
            ),
            Evidence("temperature_c", temp),
        ]
        fixes = []
        if by_power:
            fixes.append(
                f"Power: the board draws {power:.1f} W of its {lim:.1f} W limit. Check the limit "
                "(`nvidia-smi -q -d POWER`); if it was lowered, restore the default "
                "(`nvidia-smi -pl <default>`); if it is the board's maximum, the workload is "
                "power-bound: a deliberate lower power cap or clock lock costs little speed "
                "and saves energy."
            )
        if by_heat:
            fixes.append(
                f"Thermal: at {temp:.0f} °C the GPU slows to protect itself: check the fans, "
                "airflow and inlet temperature of the node, and dust on the heatsink."
            )
        if not fixes:
            fixes.append("Read the clock-event reasons: `nvidia-smi -q -d PERFORMANCE`.")
        deficit = np.clip(1.0 - np.nan_to_num(ratio[rows], nan=1.0), 0.0, 1.0)
        lost = floats(ctx, "allocated_s")[rows] * deficit
        clock_mhz = mean(ctx, "sm_clock_hz", run) / 1e6
        top_mhz = mean(ctx, top, run) / 1e6
        out.append(
            finding(
                ctx,
                RULE_ID,
                run,
                f"{' and '.join(causes)} throttling for {hours(run.duration_s)}: SM clock "
                f"{clock_mhz:.0f} of {top_mhz:.0f} MHz ({r:.0%})",
                evidence,
                " ".join(fixes),
                impact(ctx, rows, lost),
                level=t.level(RULE_ID, run.duration_s),
            )
        )
    return out
