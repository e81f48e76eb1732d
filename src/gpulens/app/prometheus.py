"""`--prometheus URL`: report, ingest and fleet on the telemetry a site's Prometheus holds.

The range is read through `collect.prometheus` (downsampled on the server at the analysis
step) and written through `store.SegmentWriter` like any other writer: into the configured
store (`ingest`), or into a temporary store that lives for one command (`report`, `fleet`),
so the interval frame, the coverage rule (a gap is no data), the analysis, the findings and
the report formats are exactly those of a report on a store.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.app import analysis, session
from gpulens.app.analysis import UNMAPPED_QUEUE, ReportView, auto_step
from gpulens.app.heap import release_memory
from gpulens.cluster_schema import IN_USE, PENDING, QUEUE, SEQUENCE_SCHEMA, TOTAL, TS
from gpulens.collect.prometheus import (
    Auth,
    PrometheusSource,
    PromRange,
    QueryLimits,
    SeriesMap,
    Transfer,
)
from gpulens.config import Config
from gpulens.errors import CollectError, ConfigError
from gpulens.model import Kind
from gpulens.store import Commit, SegmentWriter, Store
from gpulens.store.query import Params

NS = 1_000_000_000
DAY_S = 86_400
#: the step `ingest --prometheus` copies at unless told otherwise
INGEST_STEP_S = 60.0


def _read_secret(path: str | None, key: str) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).expanduser().read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"setting {key!r} = {path!r}: cannot read it ({exc.strerror})") from None


def source(cfg: Config, url: str | None = None) -> PrometheusSource:
    """The Prometheus source the `prometheus.*` settings describe (`url` wins over
    `prometheus.url`)."""
    target = url or cfg.get("prometheus.url")
    if not target:
        raise ConfigError("no Prometheus URL: pass --prometheus URL or set prometheus.url")
    auth = Auth(
        bearer_token=_read_secret(
            cfg.get("prometheus.bearer_token_file"), "prometheus.bearer_token_file"
        ),
        username=cfg.get("prometheus.username"),
        password=_read_secret(cfg.get("prometheus.password_file"), "prometheus.password_file"),
        ca_file=cfg.get("prometheus.ca_file"),
        verify=bool(cfg.get("prometheus.tls_verify")),
    )
    transfer = Transfer(
        timeout_s=float(cfg.get("prometheus.timeout_seconds")),
        max_bytes=int(cfg.get("prometheus.max_response_bytes")),
        retries=int(cfg.get("prometheus.retries")),
    )
    limits = QueryLimits(
        max_points=int(cfg.get("prometheus.max_points")),
        max_samples=int(cfg.get("prometheus.max_samples")),
    )
    mapping = SeriesMap().with_overrides(
        labels=cfg.get("prometheus.labels"),
        series=cfg.get("prometheus.series"),
        team_label=cfg.get("prometheus.team_label"),
    )
    return PrometheusSource(
        str(target),
        mapping,
        auth=auth,
        transfer=transfer,
        limits=limits,
        selector=cfg.get("prometheus.selector") or "",
    )


def window(
    start_ns: int | None, end_ns: int | None, now_ns: int, default_s: float
) -> tuple[float, float]:
    """[start, end) in epoch seconds: `end` defaults to now, `start` to `default_s` before."""
    end = (end_ns if end_ns is not None else now_ns) / NS
    start = start_ns / NS if start_ns is not None else end - default_s
    if start >= end:
        raise ConfigError("--since must be before --until")
    return start, end


def store_range(writer: SegmentWriter, prom: PromRange) -> int:
    """Buffer the range's readings in `writer`; the rows written."""
    rows = 0
    for kind, table in ((Kind.GPU, prom.tables.gpu), (Kind.PROCESS, prom.tables.process)):
        if table.num_rows:
            writer.append_table(kind, table)
            rows += table.num_rows
    return rows


@dataclass
class Pulled:
    """A range read into a store: the store's configuration, what was read, how many rows."""

    cfg: Config
    prom: PromRange
    rows: int
    notes: list[str] = field(default_factory=list)


