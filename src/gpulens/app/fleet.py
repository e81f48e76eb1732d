"""`gpulens fleet`: the cluster summary from scheduler sources.

Every source becomes the cluster sequence of `gpulens.cluster_schema` (queue × step: total,
in use, pending GPUs): a sequence CSV directly, a job log or Slurm accounting (sacct) through
`analyze.cluster.timeline`, a squeue or Kubernetes snapshot as one step. The sequences are
analysed together (`analyze.cluster.queues`), node tables give fragmentation, and the fleet
rules turn both into findings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from gpulens.analyze.cluster.fragmentation import QueueFragmentation, fragmentation, usable
from gpulens.analyze.cluster.grid import Grid, to_grid
from gpulens.analyze.cluster.queues import ClusterSummary, summarise
from gpulens.analyze.cluster.quotas import QuotaReport, quota_report
from gpulens.analyze.cluster.snapshot import gpus_by, snapshot_sequence
from gpulens.analyze.cluster.timeline import jobs_to_sequence
from gpulens.cluster_schema import (
    GPUS,
    IN_USE,
    JOB_SCHEMA,
    NODE,
    NODE_SCHEMA,
    NODE_STATE,
    PENDING,
    QUEUE,
    QUEUES,
    SEQUENCE_SCHEMA,
    TEAM,
    TOTAL,
    TS,
    USED,
    USER,
)
from gpulens.collect.scheduler.joblog import job_roles, read_job_logs
from gpulens.collect.scheduler.kubernetes import KubernetesState, read_kubernetes, run_kubectl
from gpulens.collect.scheduler.sequence_csv import read_sequences, sequence_roles
from gpulens.collect.scheduler.slurm import SlurmState, read_slurm, run_slurm
from gpulens.config import Config
from gpulens.errors import ConfigError
from gpulens.findings.fleet import FleetContext, run_fleet_rules
from gpulens.findings.model import Finding

if TYPE_CHECKING:  # the store's analysis is imported only when --data-dir asks for it
    from gpulens.app.fleet_usage import UsageView
    from gpulens.app.prometheus import Pulled


@dataclass(frozen=True, slots=True)
class FleetSources:
    """What `gpulens fleet` reads. `maps` apply to the CSV sources (sequence or job log);
    `header` names the columns of CSV files without a header row; `capacity` gives queue →
    GPUs where the source does not say; `now_s` is the time of snapshots that carry none."""

    sequences: Sequence[Path] = ()
    jobs: Sequence[Path] = ()
    slurm: Sequence[Path] = ()
    slurm_commands: Sequence[str] = ()
    k8s: Sequence[Path] = ()
    kubectl: bool = False
    maps: Sequence[str] = ()
    queue_from: str | None = None
    header: Sequence[str] | None = None
    capacity: Mapping[str, float] = field(default_factory=dict)
    step_s: int | None = None
    now_s: int = 0
    data_dir: bool = False  # also read the store of the configuration (`usage`)
    node_queues: Mapping[str, str] = field(default_factory=dict)
    start_ns: int | None = None
    end_ns: int | None = None
    prometheus: str | None = None  # a Prometheus URL (`fleet --prometheus`)
    now_ns: int = 0
    quotas: Sequence[Path] = ()  # quota files (`fleet --quotas`): Kueue, Volcano, KAI, TOML


@dataclass(frozen=True, slots=True)
class NodeRow:
    """A GPU node: its GPUs, those in use (None: unknown), allocation = used ÷ GPUs."""

    node: str
    state: str
    gpus: float
    used: float | None
    queues: str

    @property
    def allocation(self) -> float | None:
        return None if self.used is None else self.used / self.gpus


@dataclass(frozen=True, slots=True)
class FleetView:
    """The cluster summary (None when only the store was read), what it was read from,
    findings, the store's usage per queue, and what is unknown."""

    summary: ClusterSummary | None
    findings: list[Finding]
    fragmentation: tuple[QueueFragmentation, ...]
    held_by_user: dict[str, float]
    held_by_team: dict[str, float]
    nodes: list[NodeRow]
    sources: list[str]
    notes: list[str]
    usage: UsageView | None = None
    grid: Grid | None = None  # the queue × step matrices the summary was computed from
    quotas: QuotaReport | None = None
    #: why pending demand (in GPUs) is unknown, when it is: pending-while-idle is then
    #: unknown too (None in JSON, "unknown (why)" in text), never 0; "" when it is known
    pending_unknown: str = ""


