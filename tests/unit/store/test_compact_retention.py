from __future__ import annotations

import fcntl
import importlib
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpulens.clock import FakeClock
from gpulens.errors import StoreError
from gpulens.model import Kind
from gpulens.store import SegmentWriter, Store, apply_retention, compact
from gpulens.store.compact import TIER_FILES
from gpulens.store.layout import LiveFiles, data_files, segment_name

from .helpers import DAY_NS, T0, gpu, gpu_rows

ALL = "SELECT epoch_ns(ts) AS ns, gpu_uuid, sm_active_ratio, power_watts, seq FROM gpu ORDER BY ns, gpu_uuid"  # noqa: E501


def write_segments(data_dir: Path, count: int, start: int = T0 - DAY_NS) -> None:
    """`count` segments of yesterday's data (plus one with a new metric)."""
    clock = FakeClock(start)
    w = SegmentWriter(data_dir, "node1", clock=clock)
    for i in range(count):
        w.append(gpu_rows(5, start=start + i * 10**10))
        w.flush()
    w.close()


def snapshot(data_dir: Path) -> list[dict[str, object]]:
    with Store(data_dir) as store:
        return store.query(ALL).to_pylist()  # type: ignore[no-any-return]


def test_compaction_merges_a_past_day_into_one_file_with_identical_content(tmp_path: Path) -> None:
    write_segments(tmp_path, 6)
    before = snapshot(tmp_path)
    result = compact(tmp_path, clock=FakeClock(T0), delete_grace_seconds=0)
    assert result.files_merged == 6 and result.partitions_compacted == 1
    (part,) = (tmp_path / "gpu").glob("date=*")
    files = data_files(part)
    assert [f.name[:4] for f in files] == ["cmp-"]
    assert snapshot(tmp_path) == before
    # a second run has nothing to do
    assert compact(tmp_path, clock=FakeClock(T0), delete_grace_seconds=0).files_merged == 0


def test_compaction_with_grace_keeps_inputs_hidden_then_deletes_them(tmp_path: Path) -> None:
    write_segments(tmp_path, 3)
    before = snapshot(tmp_path)
    clock = FakeClock(T0)
    compact(tmp_path, clock=clock, delete_grace_seconds=60)
    (part,) = (tmp_path / "gpu").glob("date=*")
    assert len(data_files(part)) == 4  # inputs are still there, but superseded
    assert snapshot(tmp_path) == before
    write_segments(tmp_path, 2, start=T0 - DAY_NS + 10**12)  # late segments for that day
    before = snapshot(tmp_path)
    clock.advance(61 * 10**9)
    result = compact(tmp_path, clock=clock, delete_grace_seconds=60)
    assert result.files_deleted == 3 and result.files_merged == 3  # old cmp + 2 late segments
    assert snapshot(tmp_path) == before
    clock.advance(61 * 10**9)
    compact(tmp_path, clock=clock, delete_grace_seconds=60)
    assert len(data_files(part)) == 1
    assert snapshot(tmp_path) == before


