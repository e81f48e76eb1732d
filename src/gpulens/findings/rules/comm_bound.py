"""comm_bound: a job's GPUs stall on collectives (all-reduce) rather than compute."""

from __future__ import annotations

from gpulens.findings.columns import equals, floats, in_states
from gpulens.findings.context import Context
from gpulens.findings.model import Evidence, Finding
from gpulens.findings.peers import stragglers
from gpulens.findings.runs import finding, hours, mean, qualifying

RULE_ID = "comm_bound"


def check(ctx: Context) -> list[Finding]:
    """Runs of `comm_bound` intervals of jobs whose wait no single slow GPU explains (those
    are the `straggler` rule's)."""
    th = ctx.states
    explained = {s.job_id for s in stragglers(ctx)}
    mask = in_states(ctx, RULE_ID) & ~equals(ctx, "job_id", *explained)
    out = []
    for run in qualifying(ctx, RULE_ID, mask, signal=floats(ctx, "sm_active")):
        sm = mean(ctx, "sm_active", run)
        nvlink = mean(ctx, "nvlink_bps", run)
        pcie = mean(ctx, "pcie_rx_bps", run) + mean(ctx, "pcie_tx_bps", run)
        evidence = [
            Evidence("sm_active", sm, th.sm_good, "<", "while a peer GPU of the job is busier"),
            Evidence("nvlink_bps", nvlink),
            Evidence("pcie_bps", pcie),
        ]
        out.append(
            finding(
                ctx,
                RULE_ID,
                run,
                f"communication-bound for {hours(run.duration_s)}: SM active {sm:.2f} while "
                "the job's GPUs wait on each other",
                evidence,
                "Communicate less often and overlap it with compute: larger gradient buckets "
                "(`DistributedDataParallel(..., bucket_cap_mb=100)`), gradient accumulation "
                "with `model.no_sync()` on all but the last micro-batch, BF16 gradient "
                "compression (`register_comm_hook(state=None, hook=bf16_compress_hook)`), and "
                "for FSDP `backward_prefetch=BACKWARD_PRE`; check `NCCL_DEBUG=INFO` that NCCL "
                "uses NVLink/InfiniBand rather than PCIe or TCP.",
                level=ctx.thresholds.level(RULE_ID, run.duration_s),
            )
        )
    return out
