"""Maintenance: one pass compacts a partition and drops days past retention."""

from __future__ import annotations

from pathlib import Path

from gpulens.clock import FakeClock
from gpulens.model import Kind, Reading
from gpulens.store import MaintenanceThread, SegmentWriter, Store, maintain

DAY = 86_400 * 10**9
T0 = 1_764_374_400 * 10**9  # a midnight, UTC


def _write(data_dir: Path, ts: int, n: int) -> None:
    clock = FakeClock(ts)
    with SegmentWriter(data_dir, "h", clock=clock) as w:
        for i in range(n):
            w.append([Reading(Kind.GPU, ts + i, {"gpu_uuid": "GPU-1"}, {"power_watts": 100.0})])
            w.flush()


def test_maintain_compacts_and_applies_retention(tmp_path: Path) -> None:
    _write(tmp_path, T0 - 10 * DAY, 2)  # past retention
    _write(tmp_path, T0 + 3600 * 10**9, 5)  # today: five small segments
    before = sorted(p.name for p in (tmp_path / "gpu").rglob("*.parquet"))
    assert len(before) == 7
    result = maintain(
        tmp_path, keep_days=7, compact_min_age_seconds=0, clock=FakeClock(T0 + 2 * 3600 * 10**9)
    )
    assert result.partitions_deleted >= 1
    assert result.compaction.files_merged == 5
    with Store(tmp_path) as store:
        rows = store.query("SELECT count(*) AS n, sum(power_watts) AS w FROM gpu").to_pylist()[0]
    assert rows == {"n": 5, "w": 500.0}


def test_a_failing_pass_is_counted_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "store"
    blocker.write_text("not a directory")
    janitor = MaintenanceThread(blocker, every_seconds=3600, keep_days=7, compact_min_age_seconds=0)
    janitor.run_once()
    assert janitor.errors == 1 and janitor.passes == 0
    assert janitor.last_error and "Not a directory" in janitor.last_error
