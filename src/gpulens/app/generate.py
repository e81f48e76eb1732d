"""Generates a span of simulated fleet time as fast as the machine allows, on several cores.

The simulated fleet's value at time t depends only on (seed, t), so a span can be cut into
time shards that worker processes run side by side, each through the real path (NVML
collector over the simulated binding → rates → segment writer). Each shard first runs a few
discarded priming ticks, so GPM sample pairs, counter rates and per-process utilisation at its
first tick are what an uninterrupted run would have produced: the shards equal one long run.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
from collections.abc import Callable
from dataclasses import dataclass
from queue import Empty
from typing import Any

from gpulens.app import session
from gpulens.clock import PacedClock
from gpulens.config import Config
from gpulens.errors import CollectError
from gpulens.pipeline.rates import RateStage
from gpulens.pipeline.scheduler import Scheduler
from gpulens.store import SegmentWriter, WriterStats
from gpulens.units import s_to_ns

PROGRESS_EVERY_TICKS = 300
# Priming ticks before a shard: enough for every piece of tick-to-tick state to match an
# uninterrupted run (GPM sample pairs and counters need one; per-process utilisation windows
# reach back over ticks that returned no sample, which the simulation caps at ten).
PRIME_TICKS = 10


@dataclass(frozen=True, slots=True)
class Shard:
    """One worker's share: simulated time [start_ns, end_ns) of the fleet that starts at
    `fleet_start_ns`."""

    config: Config
    fleet_start_ns: int
    start_ns: int
    end_ns: int


@dataclass
class GenerateResult:
    """What a generation wrote, summed over shards."""

    ticks: int = 0
    readings: int = 0
    rows_written: int = 0
    bytes_written: int = 0
    segments_written: int = 0


def shards(cfg: Config, fleet_start_ns: int, end_ns: int, workers: int) -> list[Shard]:
    """Cut [fleet_start_ns, end_ns) into `workers` shards on the tick grid."""
    interval = s_to_ns(cfg.get("collect.interval_seconds"))
    ticks = max(0, -(-(end_ns - fleet_start_ns) // interval))
    per = -(-ticks // max(1, workers))
    out = []
    for i in range(max(1, workers)):
        a = fleet_start_ns + i * per * interval
        b = min(end_ns, a + per * interval)
        if a < b:
            out.append(Shard(cfg, fleet_start_ns, a, b))
    return out


def run_shard(shard: Shard, progress: Any = None) -> tuple[int, int, WriterStats]:
    """Run one shard in this process; returns (ticks, readings, the writer's stats)."""
    cfg = shard.config
    interval_s = cfg.get("collect.interval_seconds")
    interval = s_to_ns(interval_s)
    fleet = session.simulated_fleet(cfg, shard.fleet_start_ns)
    prime_from = max(shard.fleet_start_ns, shard.start_ns - PRIME_TICKS * interval)
    clock = PacedClock(start_ns=prime_from, speed=math.inf)
    collectors = session.fleet_collectors(fleet, clock)
    writer = SegmentWriter(
        cfg.data_dir, cfg.host, flush_seconds=cfg.get("store.flush_seconds"), clock=clock
    )
    scheduler = Scheduler(collectors, writer, clock, interval_s=interval_s, rates=RateStage())
    counts = [0, 0]

    def on_tick(tick: Any) -> None:
        counts[0] += 1
        counts[1] += len(tick.readings)
        if progress is not None and counts[0] % PROGRESS_EVERY_TICKS == 0:
            progress.put(PROGRESS_EVERY_TICKS)

    try:
        for prime_at in range(prime_from, shard.start_ns, interval):
            clock.sleep_until(prime_at)
            scheduler.prime(prime_at)
        clock.sleep_until(shard.start_ns)
        scheduler.run(duration_s=(shard.end_ns - shard.start_ns) / 1e9, on_tick=on_tick)
    finally:
        writer.close()
        for c in collectors:
            c.close()
        scheduler.close()
    if progress is not None:
        progress.put(counts[0] % PROGRESS_EVERY_TICKS)
    return counts[0], counts[1], writer.stats()


def _worker(shard: Shard, progress: Any, results: Any) -> None:
    try:
        results.put(("ok", run_shard(shard, progress)))
    except BaseException as exc:  # reported to the parent, which raises it as one error
        results.put(("error", f"{type(exc).__name__}: {exc}"))


def generate(
    cfg: Config,
    fleet_start_ns: int,
    end_ns: int,
    workers: int | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> GenerateResult:
    """Generate [fleet_start_ns, end_ns) of the simulated fleet into the store, in parallel."""
    n = workers if workers is not None else min(2, os.cpu_count() or 1)
    parts = shards(cfg, fleet_start_ns, end_ns, n)
    result = GenerateResult()
    if len(parts) == 1:
        outcomes = [run_shard(parts[0])]
        if on_progress is not None:
            on_progress(outcomes[0][0])
    else:
        ctx = mp.get_context("spawn")
        progress, results = ctx.Queue(), ctx.Queue()
        procs = [ctx.Process(target=_worker, args=(p, progress, results)) for p in parts]
        for p in procs:
            p.start()
        outcomes = []
        errors: list[str] = []
        while len(outcomes) + len(errors) < len(procs):
            try:
                status, payload = results.get(timeout=0.1)
            except Empty:
                if not any(p.is_alive() for p in procs) and results.empty():
                    errors.append("a worker process died without a result")
                    break
            else:
                if status == "ok":
                    outcomes.append(payload)
                else:
                    errors.append(payload)
            _drain(progress, on_progress)
        for p in procs:
            p.join()
        _drain(progress, on_progress)
        if errors:
            raise CollectError(f"simulated generation failed: {errors[0]}")
    for ticks, readings, stats in outcomes:
        result.ticks += ticks
        result.readings += readings
        result.rows_written += stats.rows_written
        result.bytes_written += stats.bytes_written
        result.segments_written += stats.segments_written
    return result


def _drain(progress: Any, on_progress: Callable[[int], None] | None) -> None:
    while True:
        try:
            n = progress.get_nowait()
        except Empty:
            return
        if on_progress is not None:
            on_progress(n)
