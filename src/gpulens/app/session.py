"""Wires configuration to collectors, the pipeline and the store for the front ends."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from gpulens.analyze.carbon import g_per_kwh
from gpulens.analyze.efficiency import Thresholds
from gpulens.analyze.inference import Objective
from gpulens.analyze.memory import MemorySettings
from gpulens.analyze.prices import Prices, parse_assignments
from gpulens.app.heap import release_memory
from gpulens.clock import Clock
from gpulens.collect.base import Collector
from gpulens.collect.host.collector import HostCollector
from gpulens.collect.nvidia_smi import NvidiaSmiCollector
from gpulens.collect.nvml.collector import NvmlCollector
from gpulens.collect.procs.attribution import ProcAttribution
from gpulens.collect.procs.identity import ProcessIdentity
from gpulens.collect.simulated import SimulatedFleet
from gpulens.config import Config
from gpulens.errors import ConfigError, SourceUnavailable, StoreError
from gpulens.findings.context import FindingThresholds
from gpulens.model import Kind, Reading
from gpulens.pipeline.rates import RateStage
from gpulens.pipeline.scheduler import Scheduler, TickResult
from gpulens.store import MaintenanceThread, SegmentWriter, Store, WriterStats, maintain
from gpulens.store.location import ObjectPath, StorePath
from gpulens.store.maintenance import CompactLarge, Materialize

log = logging.getLogger("gpulens")

#: how long a simulated fleet started live (record, agent, top) has already been running
SIMULATED_HISTORY_NS = 15 * 60 * 1_000_000_000


def simulated_fleet(cfg: Config, start_ns: int) -> SimulatedFleet:
    """The simulated fleet the `simulated.*` settings describe, starting at `start_ns`."""
    scenarios = cfg.get("simulated.scenarios") or None
    try:
        return SimulatedFleet(
            hosts=cfg.get("simulated.hosts"),
            gpus_per_host=cfg.get("simulated.gpus_per_host"),
            seed=cfg.get("simulated.seed"),
            scenarios=scenarios,
            start_ns=start_ns,
        )
    except ValueError as exc:
        raise ConfigError(f"setting 'simulated.scenarios' = {scenarios!r}: {exc}") from None


def fleet_collectors(fleet: SimulatedFleet, clock: Clock) -> list[Collector]:
    """For every simulated host: the real NVML collector over the simulated binding, plus the
    simulated host collector (host, application and event readings)."""
    collectors: list[Collector] = []
    for host in fleet.hosts:
        binding = fleet.binding(host, clock)
        collectors.append(NvmlCollector(binding, host, fleet.identity(host), name=f"nvml@{host}"))
        collectors.append(fleet.host_collector(host))
    return collectors


def attribution(cfg: Config) -> ProcAttribution:
    """PID → user, container, pod, job and engine, from the `procs.*` settings."""
    hpc = cfg.get("procs.hpc_job_mapping_dir")
    pods = cfg.get("procs.pod_labels_file")
    return ProcAttribution(
        Path(cfg.get("procs.proc_root")),
        hpc_job_mapping_dir=Path(hpc) if hpc else None,
        pod_labels_file=Path(pods) if pods else None,
    )


def nvml_collector(cfg: Config, identity: ProcessIdentity | None = None) -> NvmlCollector:
    """The NVML collector over the real driver; SourceUnavailable says what is missing."""
    from gpulens.collect.nvml.binding import NvmlLibraryMissing
    from gpulens.collect.nvml.pynvml_binding import PynvmlBinding

    try:
        binding = PynvmlBinding()
    except NvmlLibraryMissing as exc:
        raise SourceUnavailable(f"collector 'nvml': {exc}") from None
    return NvmlCollector(binding, cfg.host, identity)


class GpuPidTap:
    """Passes a GPU collector's readings through and remembers the PIDs of its processes, so
    the host collector can report host-side CPU, memory and I/O for exactly those."""

    def __init__(self, inner: Collector) -> None:
        self.inner = inner
        self.name = inner.name
        self.pids: set[int] = set()

    def collect(self, now_ns: int) -> list[Reading]:
        readings = list(self.inner.collect(now_ns))
        self.pids = {
            int(r.labels["pid"])
            for r in readings
            if r.kind is Kind.PROCESS and r.labels.get("pid", "").isdigit()
        }
        return readings

    def close(self) -> None:
        self.inner.close()


def build_collectors(cfg: Config, clock: Clock) -> list[Collector]:
    """The collectors named in `collect.collectors`, in order."""
    names = cfg.get("collect.collectors")
    collectors: list[Collector] = []
    identity = attribution(cfg) if {"nvml", "host"} & set(names) else None
    gpu_sources: list[GpuPidTap] = []
    for name in names:
        if name == "simulated":
            start = clock.now_ns() - SIMULATED_HISTORY_NS  # jobs past their warm-up already
            collectors += fleet_collectors(simulated_fleet(cfg, start), clock)
        elif name == "nvml":
            tap = GpuPidTap(nvml_collector(cfg, identity))
            gpu_sources.append(tap)
            collectors.append(tap)
        elif name == "nvidia_smi":
            tap = GpuPidTap(
                NvidiaSmiCollector(
                    cfg.host, binary=cfg.get("nvidia_smi.binary"), mode=cfg.get("nvidia_smi.mode")
                )
            )
            gpu_sources.append(tap)
            collectors.append(tap)
        elif name == "dcgm":
            urls = cfg.get("dcgm.urls")
            if not urls:
                raise ConfigError(
                    "collector 'dcgm' needs at least one dcgm-exporter URL: set dcgm.urls, "
                    'e.g. urls = ["http://127.0.0.1:9400/metrics"] under [dcgm]'
                )
            from gpulens.collect.dcgm.collector import DcgmExporterCollector  # httpx: only here

            collectors.append(
                DcgmExporterCollector(
                    urls,
                    timeout_s=cfg.get("dcgm.timeout_seconds"),
                    max_page_bytes=cfg.get("dcgm.max_page_bytes"),
                    clock=clock,
                )
            )
        elif name == "host":

            def gpu_pids(taps: list[GpuPidTap] = gpu_sources) -> set[int]:
                return set().union(*(t.pids for t in taps)) if taps else set()

            collectors.append(HostCollector(cfg.host, gpu_pids=gpu_pids, identity=identity))
    return collectors


@dataclass
class RecordResult:
    """What one recording did."""

    ticks: int = 0
    readings: int = 0
    collector_errors: dict[str, int] = field(default_factory=dict)
    store: WriterStats = field(default_factory=WriterStats)


def record(
    cfg: Config,
    collectors: Sequence[Collector],
    clock: Clock,
    duration_s: float | None,
    on_tick: Callable[[TickResult], None] | None = None,
    stop: threading.Event | None = None,
    inline: bool = False,
    maintenance: bool = False,
    on_start: Callable[[Scheduler, SegmentWriter], None] | None = None,
    warn: Callable[[str], None] | None = None,
    materialize: Materialize | None = None,
    compact_large: CompactLarge | None = None,
) -> RecordResult:
    """Run `collectors` into the store at `cfg.data_dir` for `duration_s` (None: until `stop`).

    `inline=True` runs collectors without a thread pool or timeouts: the fast path for
    simulated time, where nothing can block. `maintenance=True` compacts and applies retention
    in a background thread while recording (wall-clock time: for real recordings), writing the
    frames cache of closed days with `materialize` and merging a closed day's files and
    today's first-level files with `compact_large` (default: in this process; the agent and
    `gpulens record` hand both to child processes, app/store_child.py), and handing the
    memory a pass freed back to the system after each.
    `on_start(scheduler, writer)` is called before the first tick (the agent watches both).
    `warn` is told, in one line, when flushes start failing, at most once a minute while they
    fail, and when they work again (default: the `gpulens` logger's warnings, on stderr).
    Raises ConfigError or StoreError before the first tick when the data directory cannot be
    written.
    """
    try:
        ensure_writable(cfg.data_dir)
    except Exception:
        for c in collectors:
            c.close()
        raise
    writer = SegmentWriter(
        cfg.data_dir,
        cfg.host,
        flush_seconds=cfg.get("store.flush_seconds"),
        clock=clock,
        max_buffer_rows=cfg.get("store.max_buffered_rows"),
    )
    scheduler = Scheduler(
        collectors,
        writer,
        clock,
        interval_s=cfg.get("collect.interval_seconds"),
        timeout_s=None if inline else cfg.get("collect.timeout_seconds"),
        rates=RateStage(),
        self_stats_host=cfg.host,
        warn=warn if warn is not None else log.warning,
    )
    result = RecordResult()

    def count(tick: TickResult) -> None:
        result.ticks += 1
        result.readings += len(tick.readings)
        if on_tick is not None:
            on_tick(tick)

    if on_start is not None:
        on_start(scheduler, writer)
    janitor = None
    if maintenance:
        compact_after = cfg.get("store.compact_after_seconds")
        janitor = MaintenanceThread(
            cfg.data_dir,
            every_seconds=max(60.0, compact_after / 2),
            keep_days=cfg.get("store.retention_days"),
            compact_min_age_seconds=compact_after,
            host=cfg.host,
            materialize=materialize,
            compact_large=compact_large,
            after_pass=release_memory,
        )
        janitor.start()
    try:
        scheduler.run(duration_s=duration_s, stop=stop, on_tick=count)
    finally:
        if janitor is not None:
            janitor.stop()
        try:
            writer.close()
            result.store = writer.stats()
        finally:
            for c in collectors:
                c.close()
            scheduler.close()
    result.collector_errors = {
        name: stats.errors_total + stats.timeouts_total
        for name, stats in scheduler.stats.collectors.items()
    }
    return result


def ensure_writable(data_dir: StorePath) -> None:
    """Create `data_dir` if needed and check that a file can be written in it: ConfigError
    when it cannot be created, StoreError when it cannot be written, each naming it."""
    if isinstance(data_dir, ObjectPath):
        probe_path = data_dir / f".gpulens-write-check-{os.getpid()}-{time.time_ns()}"
        try:
            probe_path.write_bytes(b"gpulens")
            probe_path.unlink(missing_ok=True)
        except (OSError, StoreError) as exc:
            raise StoreError(
                f"the store {str(data_dir)!r} cannot be written ({exc}): check that the bucket "
                "exists, the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the "
                "store.aws_* settings) and the endpoint (AWS_ENDPOINT_URL or "
                "store.aws_endpoint_url)"
            ) from None
        return
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"the data directory {str(data_dir)!r} cannot be created ({exc.strerror or exc}): "
            "choose another with --data-dir or data_dir"
        ) from None
    try:
        with tempfile.TemporaryFile(dir=data_dir, prefix=".gpulens-write-check-") as probe:
            probe.write(b"gpulens")
            probe.flush()
    except OSError as exc:
        raise StoreError(
            f"the data directory {str(data_dir)!r} cannot be written ({exc.strerror or exc}): "
            "fix its permissions or free space on its disk, or choose another with --data-dir "
            "or data_dir"
        ) from None


def tidy_store(cfg: Config, compact_min_age_seconds: float | None = None) -> None:
    """One maintenance pass now: compaction, then retention."""
    age = cfg.get("store.compact_after_seconds")
    maintain(
        cfg.data_dir,
        keep_days=cfg.get("store.retention_days"),
        compact_min_age_seconds=age if compact_min_age_seconds is None else compact_min_age_seconds,
    )


def prices(cfg: Config) -> Prices:
    """GPU-hour and energy prices from the `cost.*` settings."""
    try:
        return Prices.from_settings(
            cfg.get("cost.gpu_hour_prices"),
            unknown_gpu_hour=cfg.get("cost.unknown_gpu_hour_price"),
            currency=cfg.get("cost.currency"),
            electricity_per_kwh=cfg.get("cost.electricity_per_kwh"),
            pue=cfg.get("cost.pue"),
        )
    except ValueError as exc:
        raise ConfigError(f"setting 'cost.gpu_hour_prices': {exc}") from None


def carbon_region(cfg: Config) -> str | float:
    """The grid intensity (gCO2e/kWh) or region name the `carbon.*` settings give."""
    intensity = cfg.get("carbon.intensity_g_per_kwh")
    if intensity is not None:
        return float(intensity)
    region = str(cfg.get("carbon.region"))
    try:
        g_per_kwh(region)
    except ValueError as exc:
        raise ConfigError(f"setting 'carbon.region' = {region!r}: {exc}") from None
    return region


def quotas(cfg: Config) -> dict[str, float] | None:
    """Quota shares per group from `fairness.quotas`, or None when none are set."""
    items = cfg.get("fairness.quotas")
    if not items:
        return None
    try:
        return dict(parse_assignments(items, what="quota"))
    except ValueError as exc:
        raise ConfigError(f"setting 'fairness.quotas': {exc}") from None


T = TypeVar("T")


def with_overrides(defaults: T, key: str, cfg: Config) -> T:
    """`defaults` (a frozen dataclass of numbers) with the "NAME=VALUE" items of setting `key`."""
    items = cfg.get(key)
    if not items:
        return defaults
    known = {f.name: f for f in fields(defaults)}  # type: ignore[arg-type]
    changes: dict[str, object] = {}
    for item in items:
        name, sep, raw = str(item).partition("=")
        name = name.strip()
        if not sep or name not in known:
            raise ConfigError(
                f"setting {key!r} item {item!r} is not NAME=VALUE with a known name; names: "
                + ", ".join(sorted(n for n, f in known.items() if f.type in ("float", "int")))
            )
        kind = known[name].type
        if kind not in ("float", "int"):
            raise ConfigError(f"setting {key!r}: {name!r} cannot be set from configuration")
        try:
            changes[name] = int(raw) if kind == "int" else float(raw)
        except ValueError:
            raise ConfigError(
                f"setting {key!r} item {item!r}: {raw.strip()!r} is not a number"
            ) from None
    return replace(defaults, **changes)  # type: ignore[type-var]


IDLE_LADDER_KEYS: tuple[tuple[str, str], ...] = (
    ("idle_info_s", "findings.idle_allocated.info_minutes"),
    ("idle_warn_s", "findings.idle_allocated.warn_minutes"),
    ("idle_critical_s", "findings.idle_allocated.act_minutes"),
)


def idle_ladder_s(cfg: Config) -> tuple[float, float, float]:
    """The configured idle ladder (info, warning, critical) in seconds; ConfigError unless it
    rises."""
    info, warn, act = (float(cfg.get(key)) * 60.0 for _name, key in IDLE_LADDER_KEYS)
    if not info <= warn <= act:
        raise ConfigError(
            f"findings.idle_allocated: info_minutes {info / 60:g}, warn_minutes {warn / 60:g} "
            f"and act_minutes {act / 60:g} must not decrease (e.g. 10, 60, 120)"
        )
    return info, warn, act


def finding_thresholds(cfg: Config) -> FindingThresholds:
    """FindingThresholds with the idle ladder of `findings.idle_allocated.*` and the overrides
    of `thresholds.findings` (which may not set the idle ladder: one setting drives it)."""
    for item in cfg.get("thresholds.findings") or []:
        name = str(item).partition("=")[0].strip()
        keys = dict(IDLE_LADDER_KEYS)
        if name in keys:
            raise ConfigError(
                f"setting 'thresholds.findings' item {item!r}: the idle ladder is set by "
                f"{keys[name]!r} (in minutes), which also drives the `gpulens rules` alert"
            )
    info, warn, act = idle_ladder_s(cfg)
    base = FindingThresholds(idle_info_s=info, idle_warn_s=warn, idle_critical_s=act)
    return with_overrides(base, "thresholds.findings", cfg)


def analysis_settings(cfg: Config) -> dict[str, Any]:
    """The threshold dataclasses for analysis and findings, with configured overrides."""
    findings = finding_thresholds(cfg)
    return {
        "states": with_overrides(Thresholds(), "thresholds.states", cfg),
        # quotas are set per `fairness.quota_by` group: judge shares by the same label
        "finding_thresholds": replace(findings, unfair_by=cfg.get("fairness.quota_by")),
        "memory": with_overrides(MemorySettings(), "thresholds.memory", cfg),
        # the coverage rule's cap (None: twice each GPU's sampling interval)
        "max_gap_s": float(cfg.get("analysis.max_gap_seconds")) or None,
        # the serving latency objective of the engine choice by load (app/inference.py)
        "objective": Objective(
            float(cfg.get("inference.objective_ms")) / 1e3,
            str(cfg.get("inference.objective_quantile")),
        ),
    }


def open_store(data_dir: StorePath) -> Store:
    """The read side of the store at `data_dir`."""
    return Store(data_dir)