#: what to give when no source says how many GPUs wait
PENDING_FIX = (
    "give a scheduler source with pending jobs (--jobs, --slurm squeue/sacct, --k8s) or a "
    "cluster sequence with a pending column"
)


def pending_unknown_reason(summary: ClusterSummary | None, why: Sequence[str]) -> str:
    """Why pending demand is unknown ("" when some source gave it in GPUs)."""
    if summary is None or summary.pending_known:
        return ""
    reasons = list(dict.fromkeys(why)) or ["no source gave pending demand in GPUs"]
    return f"{'; '.join(reasons)}: {PENDING_FIX}"


def parse_capacity(specs: Sequence[str]) -> dict[str, float]:
    """``QUEUE=GPUS`` pairs (comma-separated or repeated) → capacity per queue."""
    out: dict[str, float] = {}
    for spec in specs:
        for pair in (p.strip() for p in spec.split(",") if p.strip()):
            name, sep, value = pair.partition("=")
            try:
                gpus = float(value)
            except ValueError:
                gpus = -1.0
            if not sep or not name.strip() or gpus < 0:
                raise ConfigError(f"--capacity {pair!r}: expected QUEUE=GPUS, such as gpu=64")
            out[name.strip()] = gpus
    return out


def _node_capacity(nodes: pa.Table) -> dict[str, float]:
    caps: dict[str, float] = {}
    for node in nodes.select([NODE_STATE, GPUS, QUEUES]).to_pylist():
        if usable(str(node[NODE_STATE] or "")):
            for queue in str(node[QUEUES] or "").split(","):
                if queue:
                    caps[queue] = caps.get(queue, 0.0) + (node[GPUS] or 0.0)
    return caps


def run_fleet(src: FleetSources, cfg: Config | None = None) -> FleetView:
    """Read every source, build the cluster sequence, analyse it, run the fleet rules; with
    `src.data_dir`, the usage of the store of `cfg` per queue too."""
    if src.prometheus is None:
        return _run(src, cfg, None)
    if cfg is None:
        raise ConfigError("--prometheus needs the configuration (prometheus.* settings)")
    from gpulens.app.prometheus import fleet_window, pulled

    start, end, step = fleet_window(src.start_ns, src.end_ns, src.now_ns)
    with pulled(cfg, src.prometheus, start, end, src.step_s or step, keep_tables=True) as got:
        return _run(src, cfg, got)


