"""Wires configuration to collectors, the pipeline and the store for the front ends."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpulens.clock import Clock
from gpulens.collect.base import Collector
from gpulens.collect.nvml.collector import NvmlCollector
from gpulens.collect.simulated import SimulatedFleet
from gpulens.config import Config
from gpulens.errors import ConfigError, SourceUnavailable
from gpulens.pipeline.rates import RateStage
from gpulens.pipeline.scheduler import Scheduler, TickResult
from gpulens.store import MaintenanceThread, SegmentWriter, Store, WriterStats, maintain


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


def nvml_collector(cfg: Config) -> Collector:
    """The NVML collector over the real driver; SourceUnavailable says what is missing."""
    from gpulens.collect.nvml.binding import NvmlLibraryMissing
    from gpulens.collect.nvml.pynvml_binding import PynvmlBinding

    try:
        binding = PynvmlBinding()
    except NvmlLibraryMissing as exc:
        raise SourceUnavailable(f"collector 'nvml': {exc}") from None
    return NvmlCollector(binding, cfg.host)


def build_collectors(cfg: Config, clock: Clock) -> list[Collector]:
    """The collectors named in `collect.collectors`, in order."""
    collectors: list[Collector] = []
    for name in cfg.get("collect.collectors"):
        if name == "simulated":
            collectors += fleet_collectors(simulated_fleet(cfg, clock.now_ns()), clock)
        elif name == "nvml":
            collectors.append(nvml_collector(cfg))
        else:
            raise SourceUnavailable(
                f"collector {name!r} is not available in this version of gpulens; "
                "use 'simulated' or 'nvml' in collect.collectors"
            )
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
) -> RecordResult:
    """Run `collectors` into the store at `cfg.data_dir` for `duration_s` (None: until `stop`).

    `inline=True` runs collectors without a thread pool or timeouts: the fast path for
    simulated time, where nothing can block. `maintenance=True` compacts and applies retention
    in a background thread while recording (wall-clock time: for real recordings).
    """
    writer = SegmentWriter(
        cfg.data_dir, cfg.host, flush_seconds=cfg.get("store.flush_seconds"), clock=clock
    )
    scheduler = Scheduler(
        collectors,
        writer,
        clock,
        interval_s=cfg.get("collect.interval_seconds"),
        timeout_s=None if inline else cfg.get("collect.timeout_seconds"),
        rates=RateStage(),
        self_stats_host=cfg.host,
    )
    result = RecordResult()

    def count(tick: TickResult) -> None:
        result.ticks += 1
        result.readings += len(tick.readings)
        if on_tick is not None:
            on_tick(tick)

    janitor = None
    if maintenance:
        compact_after = cfg.get("store.compact_after_seconds")
        janitor = MaintenanceThread(
            cfg.data_dir,
            every_seconds=max(60.0, compact_after / 2),
            keep_days=cfg.get("store.retention_days"),
            compact_min_age_seconds=compact_after,
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


def tidy_store(cfg: Config, compact_min_age_seconds: float | None = None) -> None:
    """One maintenance pass now: compaction, then retention."""
    age = cfg.get("store.compact_after_seconds")
    maintain(
        cfg.data_dir,
        keep_days=cfg.get("store.retention_days"),
        compact_min_age_seconds=age if compact_min_age_seconds is None else compact_min_age_seconds,
    )


def open_store(data_dir: Path) -> Store:
    """The read side of the store at `data_dir`."""
    return Store(data_dir)
