"""`gpulens report --job ID --prometheus URL`: a job's report from its scheduler record, during
or after the job.

The record (`collect.scheduler.job_lookup`: ``sacct --json``, squeue/slurmrestd JSON, or a
Kubernetes pod) gives the time range, the nodes and, where the scheduler says, the GPU indices.
The Prometheus report (`app.prometheus.report`) then reads exactly that range, at a step fine
enough for the job's length, and keeps the job's GPUs before the range is stored (`keep_job`):

1. per node, the GPUs whose index the record names (``gres_detail`` IDX); else those whose
   series carry the job's id (dcgm-exporter's ``hpc_job``, a pod label); else every GPU of the
   node, with a note when the node has more than the job's share;
2. series hosts match the job's nodes by name, or by their first DNS label
   (``gpu1.cluster.local`` is ``gpu1``);
3. over the range the job holds those GPUs (the scheduler says so): their holder becomes the
   job (job id, user, account/namespace, pod), so allocation, attribution and the findings
   are the job's even where the exporter names no job.

A job still running is reported up to now; a pending job, a job that holds no GPU and a job
none of whose nodes are in the series are each one clear error.
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from gpulens.app import prometheus
from gpulens.app.analysis import ReportView, auto_step
from gpulens.collect.prometheus import PromRange
from gpulens.collect.prometheus.tables import ReadingTables
from gpulens.collect.scheduler.job_lookup import (
    KUBECTL_COMMAND,
    SACCT_COMMAND,
    JobRecord,
    read_job,
    run_job_lookup,
)
from gpulens.config import Config
from gpulens.errors import CollectError, ConfigError
from gpulens.series_catalog import SeriesMap

NS = 1_000_000_000
#: steps a job report may use, largest first; it takes the largest giving >= MIN_STEPS
JOB_STEPS = (3600.0, 900.0, 300.0, 60.0, 30.0, 15.0)
MIN_STEPS = 20


def lookup(
    job_id: str,
    sacct: Path | None = None,
    k8s: Path | None = None,
    command: str | None = None,
) -> JobRecord | None:
    """The scheduler's record of `job_id`: from a file (`sacct`, `k8s`), a command, or, with
    none given, ``sacct`` (or ``kubectl`` for a ``namespace/pod`` id) when it is on PATH.
    None when there is no source at all (the report then scopes on the series' job label)."""
    if sacct is not None and k8s is not None:
        raise ConfigError("--sacct and --k8s both given: a job comes from one scheduler")
    path = sacct or k8s
    if path is not None:
        return read_job(path, job_id)
    if command:
        return run_job_lookup(command, job_id)
    if "/" in job_id and shutil.which("kubectl"):
        return run_job_lookup(KUBECTL_COMMAND, job_id)
    if shutil.which("sacct"):
        return run_job_lookup(SACCT_COMMAND, job_id)
    return None


def job_step(span_s: float) -> float:
    """The report's automatic step, made finer until the job spans at least MIN_STEPS."""
    top = auto_step(span_s)
    for step in JOB_STEPS:
        if step <= top and span_s / step >= MIN_STEPS:
            return step
    return JOB_STEPS[-1]


def job_window(job: JobRecord, now_s: float, step_s: float | None) -> tuple[float, float, float]:
    """[start, end) widened to whole steps, and the step; a running job ends now."""
    if job.start_s is None:
        raise CollectError(
            f"job {job.job_id} is {job.state or 'not started'} in {job.source}: it has not "
            "started, so there is nothing to report yet"
        )
    end = job.end_s if job.end_s is not None else now_s
    if end <= job.start_s:
        end = job.start_s + 1.0
    step = step_s or job_step(end - job.start_s)
    return math.floor(job.start_s / step) * step, math.ceil(end / step) * step, step


def same_host(series_host: str, node: str) -> bool:
    """A series' host is the scheduler's node by name or by its first DNS label."""
    return series_host == node or series_host.split(".", 1)[0] == node.split(".", 1)[0]


def _text(table: pa.Table, name: str) -> pa.Array:
    if name not in table.column_names:
        return pa.nulls(table.num_rows, pa.string())
    column = table[name].combine_chunks()
    return pc.cast(column, pa.string()) if pa.types.is_dictionary(column.type) else column


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def describe(job: JobRecord) -> str:
    """One line: who, where, when, from which record."""
    who = ", ".join(
        f"{k} {v}"
        for k, v in (
            ("user", job.user),
            ("account" if "/" not in job.job_id else "namespace", job.team),
            ("partition", job.partition),
            ("QoS", job.qos),
        )
        if v
    )
    when = _stamp(job.start_s) if job.start_s is not None else "not started"
    until = _stamp(job.end_s) if job.end_s is not None else "now (still running)"
    gpus = f"{job.gpus:g} GPU{'s' if job.gpus != 1 else ''}"
    return (
        f"job {job.job_id} ({job.state}{'; ' + who if who else ''}): {when} to {until} on "
        f"{', '.join(job.nodes) or 'no node'}, {gpus}, from {job.source}"
    )


def select(job: JobRecord, tables: ReadingTables) -> tuple[ReadingTables, list[str]]:
    """The tables cut to the job's GPUs, held by the job (see the module doc), and notes."""
    gpu = tables.gpu
    hosts, uuids, indices = _text(gpu, "host"), _text(gpu, "gpu_uuid"), _text(gpu, "gpu_index")
    seen = sorted(h for h in pc.unique(hosts).to_pylist() if h)
    node_of = {h: n for h in seen for n in job.nodes if same_host(h, n)}
    labelled = _labelled(job, tables.process)
    if not node_of and labelled:  # hosts named otherwise (an exporter pod's name): the label
        kept = _keep(gpu, uuids, sorted(labelled))
        note = (
            f"{len(labelled)} GPU(s) whose series carry the job's id; no series host is named "
            f"as the scheduler names its nodes ({', '.join(job.nodes)})"
        )
        return replace(tables, gpu=kept, process=_holders(job, kept)), [note]
    if not node_of:
        shown = ", ".join(seen[:8]) + (" ..." if len(seen) > 8 else "")
        raise CollectError(
            f"none of job {job.job_id}'s nodes ({', '.join(job.nodes)}) is among the hosts of "
            f"the GPU series in its time range ({shown or 'none'}), and no series carries its "
            "id: check that the exporter ran on them, or map the host label with "
            "prometheus.labels"
        )
    notes = []
    missing = [n for n in job.nodes if n not in node_of.values()]
    if missing:
        notes.append(f"no GPU series from node(s) {', '.join(missing)} of the job: not in it")
    share = job.gpus / max(len(job.nodes), 1)
    keep: list[str] = []
    for host, node in sorted(node_of.items()):
        on_host = pc.equal(hosts, host)
        pairs = set(
            zip(
                uuids.filter(on_host).to_pylist(),
                indices.filter(on_host).to_pylist(),
                strict=True,
            )
        )
        if node in job.gpu_indices and any(i is not None for _, i in pairs):
            wanted = {str(i) for i in job.gpu_indices[node]}
            chosen = {u for u, i in pairs if i in wanted}
            how = f"GPU indices {','.join(sorted(wanted, key=int))} from the scheduler"
        elif labelled & {u for u, _ in pairs}:
            chosen = labelled & {u for u, _ in pairs}
            how = "the GPUs whose series carry the job's id"
        else:
            chosen = {u for u, _ in pairs}
            how = "every GPU of the node (the record names no GPU index)"
            if share and len(chosen) > share:
                how += (
                    f": the node has {len(chosen)}, the job held {share:g}, so others' "
                    "work is included; a record with gres_detail or series with the job "
                    "label (dcgm-exporter hpc_job) tell them apart"
                )
        keep.extend(sorted(c for c in chosen if c))
        notes.append(f"{host}: {len(chosen)} GPU(s), {how}")
    kept = _keep(gpu, uuids, keep)
    return replace(tables, gpu=kept, process=_holders(job, kept)), notes


def _keep(gpu: pa.Table, uuids: pa.Array, keep: Sequence[str]) -> pa.Table:
    mask = pc.fill_null(pc.is_in(uuids, value_set=pa.array(keep, pa.string())), False)
    return gpu.filter(mask)


def _labelled(job: JobRecord, process: pa.Table) -> set[str]:
    """GPUs whose series name the job (its id as job_id, or its pod)."""
    if process.num_rows == 0:
        return set()
    ids = _text(process, "job_id")
    match = pc.fill_null(pc.equal(ids, job.job_id), False)
    if "/" in job.job_id:  # a pod: its name, in its namespace where the series say one
        pod = pc.fill_null(pc.equal(_text(process, "pod"), _name(job)), False)
        space = _text(process, "namespace")
        same = pc.fill_null(pc.or_(pc.is_null(space), pc.equal(space, job.team or "")), True)
        match = pc.or_(match, pc.and_(pod, same))
    return {u for u in _text(process, "gpu_uuid").filter(match).to_pylist() if u}


def _name(job: JobRecord) -> str:
    return job.job_id.rpartition("/")[2]


def _holders(job: JobRecord, gpu: pa.Table) -> pa.Table:
    """One holder row per kept GPU row: the job, with the GPU's memory in use."""
    n = gpu.num_rows
    labels = {"job_id": job.job_id, "user": job.user, "team": job.team}
    if "/" in job.job_id:
        labels |= {"pod": _name(job), "namespace": job.team}
    cols: dict[str, pa.Array | pa.ChunkedArray] = {
        "ts": gpu["ts"],
        "host": _text(gpu, "host"),
        "gpu_uuid": _text(gpu, "gpu_uuid"),
    }
    for key, value in labels.items():
        if value:
            cols[key] = pa.array([value] * n, pa.string())
    memory = (
        gpu["memory_used_bytes"]
        if "memory_used_bytes" in gpu.column_names
        else pa.nulls(n, pa.float64())
    )
    cols["process_memory_used_bytes"] = memory
    return pa.table(cols)


def keep_job(job: JobRecord) -> Callable[[PromRange], list[str]]:
    """The `reshape` of `app.prometheus.report` for `job`."""

    def reshape(prom: PromRange) -> list[str]:
        prom.tables, notes = select(job, prom.tables)
        if "memory_used_bytes" not in prom.tables.gpu.column_names:
            notes.append(
                "no GPU memory series: the job's GPUs cannot be attributed to it interval by "
                "interval, so allocation is unknown"
            )
        return [describe(job), *notes]

    return reshape


def host_selector(label: str, nodes: Sequence[str]) -> str:
    """A PromQL matcher for the series of `nodes` on `label`: the name, its FQDN, with a port
    (``Hostname=~"(gpu1|gpu2)([.:].*)?"``)."""
    names = "|".join(re.escape(n).replace("\\", "\\\\") for n in nodes)
    return f'{label}=~"({names})([.:].*)?"'


def narrowed(cfg: Config, job: JobRecord) -> Config | None:
    """`cfg` with the Prometheus selector narrowed to the job's nodes on the first host label
    the series map names (None when the job has no node)."""
    if not job.nodes:
        return None
    mapping = SeriesMap().with_overrides(
        labels=cfg.get("prometheus.labels"),
        series=cfg.get("prometheus.series"),
        team_label=cfg.get("prometheus.team_label"),
    )
    label = mapping.labels["host"][0]
    site = cfg.get("prometheus.selector") or ""
    selector = ",".join(p for p in (site, host_selector(label, job.nodes)) if p)
    return Config({**cfg.values, "prometheus.selector": selector}, cfg.sources)


def report(
    cfg: Config,
    url: str | None,
    job: JobRecord,
    now_ns: int,
    step_s: float | None = None,
) -> ReportView:
    """The job's report: its range and GPUs from `job`, its telemetry from Prometheus."""
    if job.gpus <= 0:
        raise CollectError(
            f"job {job.job_id} holds no GPU according to {job.source} (its TRES, gres and "
            "submit line name none): there is no GPU work to report"
        )
    start, end, step = job_window(job, now_ns / NS, step_s)

    def read(settings: Config) -> ReportView:
        return prometheus.report(
            settings,
            url,
            round(start * NS),
            round(end * NS),
            now_ns,
            scope={"job_id": job.job_id},
            step_s=step,
            reshape=keep_job(job),
        )

    narrow = narrowed(cfg, job)
    try:
        view = read(narrow) if narrow is not None else read(cfg)
    except CollectError:
        if narrow is None:
            raise
        view = read(cfg)  # the series name their host by another label: read every node
    else:
        if narrow is not None:
            view.notes.append(f"read only the job's nodes: {narrow.get('prometheus.selector')}")
    extra = {"user": job.user, "team": job.team, "partition": job.partition, "qos": job.qos}
    view.scope.update({k: v for k, v in extra.items() if v})
    view.scope["nodes"] = ",".join(job.nodes)
    view.scope["state"] = job.state
    return view