def _run(src: FleetSources, cfg: Config | None, got: Pulled | None) -> FleetView:
    scheduler = got is not None or bool(
        src.sequences or src.jobs or src.slurm or src.slurm_commands or src.k8s or src.kubectl
    )
    if not scheduler and not src.data_dir:
        raise ConfigError(
            "gpulens fleet needs a source: --sequence FILE, --jobs FILE, --slurm FILE, "
            "--slurm-run squeue|sacct|sinfo, --k8s FILE, --kubectl, --data-dir DIR or "
            "--prometheus URL"
        )
    if src.sequences and src.jobs and src.maps:
        raise ConfigError("--map serves one CSV layout: run --sequence and --jobs separately")
    step = src.step_s or 60
    parts: list[pa.Table] = []
    described: list[str] = []
    notes: list[str] = []
    why: list[str] = []  # why pending demand may be unknown, per source
    jobs_seen: list[pa.Table] = []
    nodes_seen: list[pa.Table] = []
    if src.sequences:
        roles = sequence_roles(src.maps, src.queue_from)
        parts.append(read_sequences(src.sequences, roles, src.queue_from, src.header))
        described.append(f"cluster sequence: {len(src.sequences)} file(s)")
    if src.jobs:
        jobs = read_job_logs(src.jobs, job_roles(src.maps), src.header)
        parts.append(_timeline(jobs, step, src.capacity, "--jobs"))
        jobs_seen.append(jobs)
        described.append(f"job log: {len(src.jobs)} file(s), {jobs.num_rows} jobs")
    if src.slurm or src.slurm_commands:
        _slurm(src, step, parts, described, jobs_seen, nodes_seen)
        if not any(p.num_rows and p[PENDING].null_count < p.num_rows for p in parts):
            why.append("Slurm node lists carry no pending jobs")
    if got is not None:
        why.append(_prometheus_parts(got, src, nodes_seen, parts, described, notes))
    k8s: list[tuple[str, KubernetesState]] = []
    if src.k8s:  # one cluster: pods and nodes may come in separate files
        k8s.append((", ".join(p.name for p in src.k8s), read_kubernetes(*src.k8s)))
    if src.kubectl:
        k8s.append(("kubectl get pods,nodes", run_kubectl()))
    if k8s:
        for name, state in k8s:
            jobs_seen.append(state.jobs)
            nodes_seen.append(state.nodes)
            nodes = state.nodes if state.nodes.num_rows else None
            parts.append(snapshot_sequence(state.jobs, nodes, src.now_s))
            described.append(
                f"Kubernetes: {name}, {state.jobs.num_rows} GPU pods/workloads, "
                f"{state.nodes.num_rows} nodes"
            )
    grid = _grid([_capacity(p, src.capacity) for p in parts], src.step_s) if scheduler else None
    summary = summarise(grid) if grid is not None else None
    if src.sequences and summary is not None and not summary.pending_known:
        why.append("the cluster sequence has no pending demand (no pending column mapped)")
    unknown = [q.name for q in summary.queues if q.gpus != q.gpus] if summary else []
    if unknown:
        notes.append(
            f"total GPUs unknown for {', '.join(unknown[:8])}: allocation and idle GPUs are "
            "unknown there; pass --capacity QUEUE=GPUS (or a node list with --slurm/--k8s)"
        )
    all_jobs = pa.concat_tables(jobs_seen) if jobs_seen else JOB_SCHEMA.empty_table()
    all_nodes = pa.concat_tables(nodes_seen) if nodes_seen else NODE_SCHEMA.empty_table()
    frag = tuple(fragmentation(all_nodes, all_jobs)) if all_nodes.num_rows else ()
    used = None
    if got is not None:
        from gpulens.app.fleet_usage import usage
        from gpulens.app.prometheus import QueryOnce

        queues = {**got.prom.tables.node_queues, **_node_queues(all_nodes), **src.node_queues}
        start_ns, end_ns = round(got.prom.start_s * 1e9), round(got.prom.end_s * 1e9)
        store = QueryOnce(got.cfg.data_dir)  # the temporary store: no query's memory kept
        try:
            used = usage(got.cfg, queues, start_ns, end_ns, store)
        finally:
            store.close()
        if used is not None:
            notes.extend(used.notes)
    elif src.data_dir:
        if cfg is None:
            raise ConfigError("--data-dir needs the configuration of its store")
        from gpulens.app.fleet_usage import usage

        used = usage(cfg, {**_node_queues(all_nodes), **src.node_queues}, src.start_ns, src.end_ns)
        described.append(f"store: {cfg.data_dir}")
        if used is None:
            notes.append(f"no GPU readings in {cfg.data_dir} for this window")
        else:
            notes.extend(used.notes)
    quotas = _quotas(src, grid, used, described, notes)
    ctx = FleetContext(summary=summary, fragmentation=frag, quotas=quotas)
    findings = run_fleet_rules(ctx)
    notes.extend(f"rule {e.rule_id} failed: {e.error}: {e.message}" for e in ctx.errors)
    return FleetView(
        summary=summary,
        findings=findings,
        fragmentation=frag,
        held_by_user=gpus_by(all_jobs, USER) if all_jobs.num_rows else {},
        held_by_team=gpus_by(all_jobs, TEAM) if all_jobs.num_rows else {},
        nodes=_node_rows(all_nodes),
        sources=described,
        notes=notes,
        usage=used,
        grid=grid,
        quotas=quotas,
        pending_unknown=pending_unknown_reason(summary, why),
    )