def test_today_only_old_segments_are_compacted(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    w = SegmentWriter(tmp_path, "node1", clock=clock)
    for i in range(4):
        w.append(gpu_rows(2, start=T0 + i * 600 * 10**9))
        w.flush()
    before = snapshot(tmp_path)
    clock.set(T0 + 2200 * 10**9)
    result = compact(tmp_path, clock=clock, min_age_seconds=900, delete_grace_seconds=0)
    assert result.files_merged == 3  # segments starting at 0, 600, 1200 s; not the one at 1800
    assert snapshot(tmp_path) == before


def test_compaction_merges_files_whose_column_types_differ(tmp_path: Path) -> None:
    """A metric stored as float32 in one segment and float64 in another (its values outgrew
    float32's exact range), a metric only one file has, and a segment from another writer
    whose labels are plain strings: the merged file holds every value exactly once."""
    start = T0 - DAY_NS
    clock = FakeClock(start)
    w = SegmentWriter(tmp_path, "node1", clock=clock)
    w.append(gpu_rows(3, start=start))
    w.flush()
    w.append([gpu(start + 10**10 + i, f"GPU-{i}", power_watts=1e9 + i / 4) for i in range(3)])
    w.flush()
    w.close()
    (part,) = (tmp_path / "gpu").glob("date=*")
    types = {pq.read_schema(f).field("power_watts").type for f in data_files(part)}
    assert types == {pa.float32(), pa.float64()}
    plain = pq.read_table(data_files(part)[0])
    plain = pa.table({n: plain[n].cast(pa.string()) if pa.types.is_dictionary(plain[n].type)
                      else plain[n] for n in plain.column_names})  # fmt: skip
    plain = plain.set_column(plain.schema.get_field_index("seq"), "seq", pa.array(
        [v + 1000 for v in plain["seq"].to_pylist()], pa.float64()))  # fmt: skip
    pq.write_table(plain, part / segment_name("other", start + 2 * 10**10))

    def rows() -> list[tuple[object, ...]]:
        return sorted(tuple(r.values()) for r in snapshot(tmp_path))

    before = rows()
    assert len(before) == 12 + 3 + 12
    compact(tmp_path, clock=FakeClock(T0), delete_grace_seconds=0)
    (merged,) = data_files(part)
    assert merged.name.startswith("cmp-")
    assert pq.read_schema(merged).field("power_watts").type == pa.float64()
    assert rows() == before


def _levels(data_dir: Path, today: bool = False) -> tuple[list[str], list[str], list[str]]:
    """(segments, first-level, second-level) live gpu files of the only partition (with
    `today`, of the last one)."""
    parts = sorted((data_dir / "gpu").glob("date=*"))
    assert today or len(parts) == 1
    part = parts[-1]
    live_files = LiveFiles(data_dir)
    live, _ = live_files.partition(part)
    segments = [f.name for f in live if not f.name.startswith("cmp-")]
    compacted = [f for f in live if f.name.startswith("cmp-")]
    second = [f.name for f in compacted if any(n[:4] == "cmp-" for n in live_files.replaces(f))]
    first = [f.name for f in compacted if f.name not in second]
    return segments, first, second


def test_today_first_level_files_are_merged_once_there_are_tier_files(tmp_path: Path) -> None:
    """An agent's day: a segment every 100 s, a pass every 300 s merging segments older than
    600 s. First-level files never exceed TIER_FILES, each batch of them becomes one
    second-level file that is not merged again that day, and every row stays exactly once."""
    clock = FakeClock(T0)
    w = SegmentWriter(tmp_path, "node1", clock=clock)
    seconds = []  # second-level files, in the order they appear
    for i in range(90):
        w.append(gpu_rows(1, start=T0 + i * 100 * 10**9, gpus=2))
        w.flush()
        clock.advance(100 * 10**9)
        if i % 3 == 2:
            before = snapshot(tmp_path)
            compact(tmp_path, clock=clock, min_age_seconds=600, delete_grace_seconds=0)
            assert snapshot(tmp_path) == before
            segments, first, second = _levels(tmp_path)
            assert len(first) <= TIER_FILES
            assert len(segments) <= 9  # the last 600 s, and the 300 s since the pass
            assert set(seconds) <= set(second)  # a second-level file stays as it is today
            seconds += [name for name in second if name not in seconds]
    assert len(seconds) == 2  # 30 passes: 12 first-level files merged twice
    assert len(snapshot(tmp_path)) == 90 * 2
    before = snapshot(tmp_path)
    clock.set(T0 + DAY_NS)  # the day is over: all of it becomes one file
    compact(tmp_path, clock=clock, delete_grace_seconds=0)
    (part,) = (tmp_path / "gpu").glob("date=*")
    assert [f.name[:4] for f in data_files(part)] == ["cmp-"]
    assert snapshot(tmp_path) == before


def test_defer_large_merges_today_s_segments_only(tmp_path: Path) -> None:
    """`defer_large` leaves a closed day's merge and today's first-level files' merge (each
    can hold up to a day) to a run without it, and says how many it left."""
    write_segments(tmp_path, 3)  # yesterday
    clock = FakeClock(T0)
    w = SegmentWriter(tmp_path, "node1", clock=clock)
    for i in range(TIER_FILES):
        for j in range(2):
            w.append(gpu_rows(1, start=T0 + (2 * i + j) * 10**10, gpus=1))
            w.flush()
        clock.set(T0 + (2 * i + 2) * 10**10)
        result = compact(tmp_path, clock=clock, min_age_seconds=0, delete_grace_seconds=0,
                         defer_large=True)  # fmt: skip
        assert (result.files_merged, result.deferred) == (2, 1)  # yesterday waits
    before = snapshot(tmp_path)
    _segments, first, second = _levels(tmp_path, today=True)
    assert (len(first), second) == (TIER_FILES, [])
    result = compact(tmp_path, clock=clock, min_age_seconds=0, delete_grace_seconds=0,
                     defer_large=True)  # fmt: skip
    assert (result.files_merged, result.deferred) == (0, 2)  # the tier merge waits too
    result = compact(tmp_path, clock=clock, min_age_seconds=0, delete_grace_seconds=0)
    assert (result.files_merged, result.deferred) == (3 + TIER_FILES, 0)
    assert snapshot(tmp_path) == before


STEPS = ["inputs-chosen", "before-write", "committed", "input-deleted"]


@pytest.mark.parametrize("stop_at", STEPS)
@pytest.mark.parametrize("nth", [1, 3])
def test_compaction_interrupted_at_any_step_leaves_a_consistent_store(
    tmp_path: Path, stop_at: str, nth: int
) -> None:
    write_segments(tmp_path, 5)
    before = snapshot(tmp_path)
    seen = {"n": 0}

    class Killed(Exception):
        pass

    def hook(step: str) -> None:
        if step == stop_at:
            seen["n"] += 1
            if seen["n"] == nth or stop_at != "input-deleted":
                raise Killed(step)

    with pytest.raises(Killed):
        compact(tmp_path, clock=FakeClock(T0), delete_grace_seconds=0, on_step=hook)
    assert snapshot(tmp_path) == before
    compact(tmp_path, clock=FakeClock(T0), delete_grace_seconds=0)
    assert snapshot(tmp_path) == before
    (part,) = (tmp_path / "gpu").glob("date=*")
    live, superseded = LiveFiles(tmp_path).partition(part)
    assert len(live) == 1 and superseded == []


def test_chained_compactions_never_resurrect_old_inputs(tmp_path: Path) -> None:
    write_segments(tmp_path, 3)
    before = snapshot(tmp_path)
    clock = FakeClock(T0)
    compact(tmp_path, clock=clock, delete_grace_seconds=3600)  # cmp1 over 3 segments
    write_segments(tmp_path, 1, start=T0 - DAY_NS + 10**12)
    before = snapshot(tmp_path)
    compact(tmp_path, clock=clock, delete_grace_seconds=3600)  # cmp2 over cmp1 + 1 segment
    assert snapshot(tmp_path) == before
    clock.advance(3601 * 10**9)
    compact(tmp_path, clock=clock, delete_grace_seconds=3600)  # deletes cmp1's inputs first
    assert snapshot(tmp_path) == before
    (part,) = (tmp_path / "gpu").glob("date=*")
    assert len(data_files(part)) == 1


def test_retention_deletes_old_days_never_today(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    w = SegmentWriter(tmp_path, "node1", clock=clock)
    for days_ago in range(5):
        w.append(gpu_rows(1, start=T0 - days_ago * DAY_NS))
    w.flush()
    removed = apply_retention(tmp_path, keep_days=3, clock=clock)
    assert sorted(p.name for p in removed) == ["date=2025-11-20", "date=2025-11-21"]
    with Store(tmp_path) as store:
        days = store.query("SELECT DISTINCT CAST(date AS VARCHAR) AS d FROM gpu ORDER BY d")
    assert days.column("d").to_pylist() == ["2025-11-22", "2025-11-23", "2025-11-24"]
    apply_retention(tmp_path, keep_days=1, clock=clock)
    assert snapshot(tmp_path)  # today survives
    with pytest.raises(StoreError, match="at least 1"):
        apply_retention(tmp_path, keep_days=0, clock=clock)
    assert Kind.GPU.value in {p.name for p in tmp_path.iterdir()}


def _locks(data_dir: Path) -> list[str]:
    return sorted(p.name for p in (data_dir / "gpu").glob(".compact-*.lock"))


def test_retention_removes_the_compaction_locks_of_the_days_it_deletes(tmp_path: Path) -> None:
    for days_ago in (2, 1):
        write_segments(tmp_path, 3, start=T0 - days_ago * DAY_NS)
    write_segments(tmp_path, 1, start=T0)
    compact(tmp_path, clock=FakeClock(T0), delete_grace_seconds=0)
    assert _locks(tmp_path) == [
        ".compact-date=2025-11-22.lock",
        ".compact-date=2025-11-23.lock",
        ".compact-date=2025-11-24.lock",
    ]
    removed = apply_retention(tmp_path, keep_days=2, clock=FakeClock(T0))
    assert [p.name for p in removed] == ["date=2025-11-22"]
    # the deleted day's lock is gone; the live partitions keep theirs
    assert _locks(tmp_path) == [".compact-date=2025-11-23.lock", ".compact-date=2025-11-24.lock"]
    assert compact(tmp_path, clock=FakeClock(T0), delete_grace_seconds=0).skipped_locked == 0


def test_a_stale_lock_is_removed_only_once_nobody_holds_it(tmp_path: Path) -> None:
    write_segments(tmp_path, 1, start=T0)
    stale = tmp_path / "gpu" / ".compact-date=2025-10-01.lock"  # a day deleted long ago
    stale.touch()
    fd = os.open(stale, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as another process's compaction would
        apply_retention(tmp_path, keep_days=30, clock=FakeClock(T0))
        assert stale.exists()
    finally:
        os.close(fd)
    apply_retention(tmp_path, keep_days=30, clock=FakeClock(T0))
    assert not stale.exists()


def test_a_lock_file_removed_before_its_flock_is_not_a_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_segments(tmp_path, 3)
    flock = fcntl.flock

    def removed_first(fd: int, op: int) -> None:
        for lock in (tmp_path / "gpu").glob(".compact-*.lock"):
            lock.unlink()  # as retention's sweep between compaction's open and flock
        flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", removed_first)
    result = compact(tmp_path, clock=FakeClock(T0), delete_grace_seconds=0)
    assert (result.skipped_locked, result.files_merged) == (1, 0)


def test_compaction_of_a_partition_deleted_since_listed_leaves_no_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_segments(tmp_path, 1, start=T0)
    gone = ("2025-10-01", tmp_path / "gpu" / "date=2025-10-01")  # listed, then deleted
    module = importlib.import_module("gpulens.store.compact")  # not the `compact` function
    monkeypatch.setattr(module, "partitions", lambda _d, k: [gone] if k == Kind.GPU else [])
    result = compact(tmp_path, clock=FakeClock(T0), delete_grace_seconds=0)
    assert (result.partitions_compacted, result.skipped_locked) == (0, 0)
    assert _locks(tmp_path) == []
