"""A report's GPU rows and what the coverage rule says about them: one row per GPU entity
(a whole GPU, a MIG-enabled parent, each MIG instance under it), physical GPUs counted once,
and the notes for snapshots and time without data."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze import rollups

GPU_KEYS: tuple[str, ...] = (
    "host",
    "gpu_index",
    "gpu_uuid",
    "gpu_model",
    "mig_instance",
    "parent_uuid",
    "mig_profile",
)
SNAPSHOT_NOTE = "snapshot: no duration, no GPU-hours or cost (the state at one instant)"


def _number(value: Any) -> int:
    text = str(value if value is not None else "")
    return int(text) if text.isdigit() else 1 << 30


def _order(r: dict[str, Any]) -> tuple[str, int, str, int, int]:
    mig = r.get("parent_uuid") is not None or r.get("mig_instance") is not None
    family = r.get("parent_uuid") if mig else r.get("gpu_uuid")
    return (
        str(r.get("host") or ""),
        _number(r.get("gpu_index")),
        str(family or ""),
        int(mig),
        _number(r.get("mig_instance")),
    )


def _covered_by_gpu(frame: pa.Table) -> dict[str, float]:
    if "covered_s" not in frame.column_names:
        return {}
    t = (
        frame.select(["gpu_uuid", "covered_s"])
        .group_by("gpu_uuid")
        .aggregate([("covered_s", "sum")])
    )
    return {r["gpu_uuid"]: r["covered_s_sum"] or 0.0 for r in t.to_pylist()}


def gpu_rows(frame: pa.Table) -> list[dict[str, Any]]:
    """Per GPU entity: its rollup, memory peak and total, and `snapshot` (its readings cover
    no time). A parent whose MIG instances have rows of their own carries `mig_instances` and
    no memory figures (its instances hold them: never counted twice; its GPU-hours are 0, see
    `analyze.waste`). Each instance follows its parent."""
    keys = tuple(k for k in GPU_KEYS if k in frame.column_names)
    table = rollups.rollup(frame, keys)
    memory = frame.group_by("gpu_uuid").aggregate(
        [("memory_used_bytes", "max"), ("memory_total_bytes", "max")]
    )
    peaks = {r["gpu_uuid"]: r for r in memory.to_pylist()}
    covered = _covered_by_gpu(frame)
    rows = []
    for r in table.to_pylist():
        peak = peaks.get(r["gpu_uuid"], {})
        r.update({k: v for k, v in peak.items() if k != "gpu_uuid"})
        r["snapshot"] = covered.get(r["gpu_uuid"], 1.0) == 0.0
        rows.append(r)
    children: dict[str, int] = {}
    for r in rows:
        if r.get("parent_uuid") is not None:
            children[r["parent_uuid"]] = children.get(r["parent_uuid"], 0) + 1
    for r in rows:
        n = children.get(r["gpu_uuid"], 0)
        if n and r.get("parent_uuid") is None:
            r["mig_instances"] = n
            r["memory_used_bytes_max"] = r["memory_total_bytes_max"] = None
    return sorted(rows, key=_order)


def gpu_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """`gpus`: physical GPUs (a MIG-enabled GPU once, with or without a row of its own);
    `mig_instances`: MIG instances."""
    physical = {r["gpu_uuid"] for r in rows if r.get("parent_uuid") is None}
    parents = {r["parent_uuid"] for r in rows if r.get("parent_uuid") is not None}
    instances = sum(1 for r in rows if r.get("parent_uuid") is not None)
    return {"gpus": len(physical | parents), "mig_instances": instances}


def coverage_notes(frame: pa.Table, totals: dict[str, Any]) -> list[str]:
    """What the report says about snapshots and time without data."""
    notes = []
    if "covered_s" in frame.column_names and frame.num_rows:
        cover = np.nan_to_num(
            np.asarray(pc.cast(frame["covered_s"], pa.float64()).to_numpy(zero_copy_only=False)),
            nan=1.0,
        )
        if not cover.any():
            notes.append(SNAPSHOT_NOTE)
        else:
            shot = sum(1 for v in _covered_by_gpu(frame).values() if v == 0.0)
            if shot:
                notes.append(
                    f"{shot} GPU(s) seen in a lone snapshot: shown at that instant, with no "
                    "duration, no GPU-hours or cost"
                )
    hours = totals.get("no_data_gpu_hours") or 0.0
    if hours > 0:
        notes.append(
            f"{hours:.3g} GPU-hours without data (gaps between readings longer than the maximum "
            "gap): counted apart, neither allocated nor idle"
        )
    return notes


#: the event `gpulens ingest` writes per file: where that file's time came from
CAPTURE_TIME_EVENT = "capture_time"


def time_notes(events: pa.Table | None) -> list[str]:
    """Where the times of ingested captures came from, one note per kind of source with its
    count of files (from the `capture_time` events in the window)."""
    if events is None or events.num_rows == 0 or "event" not in events.column_names:
        return []
    counts: dict[str, int] = {}
    for name, message in zip(
        events["event"].to_pylist(), events["message"].to_pylist(), strict=True
    ):
        if name == CAPTURE_TIME_EVENT and message:
            counts[message] = counts.get(message, 0) + 1
    return [f"{message} ({n} file{'s' if n > 1 else ''})" for message, n in counts.items()]