@contextmanager
def pulled(
    cfg: Config,
    url: str | None,
    start_s: float,
    end_s: float,
    step_s: float,
    keep_tables: bool = False,
    reshape: Callable[[PromRange], list[str]] | None = None,
) -> Iterator[Pulled]:
    """The range read at `step_s` into a temporary store, for the length of the `with`.
    Once stored, the reading tables are dropped (`drop_tables`) unless `keep_tables`.
    `reshape`: changes the range's tables before they are stored (a job report keeps the
    job's GPUs); its notes are added to the report's."""
    with source(cfg, url) as src, tempfile.TemporaryDirectory(prefix="gpulens-prom-") as tmp:
        data_dir = Path(tmp)
        # the commit and writer take the store while it exists: a read abandoned at shutdown,
        # whose temporary directory was removed meanwhile, cannot make it again
        with Commit(data_dir) as commit:
            writer = SegmentWriter(data_dir, "prometheus", commit=commit)
            prom = src.read(start_s, end_s, step_s)
            if prom.family is None and not prom.sequence.num_rows:
                raise CollectError(f"{src.name}: {prom.notes[0]}")
            reshaped = reshape(prom) if reshape is not None else []
            rows = store_range(writer, prom)
            writer.close()
            commit.commit()
        if not keep_tables:
            drop_tables(prom)
        release_memory()  # the parse's transient arrays, before the analysis takes its share
        values = {**cfg.values, "data_dir": str(data_dir)}
        notes = [f"read from {src.name}: {_describe(prom)}", *prom.notes, *reshaped]
        yield Pulled(Config(values, cfg.sources), prom, rows, notes)


def drop_tables(prom: PromRange) -> None:
    """Free the range's reading tables once they are stored (their queues are kept)."""
    empty = pa.table({"ts": pa.array([], pa.int64())})
    prom.tables = replace(prom.tables, gpu=empty, process=empty)
    release_memory()


def _describe(prom: PromRange) -> str:
    return (
        f"{prom.points:,} points at a {prom.step_s:g} s step in {prom.requests} requests "
        f"({prom.bytes_read / 1e6:.1f} MB)"
    )


def report(
    cfg: Config,
    url: str | None,
    start_ns: int | None,
    end_ns: int | None,
    now_ns: int,
    scope: Mapping[str, str] | None = None,
    step_s: float | None = None,
    by: str | None = None,
    node_queues: Mapping[str, str] | None = None,
    reshape: Callable[[PromRange], list[str]] | None = None,
) -> ReportView:
    """`gpulens report --prometheus URL`: the same report as on a store (default window: the
    last 7 days; default step: the report's automatic one for the span). `reshape`: see
    `pulled`."""
    view, _ = report_then(
        cfg, url, start_ns, end_ns, now_ns, scope, step_s, by, node_queues, reshape=reshape
    )
    return view


T = TypeVar("T")


def report_then(
    cfg: Config,
    url: str | None,
    start_ns: int | None,
    end_ns: int | None,
    now_ns: int,
    scope: Mapping[str, str] | None = None,
    step_s: float | None = None,
    by: str | None = None,
    node_queues: Mapping[str, str] | None = None,
    then: Callable[[Pulled, dict[str, str]], T] | None = None,
    reshape: Callable[[PromRange], list[str]] | None = None,
) -> tuple[ReportView, T | None]:
    """`report`, then `then(pulled, node → queue)` on the same temporary store before it
    goes, after the report's analysis has returned its memory (`report --plans`:
    `fleet_plans.report_with_plans`)."""
    if by is not None and by not in analysis.BY_COLUMNS:
        raise ConfigError(f"--by {by!r}: use one of {', '.join(analysis.BY_COLUMNS)}")
    start, end = window(start_ns, end_ns, now_ns, 7 * DAY_S)
    step = step_s or auto_step(end - start)
    with pulled(cfg, url, start, end, step, reshape=reshape) as got:
        queues = {**got.prom.tables.node_queues, **(node_queues or {})}
        store = QueryOnce(got.cfg.data_dir)
        try:  # what `analysis.report` does, on a store that keeps no query's memory
            view = analysis.analyse(
                store,
                round(got.prom.start_s * NS),
                round(got.prom.end_s * NS),
                scope,
                step,
                prices=session.prices(got.cfg),
                region=session.carbon_region(got.cfg),
                quotas=session.quotas(got.cfg),
                **session.analysis_settings(got.cfg),
                by=by,
                node_queues=queues,
            )
        finally:
            store.close()
        after = None
        if then is not None:
            release_memory()
            after = then(got, queues)
    view.notes[:0] = got.notes
    return view, after


class QueryOnce(Store):
    """A store whose every query runs on a DuckDB connection of its own, closed after it.

    DuckDB keeps the working memory of a large query until its connection closes: for the
    interval frame of 512 GPUs × 7 days that is about 0.45 GB beside the 0.18 GB frame, held
    through the whole analysis that follows. The temporary store of `report --prometheus` is
    queried a handful of times, so a connection per query costs little and returns that
    memory at once (the result's Arrow buffers outlive the connection). Each connection runs
    one thread: DuckDB's working memory grows with its threads, and one thread takes the
    frame query's peak down by another 0.12-0.15 GB for about 1 s (bench/README.md)."""

    def query(self, sql: str, params: Params = None) -> pa.Table:
        with Store(self.data_dir) as store:
            store.query("SET threads = 1")
            return store.query(sql, params)


