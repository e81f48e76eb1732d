"""One exporter per GPU in a fleet of several (pure: series in, series out).

A fleet can run different GPU exporters on different nodes (dcgm-exporter on the new nodes,
nvidia_gpu_exporter on old ones, gpulens agents on some), and one node can run two. Every
family present is read; each GPU is then taken from the first family, in the order given
(`source.FAMILY_ORDER`), that has a series of it, and its series from the other families
are left out, so no GPU is counted twice.

A GPU is known by its UUID (case and the ``GPU-`` prefix ignored: exporters print it
differently; a MIG instance by its UUID and instance), or by host and index where a series
carries no UUID.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpulens.collect.prometheus.parse import Series
from gpulens.collect.prometheus.tables import LabelIndex, identity, label_index
from gpulens.series_catalog import PROFILING_METRICS, SeriesMap, SeriesSpec

#: metric → (spec, series) pairs of one family
FamilySeries = dict[str, list[tuple[SeriesSpec, Series]]]

FAMILY_NAMES = {
    "site": "the site's own series (prometheus.series)",
    "gpulens": "gpulens agents",
    "dcgm": "dcgm-exporter",
    "nvidia_gpu_exporter": "nvidia_gpu_prometheus_exporter",
    "nvidia_smi_exporter": "nvidia_gpu_exporter (nvidia_smi_*)",
    "slurm_job_exporter": "slurm-job-exporter",
}


@dataclass(frozen=True, slots=True)
class Merged:
    """The series kept (metric → pairs), GPUs read from each family, GPUs seen by more than
    one family (each read from its first), and the metrics of each family."""

    series: FamilySeries
    gpus: dict[str, int] = field(default_factory=dict)
    shared: int = 0
    metrics: dict[str, frozenset[str]] = field(default_factory=dict)


def gpu_key(
    labels: Mapping[str, str], mapping: SeriesMap, index: LabelIndex | None = None
) -> tuple[str, ...] | None:
    """Which GPU (or MIG instance) a series is of, the same whichever exporter printed it;
    None when its labels name no GPU."""
    ids = identity(labels, mapping, index)
    uuid = ids.get("parent_uuid") or ids.get("gpu_uuid")
    if uuid:
        plain = uuid.strip().lower().removeprefix("gpu-")
        return ("uuid", plain, ids.get("mig_instance", ""))
    if "gpu_index" in ids:
        return ("index", ids.get("host", ""), ids["gpu_index"], ids.get("mig_instance", ""))
    return None


def one_family_per_gpu(
    found: Sequence[tuple[str, Mapping[str, Sequence[tuple[SeriesSpec, Series]]]]],
    mapping: SeriesMap,
) -> Merged:
    """The series of `found` (family → its series per metric, in order of preference) with
    each GPU's series from its first family only. Series that name no GPU are kept (the
    table builder counts them as skipped). One family is returned as it is (nothing to
    merge: `gpus` is then empty)."""
    if len(found) == 1:
        family, series = found[0]
        single = {family: frozenset(m for m, pairs in series.items() if pairs)}
        return Merged({m: list(pairs) for m, pairs in series.items()}, metrics=single)
    index = label_index(mapping)
    owner: dict[tuple[str, ...], str] = {}
    seen_by: dict[tuple[str, ...], int] = {}
    keys: dict[int, tuple[str, ...] | None] = {}
    for family, series in found:
        mine: set[tuple[str, ...]] = set()
        for pairs in series.values():
            for _, s in pairs:
                if id(s) not in keys:
                    keys[id(s)] = gpu_key(s.labels, mapping, index)
                key = keys[id(s)]
                if key is not None:
                    mine.add(key)
        for key in mine:
            owner.setdefault(key, family)
            seen_by[key] = seen_by.get(key, 0) + 1
    out: FamilySeries = {}
    metrics: dict[str, frozenset[str]] = {}
    for family, series in found:
        kept: set[str] = set()
        for metric, pairs in series.items():
            for spec, s in pairs:
                key = keys[id(s)]
                if key is None or owner[key] == family:
                    out.setdefault(metric, []).append((spec, s))
                    kept.add(metric)
        metrics[family] = frozenset(kept)
    gpus: dict[str, int] = {}
    for family in owner.values():
        gpus[family] = gpus.get(family, 0) + 1
    shared = sum(1 for n in seen_by.values() if n > 1)
    return Merged(out, gpus, shared, metrics)


def family_notes(found: Sequence[tuple[str, Mapping[str, object]]], merged: Merged) -> list[str]:
    """What a fleet of several exporters gets: the GPUs from each, the GPUs seen twice, and
    what a family without profiling series costs its GPUs."""
    if len(found) < 2:
        return []
    order = [family for family, _ in found]
    parts = [f"{FAMILY_NAMES.get(f, f)} {merged.gpus.get(f, 0)}" for f in order]
    out = [f"GPUs per exporter: {', '.join(parts)}"]
    if merged.shared:
        out.append(
            f"GPUs with series from more than one exporter: {merged.shared}, each read once, "
            f"from the first of {', '.join(FAMILY_NAMES.get(f, f) for f in order)}"
        )
    for family in order[1:]:
        n = merged.gpus.get(family, 0)
        if n and not merged.metrics.get(family, frozenset()) & PROFILING_METRICS:
            out.append(
                f"{FAMILY_NAMES.get(family, family)} has no profiling series: useful work of "
                f"its {n} GPUs unknown, duty cycle only"
            )
    return out
