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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

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


def identity(labels: Mapping[str, str], mapping: SeriesMap) -> dict[str, str]:
    """gpulens labels of one series (GPU identity, holder, queue) by the mapping's label
    candidates; `host` from `instance` loses its port; a MIG instance gets its own UUID."""
    out: dict[str, str] = {}
    for key, candidates in mapping.labels.items():
        for name in candidates:
            value = labels.get(name)
            if value:
                if key == "host" and name == "instance":
                    value = _strip_port(value)
                out[key] = value
                break
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


class _Entity:
    """One GPU entity: its identity labels and, per metric, (step times, sum, count)."""

    __slots__ = ("holders", "labels", "metrics")

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.metrics: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.holders: list[tuple[np.ndarray, _Key]] = []


def build_tables(
    series: Mapping[str, Sequence[tuple[SeriesSpec, Series]]],
    step_s: float,
    mapping: SeriesMap,
    counters: frozenset[str] = frozenset({"energy_joules"}),
    owners: Mapping[tuple[str, str], Mapping[str, str]] | None = None,
) -> ReadingTables:
    """The reading tables of the step series in `series` (metric → (spec, series) pairs).

    `owners`: (namespace, pod) → labels to add to that pod's holder (team, job_id from
    kube-state-metrics)."""
    step_ms = round(step_s * 1000)
    entities: dict[_Key, _Entity] = {}
    node_queues: dict[str, str] = {}
    skipped: dict[str, int] = {}
    for metric, pairs in series.items():
        for spec, s in pairs:
            ids = identity(s.labels, mapping)
            if "gpu_uuid" not in ids and "gpu_index" not in ids:
                skipped["no_gpu"] = skipped.get("no_gpu", 0) + 1
                continue
            if "host" in ids and "queue" in ids:
                node_queues[ids["host"]] = ids["queue"]
            key = tuple(ids.get(k, "") for k in ("host", "gpu_uuid", "gpu_index", "mig_instance"))
            ent = entities.get(key)
            if ent is None:
                labels = {k: ids[k] for k in (*GPU_KEYS, "parent_uuid") if k in ids}
                ent = entities[key] = _Entity(labels)
            else:
                for k in (*GPU_KEYS, "parent_uuid"):
                    if k in ids and k not in ent.labels:
                        ent.labels[k] = ids[k]
            values = np.asarray(_convert(spec, s.values), dtype=np.float64)
            bad = _blank(s.values, spec, metric in counters)
            ts = s.ts_ms - step_ms
            if bad.any():
                skipped["sentinel"] = skipped.get("sentinel", 0) + int(bad.sum())
                ts, values = ts[~bad], values[~bad]
            ent.metrics.setdefault(metric, []).append((ts, values))
            holder = _holder(ids, owners)
            if holder is not None or spec.family == "slurm_job_exporter":
                ent.holders.append((ts, holder or ("",) * len(HOLDER_KEYS)))
    return ReadingTables(*_assemble(entities), node_queues=node_queues, skipped=skipped)


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


def _assemble(entities: Mapping[_Key, _Entity]) -> tuple[pa.Table, pa.Table]:
    metrics = sorted({m for e in entities.values() for m in e.metrics})
    label_cols = sorted({k for e in entities.values() for k in e.labels})
    g_ts: list[np.ndarray] = []
    g_labels: dict[str, list[np.ndarray]] = {k: [] for k in label_cols}
    g_values: dict[str, list[np.ndarray]] = {m: [] for m in metrics}
    p_ts: list[np.ndarray] = []
    p_host: list[np.ndarray] = []
    p_uuid: list[np.ndarray] = []
    p_holder: list[list[str]] = []
    p_mem: list[np.ndarray] = []
    for ent in entities.values():
        steps = np.unique(np.concatenate([t for parts in ent.metrics.values() for t, _ in parts]))
        n = len(steps)
        g_ts.append(steps)
        for k in label_cols:
            g_labels[k].append(np.full(n, ent.labels.get(k), dtype=object))
        per_metric: dict[str, np.ndarray] = {}
        for m in metrics:
            per_metric[m] = col = _align(steps, ent.metrics.get(m, []))
            g_values[m].append(col)
        if ent.holders:
            at = np.full(n, -1, dtype=np.int64)
            keys: list[_Key] = []
            for ts, holder in ent.holders:
                at[np.searchsorted(steps, ts)] = len(keys)
                keys.append(holder)
            rows = np.flatnonzero(at >= 0)
            p_ts.append(steps[rows])
            p_host.append(np.full(len(rows), ent.labels.get("host"), dtype=object))
            p_uuid.append(np.full(len(rows), ent.labels.get("gpu_uuid"), dtype=object))
            p_holder.extend(keys[i] for i in at[rows])
            mem = per_metric.get("memory_used_bytes")
            p_mem.append(mem[rows] if mem is not None else np.full(len(rows), np.nan))
    gpu = _table(g_ts, {k: _cat(v) for k, v in g_labels.items()},
                 {m: _cat(v) for m, v in g_values.items()})  # fmt: skip
    holder_cols: dict[str, np.ndarray] = {}
    if p_holder:
        matrix = np.array(p_holder, dtype=object)
        for i, k in enumerate(HOLDER_KEYS):
            col = matrix[:, i]
            col[col == ""] = None
            if any(v is not None for v in col):
                holder_cols[k] = col
    labels = {"host": _cat(p_host), "gpu_uuid": _cat(p_uuid), **holder_cols}
    process = _table(p_ts, labels, {"process_memory_used_bytes": _cat(p_mem)})
    return gpu, process


def _align(steps: np.ndarray, parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """One metric's values at `steps` (NaN where no series had one; the mean where several)."""
    if not parts:
        return np.full(len(steps), np.nan)
    if len(parts) == 1:
        ts, values = parts[0]
        out = np.full(len(steps), np.nan)
        out[np.searchsorted(steps, ts)] = values
        return out
    total = np.zeros(len(steps))
    count = np.zeros(len(steps))
    for ts, values in parts:
        at = np.searchsorted(steps, ts)
        np.add.at(total, at, values)
        np.add.at(count, at, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / count, np.nan)


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0)


def _table(
    ts_ms: list[np.ndarray], labels: Mapping[str, np.ndarray], values: Mapping[str, np.ndarray]
) -> pa.Table:
    ts = _cat(ts_ms).astype(np.int64) * NS_PER_MS if ts_ms else np.zeros(0, dtype=np.int64)
    cols: dict[str, pa.Array] = {"ts": pa.array(ts, pa.int64())}
    for k, v in labels.items():
        cols[k] = pa.array(v if len(v) else [], pa.string())
    for m, v in values.items():
        arr = np.asarray(v, dtype=np.float64)
        cols[m] = pa.array(arr, pa.float64(), mask=np.isnan(arr))
    return pa.table(cols)