@dataclass
class IngestSummary:
    """What `ingest --prometheus` stored."""

    source: str = ""
    rows: int = 0
    chunks: int = 0
    points: int = 0
    notes: list[str] = field(default_factory=list)


def ingest(
    cfg: Config,
    url: str | None,
    start_ns: int | None,
    end_ns: int | None,
    now_ns: int,
    step_s: float | None = None,
) -> IngestSummary:
    """`gpulens ingest --prometheus URL --since 7d`: the range copied into the store of `cfg`
    at `step_s` (default 60 s), one day at a time, all in one commit (all of it, or after an
    error, nothing)."""
    start, end = window(start_ns, end_ns, now_ns, 7 * DAY_S)
    step = step_s or INGEST_STEP_S
    out = IngestSummary()
    with source(cfg, url) as src, Commit(cfg.data_dir) as commit:
        out.source = src.name
        writer = SegmentWriter(cfg.data_dir, "prometheus", commit=commit)
        lo = start
        while lo < end:
            hi = min(lo + DAY_S, end)
            if hi - lo >= step:
                prom = src.read(lo, hi, step)
                out.rows += store_range(writer, prom)
                writer.flush()
                out.points += prom.points
                out.chunks += 1
                for note in prom.notes:
                    if note not in out.notes:
                        out.notes.append(note)
            lo = hi
        writer.close()
        commit.commit()
    return out


def fleet_window(
    start_ns: int | None, end_ns: int | None, now_ns: int
) -> tuple[float, float, float]:
    """The window and step `fleet --prometheus` reads (default: the last 7 days)."""
    start, end = window(start_ns, end_ns, now_ns, 7 * DAY_S)
    return start, end, auto_step(end - start)


def allocation_sequence(prom: PromRange, node_queues: Mapping[str, str]) -> pa.Table:
    """The cluster sequence of the GPU series themselves, per queue (node → queue; hosts of
    no queue are `(no queue)`) and step: GPUs reporting (total), GPUs a job or pod held (in
    use; null when no series names a holder), pending unknown."""
    gpu, proc = prom.tables.gpu, prom.tables.process
    if gpu.num_rows == 0 or "gpu_uuid" not in gpu.column_names:
        return SEQUENCE_SCHEMA.empty_table()
    rows = pa.table({"ts": gpu["ts"], "gpu_uuid": _text(gpu["gpu_uuid"]),
                     "host": _text(gpu["host"]) if "host" in gpu.column_names
                     else pa.nulls(gpu.num_rows, pa.string())})  # fmt: skip
    known = proc.num_rows > 0
    if known:
        held = pa.table({"ts": proc["ts"], "gpu_uuid": _text(proc["gpu_uuid"])})
        held = held.group_by(["ts", "gpu_uuid"]).aggregate([])
        held = held.append_column(IN_USE, pa.array(np.ones(held.num_rows)))
        rows = rows.join(held, keys=["ts", "gpu_uuid"], join_type="left outer")
    hosts = pc.unique(rows["host"])
    queues = pa.array([node_queues.get(str(h), UNMAPPED_QUEUE) for h in hosts.to_pylist()])
    t = pa.table(
        {
            TS: pc.divide(rows["ts"], NS),
            QUEUE: queues.take(pc.index_in(rows["host"], hosts)),
            TOTAL: pa.array(np.ones(rows.num_rows)),
            IN_USE: pc.fill_null(rows[IN_USE], 0.0) if known else pa.array(np.ones(rows.num_rows)),
        }
    )
    grouped = t.group_by([TS, QUEUE]).aggregate([(TOTAL, "sum"), (IN_USE, "sum")])
    n = grouped.num_rows
    out = pa.table(
        {
            TS: pc.cast(grouped[TS], pa.int64()),
            QUEUE: grouped[QUEUE],
            TOTAL: grouped[f"{TOTAL}_sum"],
            IN_USE: grouped[f"{IN_USE}_sum"] if known else pa.nulls(n, pa.float64()),
            PENDING: pa.nulls(n, pa.float64()),
        },
        schema=SEQUENCE_SCHEMA,
    )
    return out.sort_by([(QUEUE, "ascending"), (TS, "ascending")])


def _text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A label column as plain strings (dictionary-encoded ones decoded)."""
    if pa.types.is_dictionary(column.type):
        return pc.cast(column, pa.string())
    return column


__all__ = [
    "IngestSummary",
    "Pulled",
    "allocation_sequence",
    "drop_tables",
    "fleet_window",
    "ingest",
    "pulled",
    "report",
    "report_then",
    "source",
]
