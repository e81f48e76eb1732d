"""The frames cache: cached days give the same interval frame as raw rows, and never stale."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gpulens.clock import FakeClock
from gpulens.model import Kind, Reading
from gpulens.store import SegmentWriter, Store, maintain
from gpulens.store.frame_cache import CacheStats, cached_days, frame_files
from gpulens.store.frames import gpu_intervals, materialize_day
from gpulens.store.layout import NS_PER_DAY

NS = 1_000_000_000
MIDNIGHT = 1_764_460_800 * NS  # 2025-11-30 00:00 UTC
START = MIDNIGHT - 3 * 3600 * NS  # 21:00 the day before
END = MIDNIGHT + NS_PER_DAY + 2 * 3600 * NS  # 02:00 on the day after: 2025-11-30 is closed
DAY = date(2025, 11, 30)
KEYS = ("host", "gpu_uuid", "mig_instance", "start_ns")
Simulate = Callable[..., Any]  # the `simulated_store` fixture (tests/conftest.py)


def _build(simulate: Simulate, root: Path) -> None:
    span_s = (END - START) // NS
    simulate(root, START, span_s, gpus_per_host=2, interval_s=30.0, flush_s=3600.0, workers=2)
    # what the simulated fleet does not write, so that every frame column holds values: a MIG
    # instance (`mig_instance`, `parent_uuid`) whose process serves a job reporting its latency
    mig = {"host": "gen", "gpu_uuid": "MIG-5d1e", "gpu_index": "0", "mig_instance": "1",
           "mig_profile": "1g.10gb", "parent_uuid": "GPU-a100"}  # fmt: skip
    job = {"job_id": "serve-1"}
    readings = []
    for i, ts in enumerate(range(START, END, 30 * NS)):
        values = {"gpu_util_ratio": (i % 7) / 7, "sm_active_ratio": (i % 5) / 5,
                  "memory_used_bytes": 4e9 + i * 1e6, "ecc_dbe_volatile_total": i // 500,
                  "xid_last": 79.0 if i % 400 == 0 else 0.0}  # fmt: skip
        readings += [
            Reading(Kind.GPU, ts, mig, values),
            Reading(
                Kind.PROCESS, ts, {**mig, "pid": "4242", **job}, {"process_memory_used_bytes": 3e9}
            ),
            Reading(Kind.APP, ts, job, {"app_latency_p50_seconds": 0.01 * (1 + i % 9)}),
        ]
    with SegmentWriter(root, "mig") as writer:
        writer.append(readings)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, simulated_store: Simulate) -> Path:
    path: Path = tmp_path_factory.mktemp("framecache")
    _build(simulated_store, path)
    return path


def _same(a: pa.Table, b: pa.Table) -> None:
    assert a.column_names == b.column_names
    assert a.num_rows == b.num_rows and a.num_rows > 0
    ra, rb = a.to_pylist(), b.to_pylist()
    for x, y in zip(ra, rb, strict=True):
        assert tuple(x[k] for k in KEYS) == tuple(y[k] for k in KEYS)
        for col in a.column_names:
            u, v = x[col], y[col]
            if isinstance(u, float) and isinstance(v, float):
                assert math.isclose(u, v, rel_tol=1e-9, abs_tol=1e-9), (col, x["start_ns"], u, v)
            else:
                assert u == v, (col, x["start_ns"], u, v)


# the cache's levels read as they are (60, 3600; 900 in the maintenance test) and merged (300
# from 60, 1800 from 900, 7200 from 3600); 420 s does not divide a day, so nothing is cached
@pytest.mark.parametrize("step", [60.0, 300.0, 420.0, 1800.0, 3600.0, 7200.0])
def test_cached_equals_raw(root: Path, step: float) -> None:
    materialize_day(root, DAY)
    with Store(root) as store:
        for lo, hi in ((None, None), (START + 7 * 60 * NS, END - 11 * 60 * NS)):
            stats = CacheStats()
            cached = gpu_intervals(store, step, lo, hi, cache_stats=stats)
            raw = gpu_intervals(store, step, lo, hi, use_cache=False)
            assert stats.days_cached == (0 if step == 420.0 else 1)  # 420 s: a day isn't whole
            _same(cached, raw)
            day = cached.filter(
                (pc.field("start_ns") >= MIDNIGHT) & (pc.field("start_ns") < MIDNIGHT + NS_PER_DAY)
            )
            empty = [c for c in day.column_names if day.column(c).null_count == day.num_rows]
            assert empty == []  # every column is compared on the cached day, none only as null
        where = {"gpu_uuid": str(raw.column("gpu_uuid")[0])}
        job = next(j for j in raw.column("job_id").to_pylist() if j is not None)
        for w in (where, {"job_id": job}):
            _same(gpu_intervals(store, step, where=w), gpu_intervals(store, step, where=w,
                                                                     use_cache=False))  # fmt: skip


def test_a_new_segment_makes_the_cache_stale(tmp_path: Path, simulated_store: Simulate) -> None:
    _build(simulated_store, tmp_path)
    materialize_day(tmp_path, DAY)
    with Store(tmp_path) as store:
        stats = CacheStats()
        gpu_intervals(store, 900.0, cache_stats=stats)
        assert stats.days_cached == 1
        uuid = str(gpu_intervals(store, 900.0).column("gpu_uuid")[0])
        with SegmentWriter(tmp_path, "late") as w:  # a late reading of the cached day
            labels = {"host": "gen", "gpu_uuid": uuid, "gpu_index": "0"}
            w.append([Reading(Kind.GPU, MIDNIGHT + 3600 * NS, labels, {"gpu_util_ratio": 70.0})])
        stats = CacheStats()
        cached = gpu_intervals(store, 900.0, cache_stats=stats)
        assert (stats.days_cached, stats.days_stale) == (0, 1)
        _same(cached, gpu_intervals(store, 900.0, use_cache=False))
        assert max(v for v in cached.column("duty").to_pylist() if v is not None) > 1.0


def test_a_corrupt_cache_file_is_ignored(tmp_path: Path, simulated_store: Simulate) -> None:
    _build(simulated_store, tmp_path)
    path = materialize_day(tmp_path, DAY)
    path.write_bytes(b"not parquet at all")
    with Store(tmp_path) as store:
        stats = CacheStats()
        cached = gpu_intervals(store, 3600.0, cache_stats=stats)
        assert (stats.days_cached, stats.days_corrupt) == (0, 1)
        _same(cached, gpu_intervals(store, 3600.0, use_cache=False))


def test_maintenance_materializes_and_retention_removes(
    tmp_path: Path, simulated_store: Simulate
) -> None:
    _build(simulated_store, tmp_path)
    clock = FakeClock(END + 3600 * NS)  # 03:00 on 2025-12-01: two days are closed
    result = maintain(tmp_path, keep_days=30, compact_min_age_seconds=0, clock=clock)
    assert result.frames_materialized == 2
    assert [d for d, _ in cached_days(tmp_path)] == ["2025-11-29", "2025-11-30"]
    with Store(tmp_path) as store:
        stats = CacheStats()
        cached = gpu_intervals(store, 900.0, cache_stats=stats)
        assert stats.days_cached == 2
        _same(cached, gpu_intervals(store, 900.0, use_cache=False))
    again = maintain(tmp_path, keep_days=30, compact_min_age_seconds=0, clock=clock)
    assert again.frames_materialized == 0  # still fresh
    later = FakeClock(MIDNIGHT + 2 * NS_PER_DAY + 3600 * NS)  # keep only 2025-12-01 and 12-02
    maintain(tmp_path, keep_days=2, compact_min_age_seconds=0, clock=later)
    assert [d for d, _ in cached_days(tmp_path)] == ["2025-12-01"]  # closed now, so cached
    assert frame_files(tmp_path / "frames" / "step=60" / "date=2025-11-30") == []
