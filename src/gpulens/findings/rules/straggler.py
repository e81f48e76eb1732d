"""straggler: the one slow GPU of a data-parallel job that every other GPU waits for."""

from __future__ import annotations

from gpulens.findings.columns import floats, strings
from gpulens.findings.context import Context
from gpulens.findings.model import Evidence, Finding, which_held
from gpulens.findings.peers import stragglers
from gpulens.findings.runs import finding, hours, impact, mean, nanmean
from gpulens.numbers import is_nan

RULE_ID = "straggler"


def check(ctx: Context) -> list[Finding]:
    """One finding per straggler, naming the slow GPU; the impact is its peers' waiting."""
    t = ctx.thresholds
    out = []
    for s in stragglers(ctx):
        slow, peers = s.slow_rows, s.waiting_rows
        sm_slow, sm_peers = mean(ctx, "sm_active", slow), mean(ctx, "sm_active", peers)
        clock_slow, clock_peers = mean(ctx, "sm_clock_hz", slow), mean(ctx, "sm_clock_hz", peers)
        top = mean(ctx, "sm_clock_max_hz", slow)
        ratio = clock_slow / top if not is_nan(top) and top > 0 else float("nan")
        index = strings(ctx, "gpu_index")[int(slow[0])] or "?"
        host = strings(ctx, "host")[int(slow[0])] or "?"
        gap = 1.0 - clock_slow / clock_peers if clock_peers > 0 else float("nan")
        # the straggler is the GPU busiest most often; its activity and clock against its
        # peers' are context, the clock gap names the cause when it is wide enough
        evidence = [
            Evidence("share_slowest", s.share, t.straggler_min_share, ">=", "of waiting intervals"),
            Evidence("sm_active", sm_slow, note=f"straggler; its waiting peers {sm_peers:.2f}"),
            Evidence(
                "sm_clock_hz", clock_slow, note=f"straggler; its peers {clock_peers / 1e6:.0f} MHz"
            ),
            *which_held(
                Evidence("clock_gap", gap, t.straggler_clock_gap, ">=", "slower clock than peers")
            ),
            Evidence("clock_ratio", ratio, note="SM clock / maximum"),
            Evidence("power_w", mean(ctx, "power_w", slow)),
            Evidence("temperature_c", mean(ctx, "temperature_c", slow)),
        ]
        if not is_nan(gap) and gap >= t.straggler_clock_gap:
            cause = (
                f"Its SM clock averages {clock_slow / 1e6:.0f} MHz against {clock_peers / 1e6:.0f} "
                f"MHz on its peers ({gap:.0%} slower): check for locked clocks "
                "(`nvidia-smi -q -d CLOCK,PERFORMANCE`; reset with `nvidia-smi -rgc`), a lowered "
                "power limit or poor cooling on that GPU, or drain the node and move the rank."
            )
        else:
            cause = (
                "Its clock matches its peers', so it gets more work: balance the per-rank load "
                "(equal shards, bucket sequences by length) and check its PCIe/NVLink links "
                "(`nvidia-smi topo -m`)."
            )
        throttled = floats(ctx, "throttle_thermal")[slow]
        if nanmean(throttled) >= 0.5:
            cause += " It reports thermal slowdown: check its airflow."
        out.append(
            finding(
                ctx,
                RULE_ID,
                s.run,
                f"GPU {index} ({s.gpu_uuid}) on {host} is the straggler: the job's other GPUs "
                f"wait for it {s.share:.0%} of {hours(s.run.duration_s)}",
                evidence,
                f"Fix or replace GPU {index} on {host}; every step runs at its pace. {cause}",
                impact(ctx, peers),
                labels={"gpu_uuid": s.gpu_uuid, "gpu_index": index, "host": host},
            )
        )
    return out
