"""Downsampled series → the store's reading tables (pure: series in, Arrow tables out).

Input: per gpulens metric, the series a step query returned (`avg_over_time` or
`max_over_time` of one exporter series over each step, evaluated at the step's end `t`).
Output, in the columnar layout `store.SegmentWriter.append_table` takes (a `ts` column in
epoch ns, string labels, float metrics, null where absent):

- `gpu`: one row per GPU entity (a GPU or a MIG instance: `gpu_uuid` = "<UUID>/gi<id>", as
  the dcgm page parser names it) per step, stamped at the step's start `t - step` (the value
  covers (t - step, t]); the series of one entity that differ only in who held the GPU (a pod
  or job label that changed) are merged, a step seen in several averaged;
- `process`: one row per GPU entity and step where the series named a holder (job, pod,
  namespace, container, user, project, team): no pid, the holder's labels, and the GPU's
  memory in use as `process_memory_used_bytes` (the interval frame counts such a row as the
  process holding the GPU, which is what allocation means).

A step with no sample is no row: a gap stays no data (the frame builder's coverage rule),
never zero. dcgm-exporter's blank values ("no value" written as huge numbers) are dropped.

The GPU's memory size (`memory_total_bytes`) is the exporter's own where it has one
(DCGM_FI_DEV_FB_TOTAL, nvidia_gpu_memory_total_bytes); where only used and free memory exist
(dcgm-exporter's default counters: FB_USED, FB_FREE and FB_RESERVED) it is used + free +
the driver's reserve, as DCGM computes FB_TOTAL (used + free without a reserve series: the
memory applications can have). Used is the step's largest value and free its smallest, so
the sum is exact within a step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.collect.dcgm.parse import FP64_BLANK_THRESHOLD, INT64_BLANK
from gpulens.collect.prometheus.parse import Series
from gpulens.series_catalog import GPU_KEYS, HOLDER_KEYS, SeriesMap, SeriesSpec

NS_PER_MS = 1_000_000
_Key = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReadingTables:
    """The readings of a range as tables (`gpu`, `process`), the hosts' queues named on the
    series (`queue`/`partition` labels), and the series kept out by reason."""

    gpu: pa.Table
    process: pa.Table
    node_queues: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)


#: series label → (gpulens label, rank among its candidates), for one mapping
LabelIndex = dict[str, list[tuple[str, int]]]


def label_index(mapping: SeriesMap) -> LabelIndex:
    """Which gpulens labels each series label may carry, and with what rank (lower wins):
    `identity` looks up only the labels a series has, not every candidate of every key."""
    index: LabelIndex = {}
    for key, candidates in mapping.labels.items():
        for rank, name in enumerate(candidates):
            index.setdefault(name, []).append((key, rank))
    return index


def identity(
    labels: Mapping[str, str], mapping: SeriesMap, index: LabelIndex | None = None
) -> dict[str, str]:
    """gpulens labels of one series (GPU identity, holder, queue) by the mapping's label
    candidates (the first present wins); `host` from `instance` loses its port; a MIG
    instance gets its own UUID. `index`: `label_index(mapping)`, when the caller has it."""
    index = label_index(mapping) if index is None else index
    out: dict[str, str] = {}
    rank_of: dict[str, int] = {}
    for name, value in labels.items():
        if not value:
            continue
        for key, rank in index.get(name, ()):
            if rank < rank_of.get(key, len(mapping.labels[key])):
                rank_of[key] = rank
                out[key] = _strip_port(value) if key == "host" and name == "instance" else value
    gi = out.get("mig_instance")
    uuid = out.get("gpu_uuid")
    if gi and uuid:
        out["parent_uuid"] = uuid
        out["gpu_uuid"] = f"{uuid}/gi{gi}"
    return out


def _strip_port(instance: str) -> str:
    host, sep, port = instance.rpartition(":")
    if sep and port.isdigit() and host:
        return host.strip("[]")
    return instance


def _blank(values: np.ndarray, spec: SeriesSpec, counter: bool) -> np.ndarray:
    """Mask of dcgm-exporter's "no value" marks (a step mean that took one in is as huge)."""
    if spec.dcgm_id is None:
        return np.zeros(len(values), dtype=bool)
    limit = float(INT64_BLANK) if counter else FP64_BLANK_THRESHOLD
    return values >= limit


