"""Read a time range of GPU telemetry back from Prometheus, downsampled on the server.

`PrometheusSource(url, ...).read(start_s, end_s, step_s)` (or `read_range(...)` in one call):

1. the metric names the server holds in the range (`/api/v1/label/__name__/values`) are
   matched against the series catalog (`gpulens.series_catalog`): every GPU family present
   is read (gpulens agents, dcgm-exporter, nvidia_gpu_prometheus_exporter, utkuozdemir's
   nvidia_gpu_exporter, slurm-job-exporter), and each GPU from the first of them, in that
   order, that has it (`families.one_family_per_gpu`): a fleet whose nodes run different
   exporters gets all its GPUs, and a node running two is not counted twice;
2. per series name, the number of series in the range (`/api/v1/series`) sizes the chunks
   (`plan.chunks`: under 11,000 points per series and `query.max-samples`);
3. each name is queried at the step with `avg_over_time` / `max_over_time` (`plan.step_query`),
   so a 30-day report pulls one point per GPU, metric and step, never the raw samples; a
   chunk the server refuses as too large is asked again in halves;
4. `tables.build_tables` turns the series into the store's reading tables; Kueue's quota and
   usage become the cluster sequence, kube-state-metrics' pod labels and owners attribute
   pods to teams and jobs.

What a missing family costs is said once, in `PromRange.notes` ("no DCGM profiling series:
useful work unknown, duty cycle only").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.cluster_schema import SEQUENCE_SCHEMA
from gpulens.collect.prometheus import cluster
from gpulens.collect.prometheus.client import Auth, PrometheusClient, TooLarge, Transfer
from gpulens.collect.prometheus.families import FAMILY_NAMES as _FAMILY_NAMES
from gpulens.collect.prometheus.families import FamilySeries, family_notes, one_family_per_gpu
from gpulens.collect.prometheus.parse import Series, label_sets, names, parse_matrix
from gpulens.collect.prometheus.plan import Chunk, QueryLimits, aligned, chunks, halve, step_query
from gpulens.collect.prometheus.tables import ReadingTables, build_tables
from gpulens.errors import CollectError
from gpulens.model import Kind, Reading
from gpulens.series_catalog import (
    KSM_LABELS,
    KSM_OWNER,
    KUEUE_PENDING,
    KUEUE_QUOTA,
    KUEUE_USAGE,
    PROFILING_METRICS,
    SeriesMap,
    SeriesSpec,
)

#: GPU families in the order a GPU seen by several is read from
FAMILY_ORDER: tuple[str, ...] = (
    "gpulens",
    "dcgm",
    "nvidia_gpu_exporter",
    "nvidia_smi_exporter",
    "slurm_job_exporter",
)


@dataclass
class PromRange:
    """What one range read returned: the reading tables, the Kueue cluster sequence (empty
    without Kueue), pending workloads per ClusterQueue, the family read, notes on what is
    missing and what it costs, and transfer figures."""

    tables: ReadingTables
    sequence: pa.Table
    start_s: float
    end_s: float
    step_s: float
    family: str | None
    series_names: list[str] = field(default_factory=list)
    #: family → GPUs read from it (several when the fleet runs different exporters)
    families: dict[str, int] = field(default_factory=dict)
    pending_workloads: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    requests: int = 0
    bytes_read: int = 0
    points: int = 0


class PrometheusSource:
    """One Prometheus (or Thanos, Mimir, VictoriaMetrics) query endpoint.

    `selector`: label matchers added to every series selector (``cluster="a"``) for a server
    that holds several clusters. `scrape_s`: the scrape interval assumed when sizing chunks.
    `concurrency`: queries in flight at once (the server computes one while gpulens parses
    another)."""

    def __init__(
        self,
        url: str,
        mapping: SeriesMap | None = None,
        *,
        auth: Auth | None = None,
        transfer: Transfer | None = None,
        limits: QueryLimits | None = None,
        selector: str = "",
        scrape_s: float = 15.0,
        concurrency: int = 2,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.concurrency = concurrency
        self.client = PrometheusClient(url, auth, transfer, transport=transport)
        self.mapping = mapping or SeriesMap()
        self.limits = limits or QueryLimits()
        self.selector = selector
        self.scrape_s = scrape_s

    @property
    def name(self) -> str:
        return self.client.name

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> PrometheusSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def present(self, start_s: float, end_s: float) -> set[str]:
        """The metric names the server holds in [start, end)."""
        data = self.client.label_values("__name__", start_s, end_s)
        return set(names(data, f"{self.name}/api/v1/label/__name__/values"))

    def choose(self, present: set[str]) -> tuple[str | None, dict[str, list[SeriesSpec]]]:
        """The first GPU family of `choose_all` and its series per metric ((None, {}) when
        the server has none)."""
        found = self.choose_all(present)
        return found[0] if found else (None, {})

    def choose_all(self, present: set[str]) -> list[tuple[str, dict[str, list[SeriesSpec]]]]:
        """Every GPU family with a series present, in `FAMILY_ORDER`, and per metric its
        series present; a site's own series (`prometheus.series`) replace the first family's
        for their metric (a recording rule over that exporter's series)."""

        def specs_of(family: str) -> dict[str, list[SeriesSpec]]:
            out: dict[str, list[SeriesSpec]] = {}
            for name in sorted(present):
                spec = self.mapping.series.get(name)
                if spec is not None and spec.family == family:
                    out.setdefault(spec.metric, []).append(spec)
            return out

        site = specs_of("site")
        found = [(family, specs_of(family)) for family in FAMILY_ORDER]
        found = [(family, chosen) for family, chosen in found if chosen]
        if not found:
            return [("site", site)] if site else []
        first, chosen = found[0]
        found[0] = (first, {**chosen, **site})
        return found

    def read(self, start_s: float, end_s: float, step_s: float) -> PromRange:
        """The readings of [start, end) at `step_s` (aligned down to whole steps)."""
        lo, hi = aligned(start_s, end_s, step_s)
        present = self.present(lo, hi)
        found = self.choose_all(present)
        family, chosen = found[0] if found else (None, {})
        per_family: dict[str, FamilySeries] = {name: {} for name, _ in found}
        points = 0
        wanted = [(name, spec) for name, specs in found for v in specs.values() for spec in v]
        # the server computes one query while the previous answer is parsed here
        with ThreadPoolExecutor(max(1, self.concurrency)) as pool:
            answers = pool.map(lambda fs: self.query(fs[1].name, fs[1].agg, lo, hi, step_s), wanted)
            for (name, spec), got in zip(wanted, answers, strict=True):
                points += sum(len(s.ts_ms) for s in got)
                per_family[name].setdefault(spec.metric, []).extend((spec, s) for s in got)
        merged = one_family_per_gpu(list(per_family.items()), self.mapping)
        del per_family
        owners = self._owners(present, lo, hi)
        tables = build_tables(merged.series, step_s, self.mapping, owners=owners)
        sequence, pending = self._kueue(present, lo, hi, step_s)
        out = PromRange(
            tables=tables,
            sequence=sequence,
            start_s=lo,
            end_s=hi,
            step_s=step_s,
            family=family,
            series_names=sorted(s.name for _, c in found for specs in c.values() for s in specs),
            families=dict(merged.gpus) or _gpus_of(family, tables),
            pending_workloads=pending,
            points=points,
        )
        out.notes = notes(family, set(chosen), tables, bool(sequence.num_rows), present)
        out.notes[1:1] = family_notes(found, merged)
        out.requests, out.bytes_read = self.client.requests, self.client.bytes_read
        return out

    def query(self, name: str, agg: str, lo: float, hi: float, step_s: float) -> list[Series]:
        """Every series of `name`, `agg`-downsampled at the step over [lo, hi), chunked."""
        count = self.count(name, lo, hi)
        if count == 0:
            return []
        query = step_query(name, agg, step_s, self.selector)
        merged: dict[frozenset[tuple[str, str]], list[Series]] = {}
        todo: list[Chunk] = list(chunks(lo, hi, step_s, count, self.scrape_s, self.limits))
        while todo:
            chunk = todo.pop(0)
            try:
                body = self.client.query_range_body(query, chunk.first_s, chunk.last_s, step_s)
            except TooLarge:
                if chunk.points <= 1:
                    raise
                todo[:0] = halve(chunk)
                continue
            for s in parse_matrix(body, f"{self.name} {query}"):
                merged.setdefault(frozenset(s.labels.items()), []).append(s)
        return [_join(parts) for parts in merged.values()]

    def count(self, name: str, lo: float, hi: float) -> int:
        """How many series of `name` the range holds."""
        sel = f"{name}{{{self.selector}}}" if self.selector else name
        return len(label_sets(self.client.series([sel], lo, hi), f"{self.name}/api/v1/series"))

    def _owners(
        self, present: set[str], lo: float, hi: float
    ) -> dict[tuple[str, str], dict[str, str]]:
        if KSM_LABELS not in present and KSM_OWNER not in present:
            return {}
        src = f"{self.name}/api/v1/series"
        pods = (
            label_sets(self.client.series([KSM_LABELS], lo, hi), src)
            if KSM_LABELS in present
            else []
        )
        owned = (
            label_sets(self.client.series([KSM_OWNER], lo, hi), src) if KSM_OWNER in present else []
        )
        return cluster.pod_owners(pods, owned, self.mapping.team_label)

    def _kueue(
        self, present: set[str], lo: float, hi: float, step_s: float
    ) -> tuple[pa.Table, dict[str, float]]:
        if KUEUE_QUOTA not in present and KUEUE_USAGE not in present:
            return SEQUENCE_SCHEMA.empty_table(), {}
        quota = self.query(KUEUE_QUOTA, "max", lo, hi, step_s) if KUEUE_QUOTA in present else []
        usage = self.query(KUEUE_USAGE, "avg", lo, hi, step_s) if KUEUE_USAGE in present else []
        pending = (
            self.query(KUEUE_PENDING, "avg", lo, hi, step_s) if KUEUE_PENDING in present else []
        )
        return cluster.kueue_sequence(quota, usage, step_s), cluster.pending_workloads(pending)


def _gpus_of(family: str | None, tables: ReadingTables) -> dict[str, int]:
    """{family: GPU entities in the tables} for a range read from one family."""
    gpu = tables.gpu
    if family is None or "gpu_uuid" not in gpu.column_names:
        return {}
    return {family: len(pc.unique(gpu["gpu_uuid"]))}


def _join(parts: Sequence[Series]) -> Series:
    if len(parts) == 1:
        return parts[0]
    import numpy as np

    return Series(
        parts[0].labels,
        np.concatenate([p.ts_ms for p in parts]),
        np.concatenate([p.values for p in parts]),
    )


def notes(
    family: str | None,
    metrics: set[str],
    tables: ReadingTables,
    kueue: bool,
    present: set[str],
) -> list[str]:
    """What the range lacks and what that costs, each said once."""
    if family is None:
        return [
            "no GPU series in this range (looked for gpulens agents, dcgm-exporter "
            "DCGM_FI_*, nvidia_gpu_prometheus_exporter nvidia_gpu_* and slurm-job-exporter "
            "slurm_job_*_gpu): nothing to report; check the range, or map the site's series "
            "names with prometheus.series"
        ]
    out = [f"GPU series from {_FAMILY_NAMES[family]}"]
    if not metrics & PROFILING_METRICS:
        what = (
            "DCGM profiling series (DCGM_FI_PROF_*)"
            if family == "dcgm"
            else ("profiling series (SM, tensor, DRAM activity)")
        )
        out.append(f"no {what}: useful work unknown, duty cycle only")
    if "gpu_util_ratio" not in metrics:
        out.append("no duty-cycle series (GPU_UTIL): busy and idle come from SM activity alone")
    if "memory_used_bytes" not in metrics:
        out.append("no GPU memory series: idle GPUs holding memory cannot be told apart")
    if "power_watts" not in metrics and "energy_joules" not in metrics:
        out.append("no power or energy series: energy, carbon and energy cost unknown")
    elif "energy_joules" not in metrics:
        out.append("no energy counter: energy estimated as power × time")
    if tables.process.num_rows == 0 and family != "slurm_job_exporter":
        out.append(
            "no job, pod or namespace labels on the GPU series: allocation unknown, a GPU "
            "counts as held only while it holds memory (dcgm-exporter adds them with its "
            "Kubernetes pod mapping or the hpc_job label on Slurm)"
        )
    if not kueue and any(n.startswith("kueue_") for n in present):
        out.append("Kueue series present but no GPU quota or usage among them")
    return out


def iter_readings(tables: ReadingTables) -> Iterator[Reading]:
    """The readings of the tables, one `Reading` per row (for callers that take readings;
    the tables are what the store is written from)."""
    for kind, table in ((Kind.GPU, tables.gpu), (Kind.PROCESS, tables.process)):
        labels = [c for c in table.column_names if pa.types.is_string(table.schema.field(c).type)]
        metrics = [c for c in table.column_names if c != "ts" and c not in labels]
        for row in table.to_pylist():
            yield Reading(
                kind,
                int(row["ts"]),
                {k: row[k] for k in labels if row[k] is not None},
                {m: float(row[m]) for m in metrics if row[m] is not None},
            )


def read_range(
    url: str,
    start_s: float,
    end_s: float,
    step_s: float,
    mapping: SeriesMap | None = None,
    *,
    auth: Auth | None = None,
    transfer: Transfer | None = None,
    limits: QueryLimits | None = None,
    selector: str = "",
    transport: httpx.BaseTransport | None = None,
) -> PromRange:
    """`PrometheusSource(url, ...).read(start_s, end_s, step_s)` in one call."""
    with PrometheusSource(
        url, mapping, auth=auth, transfer=transfer, limits=limits, selector=selector,
        transport=transport,
    ) as source:  # fmt: skip
        result = source.read(start_s, end_s, step_s)
    if result.family is None and not result.sequence.num_rows:
        raise CollectError(f"{source.name}: {result.notes[0]}")
    return result
