"""The CPU of a recording agent's flush: the segment writer as it is against the general path.

    python bench/flush_cost.py [--rounds 7] [--flushes 30] [--span 10] [--gpus 8]

An 8-GPU simulated fleet (1 s collection, with rates, as the agent records it) is ticked
ahead of time (after a minute, once its jobs run); each flush gets `--span` seconds of its
readings, as the agent's does every 10 s. Every round times `--flushes` flushes (CPU of this
process, the append left out) of the same readings both ways, one after the other:

- `writer`: `SegmentWriter.flush` as it is (tables built straight from the buffered groups,
  LZ4_RAW segments);
- `reference`: each reading group's table, concatenated per kind (`segments._concat`), split
  by UTC day, `normalize`d, then written as zstd 3 segments by `write_atomic` (fsynced,
  renamed): the general path, made here from the library's own functions.

Prints the median over rounds of the CPU ms per flush of each, their ratio, the bytes written
per flush, the readings per flush and the load average.

With `--codecs`, the segments of the last flush are encoded instead with each codec a segment
could use (zstd 3, zstd 1, lz4, which pyarrow writes as LZ4_RAW): CPU ms to encode one (in
memory, no file), its KiB, and the CPU ms to read it back with `ParquetFile.read` and with
DuckDB (`SELECT *`, to Arrow), medians of 7; for the gpu segment and all kinds together.
`--span 300 --flushes 1 --codecs` does it for 300 s flushes.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpulens.app import session
from gpulens.clock import FakeClock
from gpulens.collect.simulated import SimulatedFleet
from gpulens.model import Kind, Reading
from gpulens.pipeline.rates import RateStage
from gpulens.pipeline.scheduler import Scheduler
from gpulens.pipeline.sinks import DiscardSink
from gpulens.store.layout import (
    NS_PER_DAY,
    day_of,
    ensure_dir,
    partition_dir,
    segment_name,
    write_atomic,
)
from gpulens.store.schema import TS, normalize, ts_ns, write_options
from gpulens.store.segments import Groups, SegmentWriter, _concat, group_readings

S = 1_000_000_000
START_NS = 1_785_000_000 * S
#: the codecs `--codecs` compares: (name, zstd level)
CODECS = (("zstd", 3), ("zstd", 1), ("lz4", 3))
#: seconds ticked before the first flush (the fleet's jobs and processes are up by then)
WARMUP_S = 60


def fleet_flushes(gpus: int, span: int, flushes: int) -> list[list[Reading]]:
    """The readings of `flushes` flushes of `span` s each, from one simulated host, after
    WARMUP_S seconds of ticks."""
    clock = FakeClock(START_NS)
    fleet = SimulatedFleet(hosts=1, gpus_per_host=gpus, start_ns=START_NS)
    scheduler = Scheduler(
        session.fleet_collectors(fleet, clock), DiscardSink(), clock, rates=RateStage()
    )
    out: list[list[Reading]] = []
    for s in range(WARMUP_S + span * flushes):
        clock.set(START_NS + s * S)
        readings = scheduler.tick(START_NS + s * S).readings
        if s < WARMUP_S:
            continue
        if (s - WARMUP_S) % span == 0:
            out.append([])
        out[-1].extend(readings)
    return out


def storage_tables(groups: Groups) -> list[tuple[Kind, str, pa.Table]]:
    """(kind, day, normalized table) of `groups`, the general way."""
    by_kind: dict[Kind, list[pa.Table]] = {}
    for (kind, _, _), group in groups.items():
        by_kind.setdefault(kind, []).append(group.table())
    out: list[tuple[Kind, str, pa.Table]] = []
    for kind, tables in by_kind.items():
        merged = _concat(tables)
        days = ts_ns(merged.column(TS)) // NS_PER_DAY
        for day in np.unique(days):
            part = merged if days.min() == days.max() else merged.filter(days == day)
            out.append((kind, day_of(int(day) * NS_PER_DAY), normalize(part)))
    return out


def reference_flush(groups: Groups, data_dir: Path) -> int:
    """Write `groups` the general way, as zstd segments; returns the bytes written."""
    size = 0
    for kind, day, table in storage_tables(groups):
        directory = partition_dir(data_dir, kind, day)
        ensure_dir(directory)
        start = int(ts_ns(table.column(TS)).min())
        size += write_atomic(directory / segment_name("ref", start), table, write_options(table))
    return size


def writer_round(flushes: list[list[Reading]], data_dir: Path) -> tuple[float, int]:
    """(CPU ms per flush, bytes per flush) of `SegmentWriter.flush`."""
    writer = SegmentWriter(data_dir, "node1", clock=FakeClock(START_NS))
    cpu = 0.0
    for readings in flushes:
        writer.append(readings)
        started = time.process_time()
        writer.flush()
        cpu += time.process_time() - started
    return 1e3 * cpu / len(flushes), writer.stats().bytes_written // len(flushes)


def reference_round(flushes: list[list[Reading]], data_dir: Path) -> tuple[float, int]:
    """(CPU ms per flush, bytes per flush) of the general path."""
    cpu, size = 0.0, 0
    for readings in flushes:
        groups: Groups = {}
        group_readings(groups, readings)
        started = time.process_time()
        size += reference_flush(groups, data_dir)
        cpu += time.process_time() - started
    return 1e3 * cpu / len(flushes), size // len(flushes)


def cpu_ms(action: Callable[[], object], times: int, rounds: int = 7) -> float:
    """Median over `rounds` of the CPU ms of one `action` (averaged over `times` calls)."""
    runs = []
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(times):
            action()
        runs.append(1e3 * (time.process_time() - started) / times)
    return statistics.median(runs)


def codec_costs(readings: list[Reading], data_dir: Path, times: int) -> None:
    """Per segment codec: CPU to encode, bytes, CPU to read back (`ParquetFile.read`, DuckDB)."""
    groups: Groups = {}
    group_readings(groups, readings)
    jobs = storage_tables(groups)
    con = duckdb.connect()
    print("codec    | kind  | rows  | write ms | KiB   | ParquetFile.read ms | DuckDB ms")
    for codec, level in CODECS:
        totals = [0.0, 0.0, 0.0, 0.0]
        for kind, _, table in jobs:
            options = write_options(table, codec=codec, zstd_level=level)
            path = data_dir / f"{kind.value}-{codec}{level}.parquet"
            row = segment_costs(table, options, path, con, times)
            totals = [t + v for t, v in zip(totals, row, strict=True)]
            if kind is Kind.GPU:
                _codec_line(codec, level, "gpu", table.num_rows, row)
        rows = sum(t.num_rows for _, _, t in jobs)
        _codec_line(codec, level, "all", rows, totals)
    con.close()


def segment_costs(
    table: pa.Table,
    options: dict[str, object],
    path: Path,
    con: duckdb.DuckDBPyConnection,
    times: int,
) -> list[float]:
    """[write ms, KiB, ParquetFile.read ms, DuckDB ms] of `table` written with `options`."""
    pq.write_table(table, path, **options)
    query = f"SELECT * FROM read_parquet('{path}')"
    return [
        cpu_ms(lambda: pq.write_table(table, io.BytesIO(), **options), times),
        path.stat().st_size / 1024,
        cpu_ms(lambda: pq.ParquetFile(path).read(), times),
        cpu_ms(lambda: con.sql(query).to_arrow_table(), times),
    ]


def _codec_line(codec: str, level: int, kind: str, rows: int, row: list[float]) -> None:
    name = f"{codec} {level}" if codec == "zstd" else codec
    print(
        f"{name:<8} | {kind:<5} | {rows:>5} | {row[0]:>8.2f} | {row[1]:>5.1f} | "
        f"{row[2]:>19.2f} | {row[3]:>9.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--flushes", type=int, default=30, help="flushes timed per round")
    parser.add_argument("--span", type=int, default=10, help="seconds of readings per flush")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument(
        "--codecs", action="store_true", help="the codecs' costs on one flush's segments instead"
    )
    args = parser.parse_args()
    flushes = fleet_flushes(args.gpus, args.span, args.flushes)
    load = [os.getloadavg()[0]]
    if args.codecs:
        scratch = Path(tempfile.mkdtemp(prefix="flush-codecs-"))
        try:
            codec_costs(flushes[-1], scratch, times=max(5, 400 // args.span))
        finally:
            shutil.rmtree(scratch)
    else:
        compare(flushes, args.rounds)
    load.append(os.getloadavg()[0])
    print(f"load average (1 min) before and after: {load[0]:.2f}, {load[1]:.2f}")


def compare(flushes: list[list[Reading]], rounds: int) -> None:
    """Time both paths over `rounds` rounds; print the medians, their ratio and the bytes."""
    rows = sum(len(f) for f in flushes) / len(flushes)
    results: dict[str, list[tuple[float, int]]] = {"writer": [], "reference": []}
    for _ in range(rounds):
        for name, run in (("writer", writer_round), ("reference", reference_round)):
            scratch = Path(tempfile.mkdtemp(prefix="flush-cost-"))
            try:
                results[name].append(run(flushes, scratch))
            finally:
                shutil.rmtree(scratch)
    medians = {k: statistics.median(ms for ms, _ in v) for k, v in results.items()}
    print(f"{len(flushes)} flushes of {rows:.0f} readings x {rounds} rounds")
    for name, runs in results.items():
        each = ", ".join(f"{ms:.1f}" for ms, _ in runs)
        print(
            f"{name:>9}: {medians[name]:.1f} ms CPU per flush (median; rounds {each}), "
            f"{runs[0][1]:,} bytes per flush"
        )
    print(f"    ratio: {medians['writer'] / medians['reference']:.2f} (writer / reference)")


if __name__ == "__main__":
    main()