def _convert(spec: SeriesSpec, values: np.ndarray) -> Any:
    """The unit conversion of `spec` over an array (the conversions are arithmetic)."""
    return spec.convert(values)  # type: ignore[arg-type]


def build_tables(
    series: Mapping[str, Sequence[tuple[SeriesSpec, Series]]],
    step_s: float,
    mapping: SeriesMap,
    counters: frozenset[str] = frozenset({"energy_joules"}),
    owners: Mapping[tuple[str, str], Mapping[str, str]] | None = None,
) -> ReadingTables:
    """The reading tables of the step series in `series` (metric → (spec, series) pairs).

    `owners`: (namespace, pod) → labels to add to that pod's holder (team, job_id from
    kube-state-metrics).

    Vectorised: the points of every series are concatenated with their entity, metric and
    holder codes; one sort-free pivot (`np.unique` over entity × step) makes the rows, and
    `np.bincount` the per-row means of each metric."""
    step_ms = round(step_s * 1000)
    metrics = sorted(series)
    entities: dict[_Key, int] = {}
    ent_labels: list[dict[str, str]] = []
    holders: dict[_Key, int] = {}
    node_queues: dict[str, str] = {}
    skipped: dict[str, int] = {}
    parts: list[tuple[int, int, int, np.ndarray, np.ndarray]] = []  # ent, metric, holder, ts, v
    index = label_index(mapping)
    for m_index, metric in enumerate(metrics):
        for spec, s in series[metric]:
            ids = identity(s.labels, mapping, index)
            if "gpu_uuid" not in ids and "gpu_index" not in ids:
                skipped["no_gpu"] = skipped.get("no_gpu", 0) + 1
                continue
            if "host" in ids and "queue" in ids:
                node_queues[ids["host"]] = ids["queue"]
            key = tuple(ids.get(k, "") for k in ("host", "gpu_uuid", "gpu_index", "mig_instance"))
            e_index = entities.get(key)
            if e_index is None:
                e_index = entities[key] = len(ent_labels)
                ent_labels.append({k: ids[k] for k in (*GPU_KEYS, "parent_uuid") if k in ids})
            else:
                known = ent_labels[e_index]
                for k in (*GPU_KEYS, "parent_uuid"):
                    if k in ids and k not in known:
                        known[k] = ids[k]
            values = np.asarray(_convert(spec, s.values), dtype=np.float64)
            ts = s.ts_ms
            bad = _blank(s.values, spec, metric in counters)
            if bad.any():
                skipped["sentinel"] = skipped.get("sentinel", 0) + int(bad.sum())
                ts, values = ts[~bad], values[~bad]
            holder = _holder(ids, owners)
            if holder is None and spec.family == "slurm_job_exporter":
                holder = ("",) * len(HOLDER_KEYS)
            h_index = -1 if holder is None else holders.setdefault(holder, len(holders))
            parts.append((e_index, m_index, h_index, ts - step_ms, values))
    gpu, process = _pivot(parts, metrics, ent_labels, list(holders))
    gpu = with_memory_total(gpu)
    return ReadingTables(gpu, process, node_queues=node_queues, skipped=skipped)


def _holder(
    ids: Mapping[str, str], owners: Mapping[tuple[str, str], Mapping[str, str]] | None
) -> _Key | None:
    if not any(ids.get(k) for k in HOLDER_KEYS):
        return None
    merged = dict(ids)
    if owners and "pod" in ids:
        for k, v in owners.get((ids.get("namespace", ""), ids["pod"]), {}).items():
            merged.setdefault(k, v)
    return tuple(merged.get(k, "") for k in HOLDER_KEYS)


