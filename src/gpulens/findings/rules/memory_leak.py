"""memory_leak: GPU memory that keeps growing, with the projected time of out-of-memory."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from gpulens.analyze.leaks import detect_leaks
from gpulens.findings.columns import label_codes
from gpulens.findings.context import Context
from gpulens.findings.model import Evidence, Finding, Impact, Severity
from gpulens.findings.runs import docs, gb, hours
from gpulens.numbers import is_nan

RULE_ID = "memory_leak"
MIB = float(1 << 20)


def leaks(ctx: Context) -> pa.Table:
    """`analyze.leaks.detect_leaks` of the frame (or the context's own table), once."""
    if ctx.leaks is not None:
        return ctx.leaks
    return ctx.cached("leaks", lambda: detect_leaks(ctx.frame, ctx.memory))


def _gpu_index(ctx: Context) -> dict[str | None, str | None]:
    """GPU UUID → the GPU index of its last row."""
    uuid, uuids = label_codes(ctx, "gpu_uuid")
    index, indexes = label_codes(ctx, "gpu_index")
    last = np.full(len(uuids), -1, dtype=np.int64)
    np.maximum.at(last, uuid, np.arange(uuid.size))
    return {u: indexes[index[r]] for u, r in zip(uuids, last.tolist(), strict=True) if r >= 0}


def _when(ns: int | None) -> str:
    if ns is None:
        return "unknown"
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def check(ctx: Context) -> list[Finding]:
    """One finding per (job, GPU, run) that `detect_leaks` calls a leak."""
    t, s = ctx.thresholds, ctx.memory
    index = _gpu_index(ctx)
    table = leaks(ctx)
    out = []
    for leak in table.filter(table.column("leak").fill_null(False)).to_pylist():
        rate = float(leak["rate_bytes_per_second"])
        to_oom = leak["time_to_oom_s"]
        if to_oom is not None and to_oom <= t.leak_critical_s:
            level = Severity.CRITICAL
        elif to_oom is not None and to_oom <= t.leak_warning_s:
            level = Severity.WARNING
        else:
            level = Severity.INFO
        oom_text = "unknown" if to_oom is None else f"in {hours(float(to_oom))}"
        subject = {k: str(leak[k]) for k in ("job_id", "host", "gpu_model", "gpu_uuid") if leak[k]}
        if index.get(leak["gpu_uuid"]) is not None:
            subject["gpu_index"] = str(index[leak["gpu_uuid"]])
        evidence = (
            Evidence(
                "rate_bytes_per_second", rate, 0.0, ">", f"{rate / MIB * 3600 / 1024:.2f} GiB/h"
            ),
            Evidence("growth_bytes", float(leak["growth_bytes"]), s.leak_min_growth_bytes, ">="),
            Evidence("r2", float(leak["r2"]), s.leak_min_r2, ">=", "Theil-Sen line fit"),
            Evidence("floor_ratio", float(leak["floor_ratio"]), s.leak_min_floor_ratio, ">="),
            Evidence("duration_s", float(leak["duration_s"]), s.leak_min_duration_s, ">="),
            Evidence("time_to_oom_s", float(to_oom) if to_oom is not None else float("nan")),
            Evidence("oom_at_ns", float(leak["oom_at_ns"] or float("nan"))),
        )
        out.append(
            Finding(
                rule_id=RULE_ID,
                severity=level,
                subject=subject,
                window=(int(leak["window_start_ns"]), int(leak["window_end_ns"])),
                summary=(
                    f"GPU memory grows {rate / MIB:.2f} MiB/s ("
                    f"{gb(float(leak['first_used_bytes']))} → "
                    f"{gb(float(leak['last_used_bytes']))}); out of memory "
                    f"{oom_text}, at {_when(leak['oom_at_ns'])}"
                ),
                evidence=tuple(e for e in evidence if not is_nan(e.value)),
                impact=Impact(currency=ctx.prices.currency),
                recommendation=(
                    "Find what keeps tensors alive across steps: a loss or output appended to a "
                    "list without `.item()`/`.detach()`, caches keyed per batch, growing "
                    "autograd graphs (`retain_graph=True`). Record two snapshots "
                    "(`torch.cuda.memory._record_memory_history()` then "
                    "`torch.cuda.memory._dump_snapshot()`) and compare them in "
                    f"pytorch.org/memory_viz. Until fixed, checkpoint and restart before "
                    f"{_when(leak['oom_at_ns'])} ({oom_text}) instead of losing the work to an OOM."
                ),
                docs=docs(RULE_ID),
            )
        )
    return out
