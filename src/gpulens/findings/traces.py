"""Findings from profiler-trace analyses (pure): analysis results in, `Finding` records out.

A separate module from the telemetry rule registry: these rules read `RankAnalysis` / `Cluster`
(gpulens.analyze.traces.ranks), not telemetry frames. Thresholds are declared once in
`THRESHOLDS` (share of the device's active span unless said otherwise); docs/traces.md lists
them. Subjects are `{"trace": file, "rank": "0"}`; the window is the trace's span in its own
clock (ns).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from gpulens.analyze.traces.causes import CauseTotal, GapExample
from gpulens.analyze.traces.kernels import is_pageable_h2d
from gpulens.analyze.traces.model import base_name
from gpulens.analyze.traces.ranks import Cluster, RankAnalysis
from gpulens.findings.model import Evidence, Finding, Impact, Severity, which_held

NS_PER_HOUR = 3_600 * 10**9


@dataclass(frozen=True)
class Threshold:
    warning: float
    critical: float
    help: str


THRESHOLDS: dict[str, Threshold] = {
    "input_bound": Threshold(0.05, 0.20, "data-loader idle / active span"),
    "launch_bound": Threshold(0.05, 0.20, "launch-overhead idle / active span"),
    "sync_heavy": Threshold(0.05, 0.20, "idle after synchronisations / active span"),
    "cpu_bound": Threshold(0.05, 0.20, "idle while the CPU runs operator/Python code / span"),
    "comm_exposed": Threshold(0.10, 0.30, "collective time not overlapped / active span"),
    "straggler": Threshold(0.05, 0.20, "straggler compute above the others' median"),
    "low_tensor_use": Threshold(0.10, 0.30, "FP32 GEMM/conv kernel time / all GPU time"),
    "memcpy_pageable": Threshold(0.005, 0.05, "pageable host-to-device copy time / span"),
}
# launch_bound also needs this share of kernels shorter than their launch call
LAUNCH_BOUND_SHORT_KERNELS = 0.3
# cpu_bound also needs a profiled CPU op or Python function running in this share of those gaps
CPU_BOUND_MIN_BUSY = 0.5
# below the warning share, memcpy_pageable is reported (as info) from this many copies on
MEMCPY_PAGEABLE_MIN_COPIES = 10

DOCS = "docs/traces.md#findings"


def _severity(rule: str, value: float) -> Severity | None:
    t = THRESHOLDS[rule]
    if value >= t.critical:
        return Severity.CRITICAL
    if value >= t.warning:
        return Severity.WARNING
    return None


def _subject(a: RankAnalysis) -> Mapping[str, str]:
    subject = {"trace": a.trace.file_name}
    if a.rank is not None:
        subject["rank"] = str(a.rank)
    if a.device:
        subject["device"] = a.device
    return subject


def _example(e: GapExample, origin: int) -> Evidence:
    what = f"CPU in {e.cpu_event}" if e.cpu_event else "no CPU event"
    return Evidence(
        "gap_us",
        e.dur_ns / 1000,
        note=f"at +{(e.start_ns - origin) / 1000:,.1f} µs (ts {e.start_ns} ns): {what}; "
        f"next on the GPU: {e.next_gpu_event[:80]}",
    )


def _cause_finding(
    a: RankAnalysis, rule: str, cause: CauseTotal, summary: str, fix: str
) -> Finding | None:
    share = cause.share_of_span
    severity = _severity(rule, share)
    if severity is None:
        return None
    t = THRESHOLDS[rule]
    evidence = (
        Evidence(f"{cause.cause}_idle_share", share, t.warning, ">=", t.help),
        Evidence(f"{cause.cause}_idle_us", cause.idle_ns / 1000, note=f"{cause.gaps} gaps"),
        Evidence(f"{cause.cause}_share_of_idle", cause.share_of_idle),
        *(_example(e, a.origin_ns) for e in cause.examples),
    )
    return Finding(
        rule,
        severity,
        _subject(a),
        (a.origin_ns, a.end_ns),
        summary.format(share=100 * share, ms=cause.idle_ns / 1e6, gaps=cause.gaps),
        evidence,
        Impact(wasted_gpu_hours=cause.idle_ns / NS_PER_HOUR),
        fix,
        DOCS,
    )


def rank_findings(a: RankAnalysis) -> list[Finding]:
    """Every single-rank trace finding for one analysed rank."""
    c = a.causes.causes
    candidates = [
        _cause_finding(
            a,
            "input_bound",
            c["data_loader"],
            "The GPU waits for input: {share:.0f}% of its active span ({ms:,.1f} ms in {gaps} "
            "gaps) is idle while the data loader produces the next batch.",
            "Load data in parallel: DataLoader(num_workers=N, pin_memory=True, "
            "persistent_workers=True, prefetch_factor=2+); move decoding/augmentation off the "
            "training process or to the GPU (e.g. DALI); cache preprocessed data.",
        ),
        _cause_finding(
            a,
            "sync_heavy",
            c["sync"],
            "The host synchronises with the GPU and drains its queue: {share:.0f}% of the "
            "active span ({ms:,.1f} ms in {gaps} gaps) is idle right after a synchronisation.",
            "Remove implicit syncs from the step: avoid .item(), .cpu(), print(tensor) and "
            "Python conditions on GPU values inside the loop (log every N steps, keep metrics "
            "on the GPU); copy results with non_blocking=True into pinned memory; use "
            "torch.cuda.set_sync_debug_mode('warn') to find them.",
        ),
    ]
    launch = c["launch_overhead"]
    kernels = a.causes.kernels_with_launch
    short = a.causes.kernels_shorter_than_launch / kernels if kernels else 0.0
    if short >= LAUNCH_BOUND_SHORT_KERNELS:
        found = _cause_finding(
            a,
            "launch_bound",
            launch,
            "Kernel launches cannot keep up: {share:.0f}% of the active span ({ms:,.1f} ms in "
            "{gaps} short gaps) is launch and dispatch overhead, and "
            f"{100 * short:.0f}% of kernels run shorter than their launch call.",
            "Give the GPU bigger or fewer kernels: capture the step in CUDA graphs "
            "(torch.compile(mode='reduce-overhead') or torch.cuda.graphs), fuse elementwise "
            "ops with torch.compile, increase the batch size.",
        )
        if found is not None:
            found = Finding(
                found.rule_id,
                found.severity,
                found.subject,
                found.window,
                found.summary,
                (
                    *found.evidence,
                    Evidence(
                        "kernels_shorter_than_launch_share",
                        short,
                        LAUNCH_BOUND_SHORT_KERNELS,
                        ">=",
                        f"{a.causes.kernels_shorter_than_launch} of {kernels} kernels",
                    ),
                ),
                found.impact,
                found.recommendation,
                found.docs,
            )
        candidates.append(found)
    candidates += [_cpu_bound(a), _comm_exposed(a), _low_tensor_use(a), _memcpy_pageable(a)]
    return [f for f in candidates if f is not None]


def _cpu_bound(a: RankAnalysis) -> Finding | None:
    cause = a.causes.causes["cpu_ops"]
    busy = a.causes.cpu_ops_busy_ns / cause.idle_ns if cause.idle_ns else 0.0
    if busy < CPU_BOUND_MIN_BUSY:
        return None
    python = a.causes.cpu_ops_python_ns / cause.idle_ns
    found = _cause_finding(
        a,
        "cpu_bound",
        cause,
        "The GPU waits for the CPU: {share:.0f}% of its active span ({ms:,.1f} ms in {gaps} "
        "gaps) is idle while the host runs Python and operator code before the next launch.",
        "Take the CPU off the critical path: torch.compile the model (fuses small ops, removes "
        "Python and dispatcher overhead), capture static steps in CUDA graphs, move per-step "
        "Python work (loops over tensors, logging, metric bookkeeping) out of the loop or to "
        "another thread, and increase the work per launch (batch size); profile the host side "
        "with with_stack=True or py-spy to find the hot code.",
    )
    if found is None:
        return None
    extra = (
        Evidence(
            "cpu_busy_share",
            busy,
            CPU_BOUND_MIN_BUSY,
            ">=",
            "part of these gaps with a CPU operator or Python function running",
        ),
        Evidence("python_share", python, note="part with a Python function running"),
    )
    return replace(found, evidence=(*found.evidence[:3], *extra, *found.evidence[3:]))


def _comm_exposed(a: RankAnalysis) -> Finding | None:
    comm = a.comm
    share = comm.exposed_share_of_span
    severity = _severity("comm_exposed", share)
    if severity is None:
        return None
    t = THRESHOLDS["comm_exposed"]
    evidence = [
        Evidence("exposed_comm_share", share, t.warning, ">=", t.help),
        Evidence("exposed_comm_us", comm.exposed_ns / 1000),
        Evidence("comm_us", comm.comm_ns / 1000),
        Evidence("overlap_share", comm.overlap_share or 0.0, note="collective time hidden"),
    ]
    evidence += [
        Evidence(
            f"{c.name}_exposed_us",
            c.exposed_ns / 1000,
            note=f"{c.count} kernels, {c.total_ns / 1000:,.1f} µs total, "
            f"mean {c.mean_ns / 1000:,.1f} µs",
        )
        for c in comm.collectives[:3]
    ]
    return Finding(
        "comm_exposed",
        severity,
        _subject(a),
        (a.origin_ns, a.end_ns),
        f"Collectives run with no computation beside them: {100 * share:.0f}% of the active "
        f"span ({comm.exposed_ns / 1e6:,.1f} ms of {comm.comm_ns / 1e6:,.1f} ms) is exposed "
        "communication.",
        tuple(evidence),
        Impact(wasted_gpu_hours=comm.exposed_ns / NS_PER_HOUR),
        "Overlap communication with compute: DDP gradient bucketing (bucket_cap_mb) with "
        "backward overlap, FSDP prefetch (forward_prefetch / backward_prefetch), async "
        "collectives on a side stream; reduce volume (bf16 gradients, gradient accumulation "
        "with no_sync); check the interconnect if the exposed time is in a few long kernels.",
        DOCS,
    )


def _low_tensor_use(a: RankAnalysis) -> Finding | None:
    k = a.kernels
    fp32 = k.classes.get("gemm_fp32")
    if fp32 is None or not k.total_ns:
        return None
    share = fp32.time_ns / k.total_ns
    severity = _severity("low_tensor_use", share)
    if severity is None:
        return None
    t = THRESHOLDS["low_tensor_use"]
    evidence = [
        Evidence("fp32_gemm_share", share, t.warning, ">=", t.help),
        Evidence("fp32_gemm_us", fp32.time_ns / 1000, note=f"{fp32.count} kernels"),
        Evidence("tensor_core_share_of_gemm", k.tensor_core_share_of_gemm or 0.0),
    ]
    evidence += [
        Evidence("kernel_us", time / 1000, note=f"{name[:80]} ×{count}")
        for name, count, time in fp32.top
    ]
    return Finding(
        "low_tensor_use",
        severity,
        _subject(a),
        (a.origin_ns, a.end_ns),
        f"Matrix math runs on the FP32 pipes, not tensor cores: {100 * share:.0f}% of GPU time "
        f"is FP32 GEMM/convolution kernels ({fp32.time_ns / 1e6:,.1f} ms).",
        tuple(evidence),
        Impact(wasted_gpu_hours=fp32.time_ns / 2 / NS_PER_HOUR),
        "Use tensor cores: torch.autocast(device_type='cuda', dtype=torch.bfloat16) (or fp16 "
        "with a GradScaler on pre-Ampere GPUs), or allow TF32 on Ampere+: "
        "torch.set_float32_matmul_precision('high') and "
        "torch.backends.cudnn.allow_tf32 = True.",
        DOCS,
    )


def _memcpy_pageable(a: RankAnalysis) -> Finding | None:
    copies = [c for c in a.copies if is_pageable_h2d(c.kind)]
    if not copies:
        return None
    span = a.causes.span_ns
    time = sum(c.time_ns for c in copies)
    count = sum(c.count for c in copies)
    share = time / span if span else 0.0
    severity = _severity("memcpy_pageable", share)
    if severity is None:
        if count < MEMCPY_PAGEABLE_MIN_COPIES:
            return None
        severity = Severity.INFO
    t = THRESHOLDS["memcpy_pageable"]
    # it fires on its share of the span, else (as info) on the number of copies
    evidence = which_held(Evidence("pageable_h2d_share", share, t.warning, ">=", t.help))
    if severity is Severity.INFO:
        many = Evidence("pageable_h2d_copies", count, MEMCPY_PAGEABLE_MIN_COPIES, ">=")
        evidence.append(many)
    evidence.append(Evidence("pageable_h2d_us", time / 1000, note=f"{count} copies"))
    evidence += [
        Evidence(
            "copy_us",
            d / 1000,
            note=f"{c.kind} at +{(ts - a.origin_ns) / 1000:,.1f} µs (ts {ts} ns)",
        )
        for c in copies[:1]
        for ts, d in c.examples
    ]
    return Finding(
        "memcpy_pageable",
        severity,
        _subject(a),
        (a.origin_ns, a.end_ns),
        f"{count} host-to-device copies read pageable memory ({time / 1e6:,.2f} ms): each is "
        "staged through a driver buffer and blocks the host, so it cannot overlap compute.",
        tuple(evidence),
        Impact(wasted_gpu_hours=time / NS_PER_HOUR),
        "Copy from pinned memory: DataLoader(pin_memory=True), or tensor.pin_memory() once "
        "for reused host buffers, then .to('cuda', non_blocking=True).",
        DOCS,
    )


def cluster_findings(cluster: Cluster, analyses: list[RankAnalysis]) -> list[Finding]:
    """Multi-rank findings: the straggler rank."""
    if cluster.straggler is None:
        return []
    rows = {r.rank: r for r in cluster.rows}
    slow = rows[cluster.straggler]
    base = slow.compute_ns - cluster.straggler_excess_ns
    excess = cluster.straggler_excess_ns / base if base else 0.0
    severity = _severity("straggler", excess)
    if severity is None:
        return []
    t = THRESHOLDS["straggler"]
    analysis = next(a for a in analyses if a.rank == cluster.straggler)
    others = [r for r in cluster.rows if r.rank != cluster.straggler]
    evidence = [
        Evidence("compute_excess_share", excess, t.warning, ">=", t.help),
        Evidence("straggler_compute_us", slow.compute_ns / 1000),
        Evidence("others_median_compute_us", base / 1000),
        Evidence("imbalance", cluster.imbalance or 0.0, note="(max - mean) / mean compute"),
        *(
            Evidence(
                "rank_comm_us",
                r.comm_ns / 1000,
                note=f"rank {r.rank}: {100 * r.sync_wait_share:.0f}% of its span in collectives",
            )
            for r in cluster.rows[:8]
        ),
    ]
    subject = {"trace": base_name(slow.file), "rank": str(slow.rank)}
    wait = sum(max(0, r.comm_ns - slow.comm_ns) for r in others)
    return [
        Finding(
            "straggler",
            severity,
            subject,
            (analysis.origin_ns, analysis.end_ns),
            f"Rank {slow.rank} is the straggler: its compute takes {100 * excess:.0f}% longer "
            f"({cluster.straggler_excess_ns / 1e6:,.1f} ms) than the other ranks' median, "
            "which wait for it in collectives.",
            tuple(evidence),
            Impact(wasted_gpu_hours=wait / NS_PER_HOUR),
            "Balance the work: check this rank's input (uneven batch or sequence lengths, "
            "embedding shards), its host (CPU contention, data loading, thermal or power "
            "throttling: compare its telemetry) and its GPU; shard evenly or pad/bucket "
            "sequences.",
            DOCS,
        )
    ]


def trace_findings(analyses: list[RankAnalysis], cluster: Cluster | None = None) -> list[Finding]:
    """All findings of a job, the largest wasted time first."""
    out = [f for a in analyses for f in rank_findings(a)]
    if cluster is not None:
        out += cluster_findings(cluster, analyses)
    order = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}
    return sorted(out, key=lambda f: (order[f.severity], -f.impact.wasted_gpu_hours))