def _pivot(
    parts: Sequence[tuple[int, int, int, np.ndarray, np.ndarray]],
    metrics: Sequence[str],
    ent_labels: Sequence[Mapping[str, str]],
    holders: Sequence[_Key],
) -> tuple[pa.Table, pa.Table]:
    """The gpu and process tables of the concatenated points (see `build_tables`)."""
    if not parts:
        return pa.table({"ts": pa.array([], pa.int64())}), pa.table(
            {"ts": pa.array([], pa.int64())}
        )
    sizes = np.fromiter((len(p[3]) for p in parts), dtype=np.int64, count=len(parts))
    ent = np.repeat(np.fromiter((p[0] for p in parts), np.int64, len(parts)), sizes)
    met = np.repeat(np.fromiter((p[1] for p in parts), np.int64, len(parts)), sizes)
    hol = np.repeat(np.fromiter((p[2] for p in parts), np.int64, len(parts)), sizes)
    ts = np.concatenate([p[3] for p in parts]).astype(np.int64)
    val = np.concatenate([p[4] for p in parts])
    # rows: one per (entity, step time), ordered by entity then time
    t_codes, t_index = np.unique(ts, return_inverse=True)
    key = ent * len(t_codes) + t_index
    row_keys, row = np.unique(key, return_inverse=True)
    n_rows, n_met = len(row_keys), len(metrics)
    row_ent = row_keys // len(t_codes)
    row_ts = t_codes[row_keys % len(t_codes)]
    cell = row * n_met + met
    sums = np.bincount(cell, weights=val, minlength=n_rows * n_met).reshape(n_rows, n_met)
    counts = np.bincount(cell, minlength=n_rows * n_met).reshape(n_rows, n_met)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    label_names = sorted({k for labels in ent_labels for k in labels})
    cols: dict[str, pa.Array] = {"ts": pa.array(row_ts * NS_PER_MS, pa.int64())}
    ent_codes = pa.array(row_ent.astype(np.int32), pa.int32())
    for name in label_names:
        dictionary = pa.array([labels.get(name) for labels in ent_labels], pa.string())
        cols[name] = pa.DictionaryArray.from_arrays(ent_codes, dictionary)
    for j, metric in enumerate(metrics):
        col = means[:, j]
        cols[metric] = pa.array(col, pa.float64(), mask=np.isnan(col))
    gpu = pa.table(cols)
    # who held each row: the holder of any of its points (the last one listed wins)
    held_row = np.full(n_rows, -1, dtype=np.int64)
    mask = hol >= 0
    held_row[row[mask]] = hol[mask]
    rows = np.flatnonzero(held_row >= 0)
    pcols: dict[str, pa.Array] = {"ts": pa.array(row_ts[rows] * NS_PER_MS, pa.int64())}
    r_ent = pa.array(row_ent[rows].astype(np.int32), pa.int32())
    for name in ("host", "gpu_uuid"):
        if name in label_names:
            dictionary = pa.array([labels.get(name) for labels in ent_labels], pa.string())
            pcols[name] = pa.DictionaryArray.from_arrays(r_ent, dictionary)
    h_codes = pa.array(held_row[rows].astype(np.int32), pa.int32())
    for i, name in enumerate(HOLDER_KEYS):
        values = [h[i] or None for h in holders]
        if any(v is not None for v in values):
            pcols[name] = pa.DictionaryArray.from_arrays(h_codes, pa.array(values, pa.string()))
    if "memory_used_bytes" in metrics:
        mem = means[rows, metrics.index("memory_used_bytes")]
    else:
        mem = np.full(len(rows), np.nan)
    pcols["process_memory_used_bytes"] = pa.array(mem, pa.float64(), mask=np.isnan(mem))
    return gpu, pa.table(pcols)


def with_memory_total(gpu: pa.Table) -> pa.Table:
    """`gpu` with `memory_total_bytes` = used + free (+ reserved, where known) where the
    exporter gave no total (a row without used or free stays null: unknown, not 0)."""
    names = gpu.column_names
    if "memory_used_bytes" not in names or "memory_free_bytes" not in names:
        return gpu
    derived = pc.add(gpu["memory_used_bytes"], gpu["memory_free_bytes"])
    if "memory_reserved_bytes" in names:
        derived = pc.add(derived, pc.fill_null(gpu["memory_reserved_bytes"], 0.0))
    if "memory_total_bytes" not in names:
        return gpu.append_column("memory_total_bytes", derived)
    index = names.index("memory_total_bytes")
    merged = pc.coalesce(gpu["memory_total_bytes"], derived)
    return gpu.set_column(index, "memory_total_bytes", merged)