def _quotas(
    src: FleetSources,
    grid: Grid | None,
    used: UsageView | None,
    described: list[str],
    notes: list[str],
) -> QuotaReport | None:
    """The quota report of `--quotas` files over the sequence (useful work from the GPU
    series per queue when the store or Prometheus was read)."""
    if not src.quotas:
        return None
    if grid is None:
        raise ConfigError("--quotas needs a scheduler source (--sequence, --jobs, --slurm, ...)")
    from gpulens.collect.scheduler.quotas import read_quotas

    quotas = read_quotas(src.quotas)
    useful = (
        {str(r["queue"]): float(r["useful_gpu_hours"] or 0.0) for r in used.by_queue}
        if used is not None
        else None
    )
    report = quota_report(grid, quotas, useful)
    described.append(f"quotas: {len(quotas.queues)} queues from {len(src.quotas)} file(s)")
    if report.unmatched:
        notes.append(
            f"no quota for {', '.join(report.unmatched[:8])}: starvation and monopoly are "
            "judged only for queues with one"
        )
    if useful is None:
        notes.append(
            "fairness by useful work needs the GPU series per queue (--data-dir or --prometheus)"
        )
    if report.queues and all(q.starved_gpu_hours != q.starved_gpu_hours for q in report.queues):
        notes.append(
            "no pending demand in the sources: starvation and monopoly are unknown (give a "
            "scheduler source with pending jobs: --jobs, --slurm, --k8s, or Kueue)"
        )
    return report


def _capacity(table: pa.Table, capacity: Mapping[str, float]) -> pa.Table:
    """`table` with the total GPUs of the queues in `capacity` set to it (--capacity wins)."""
    if not capacity or table.num_rows == 0:
        return table
    queues = table[QUEUE].to_pylist()
    totals = table[TOTAL].to_pylist()
    fixed = [
        capacity.get(q, t) if q is not None else t for q, t in zip(queues, totals, strict=True)
    ]
    index = table.schema.get_field_index(TOTAL)
    return table.set_column(index, TOTAL, pa.array(fixed, pa.float64()))


def _grid(parts: list[pa.Table], step_s: int | None) -> Grid:
    sequence = pa.concat_tables(parts)
    if sequence.num_rows == 0:
        raise ConfigError("the sources hold no queue with GPUs, in use or pending")
    try:
        return to_grid(sequence, step_s)
    except ValueError as exc:
        raise ConfigError(f"gpulens fleet: {exc}") from None


def _node_queues(nodes: pa.Table) -> dict[str, str]:
    """node → its queues, comma-joined, from node lists (for the store's hosts)."""
    return {
        str(n[NODE]): str(n[QUEUES]) for n in nodes.select([NODE, QUEUES]).to_pylist() if n[QUEUES]
    }


def _timeline(jobs: pa.Table, step: int, capacity: Mapping[str, float], what: str) -> pa.Table:
    try:
        return jobs_to_sequence(jobs, step, capacity)
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def _node_rows(nodes: pa.Table) -> list[NodeRow]:
    """The nodes with GPUs."""
    return [
        NodeRow(str(n[NODE]), str(n[NODE_STATE] or ""), float(n[GPUS]), n[USED], str(n[QUEUES]))
        for n in nodes.to_pylist()
        if n[GPUS]
    ]


def _slurm(
    src: FleetSources,
    step: int,
    parts: list[pa.Table],
    described: list[str],
    jobs_seen: list[pa.Table],
    nodes_seen: list[pa.Table],
) -> None:
    """Slurm files: node lists give capacity; sacct is a history, squeue one snapshot."""
    for command in src.slurm_commands:
        if command not in ("squeue", "sacct", "sinfo"):
            raise ConfigError(f"--slurm-run {command!r}: use squeue, sacct or sinfo")
    named: list[tuple[str, SlurmState]] = [(p.name, read_slurm(p)) for p in src.slurm]
    named += [(f"{c} --json", run_slurm(c)) for c in src.slurm_commands]
    states = [state for _, state in named]
    for state in states:
        nodes_seen.append(state.nodes)
    nodes = pa.concat_tables(nodes_seen) if nodes_seen else NODE_SCHEMA.empty_table()
    capacity = {**_node_capacity(nodes), **src.capacity}
    for name, state in named:
        kind = "sacct" if state.accounting else "squeue" if state.jobs.num_rows else "nodes"
        described.append(
            f"Slurm {kind} ({state.data_parser or 'unknown data_parser'}): {name}, "
            f"{state.jobs.num_rows} jobs, {state.nodes.num_rows} nodes"
        )
        if state.jobs.num_rows == 0:
            continue
        jobs_seen.append(state.jobs)
        if state.accounting:
            parts.append(_timeline(state.jobs, step, capacity, name))
        else:
            node_table = nodes if nodes.num_rows else None
            parts.append(snapshot_sequence(state.jobs, node_table, state.snapshot_s or src.now_s))
    if not any(s.jobs.num_rows for s in states) and nodes.num_rows:
        times = [s.snapshot_s for s in states if s.snapshot_s]
        parts.append(_nodes_only(nodes, max(times) if times else src.now_s))


def _nodes_only(nodes: pa.Table, ts_s: int) -> pa.Table:
    """One step from node lists alone: total and used GPUs per partition, pending unknown."""
    totals: dict[str, float] = {}
    used: dict[str, float] = {}
    for node in nodes.select([NODE_STATE, GPUS, USED, QUEUES]).to_pylist():
        if not usable(str(node[NODE_STATE] or "")) or not node[GPUS]:
            continue
        for queue in str(node[QUEUES] or "").split(","):
            if queue:
                totals[queue] = totals.get(queue, 0.0) + node[GPUS]
                used[queue] = used.get(queue, 0.0) + (node[USED] or 0.0)
    names = sorted(totals)
    return pa.table(
        {
            TS: [ts_s] * len(names),
            QUEUE: names,
            TOTAL: [totals[n] for n in names],
            IN_USE: [used[n] for n in names],
            PENDING: [None] * len(names),
        },
        schema=SEQUENCE_SCHEMA,
    )


def _prometheus_parts(
    got: Pulled,
    src: FleetSources,
    nodes_seen: list[pa.Table],
    parts: list[pa.Table],
    described: list[str],
    notes: list[str],
) -> str:
    """The Prometheus range's cluster sequence: Kueue's quotas and usage when the server has
    them, else GPUs reporting and held per queue from the GPU series themselves. Returns why
    its pending demand is unknown (neither gives pending GPUs)."""
    from gpulens.app.prometheus import allocation_sequence, drop_tables

    prom = got.prom
    described.extend(got.notes[:1])
    notes.extend(got.notes[1:])
    if prom.sequence.num_rows:
        drop_tables(prom)
        parts.append(prom.sequence)
        described.append(f"Kueue: {len(set(prom.sequence[QUEUE].to_pylist()))} ClusterQueues")
        if prom.pending_workloads:
            waiting = ", ".join(f"{q} {n:.3g}" for q, n in sorted(prom.pending_workloads.items()))
            notes.append(
                f"Kueue counts pending workloads, not GPUs (mean pending: {waiting}): "
                "pending GPU demand unknown"
            )
        return "Kueue counts pending workloads, not GPUs"
    nodes = pa.concat_tables(nodes_seen) if nodes_seen else NODE_SCHEMA.empty_table()
    queues = {**prom.tables.node_queues, **_node_queues(nodes), **src.node_queues}
    seq = allocation_sequence(prom, queues)
    drop_tables(prom)  # stored already: the analysis reads the store
    if seq.num_rows:
        parts.append(seq)
        notes.append(
            "queues from the GPU series (GPUs reporting, GPUs a job or pod held): pending "
            "demand unknown without Kueue or a scheduler source (--slurm, --k8s, --jobs)"
        )
    return "the GPU series say which GPUs are held, not how many wait"
