"""A full disk or a failing file system: clear errors, nothing stored is touched, retry works."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path
from typing import BinaryIO

import pytest

from gpulens.clock import FakeClock
from gpulens.errors import StoreError
from gpulens.store import Commit, SegmentWriter, Store

from .helpers import T0, gpu_rows


class FlakyDisk:
    """An opener whose files fail with ENOSPC after `budget` bytes while `full` is set."""

    def __init__(self, budget: int = 100) -> None:
        self.full = False
        self.budget = budget

    def __call__(self, path: Path) -> BinaryIO:
        fh = path.open("xb")
        if not self.full:
            return fh
        budget = self.budget

        class Full:
            written = 0

            def write(self, data: bytes) -> int:
                if self.written + len(data) > budget:
                    raise OSError(errno.ENOSPC, "No space left on device", str(path))
                self.written += len(data)
                return fh.write(data)

            def __getattr__(self, name: str) -> object:
                return getattr(fh, name)

            def __enter__(self) -> Full:
                return self

            def __exit__(self, *exc: object) -> None:
                fh.close()

        return Full()  # type: ignore[return-value]


def stored_bytes(data_dir: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in data_dir.rglob("*") if p.is_file()}


def test_disk_full_is_a_clear_error_and_a_later_flush_succeeds(tmp_path: Path) -> None:
    disk = FlakyDisk()
    w = SegmentWriter(tmp_path, "node1", clock=FakeClock(T0), open_file=disk)
    w.append(gpu_rows(3))
    w.flush()
    before = stored_bytes(tmp_path)
    disk.full = True
    w.append(gpu_rows(4, start=T0 + 10**11))
    with pytest.raises(StoreError) as info:
        w.flush()
    message = str(info.value)
    assert "No space left on device" in message
    assert str(tmp_path / "gpu") in message and "free disk space" in message
    assert stored_bytes(tmp_path) == before  # byte for byte; no temporary file left behind
    stats = w.stats()
    assert stats.flush_errors == 1 and stats.buffered_rows == 16
    disk.full = False
    w.append(gpu_rows(1, start=T0 + 10**12))
    w.flush()
    with Store(tmp_path) as store:
        assert store.tables()["gpu"] == 12 + 16 + 4
        dup = store.query("SELECT count(*) - count(DISTINCT (gpu_uuid, ts)) AS d FROM gpu")
        assert dup.column("d").to_pylist() == [0]
    assert w.stats().buffered_rows == 0


def test_buffer_is_capped_while_flushes_fail_dropping_the_oldest(tmp_path: Path) -> None:
    disk = FlakyDisk(budget=0)
    disk.full = True
    w = SegmentWriter(tmp_path, "node1", clock=FakeClock(T0), open_file=disk, max_buffer_rows=40)
    w.append(gpu_rows(5))  # 20 rows
    with pytest.raises(StoreError):
        w.flush()
    w.append(gpu_rows(10, start=T0 + 10**12))  # 40 more: 60 > 40, so down to 90 % of 40
    stats = w.stats()
    assert (stats.dropped_rows, stats.buffered_rows, stats.max_buffered_rows) == (24, 36, 40)
    disk.full = False
    w.flush()
    with Store(tmp_path) as store:
        got = store.query("SELECT min(epoch_ns(ts)) AS first, count(*) AS n FROM gpu").to_pylist()
    assert got == [{"first": T0 + 10**12 + 10**9 + 7, "n": 36}]  # the oldest second went too


def test_a_failed_final_flush_says_the_readings_were_not_stored(tmp_path: Path) -> None:
    disk = FlakyDisk(budget=0)
    disk.full = True
    w = SegmentWriter(tmp_path, "node1", clock=FakeClock(T0), open_file=disk)
    w.append(gpu_rows(2))
    with pytest.raises(StoreError) as info:
        w.close()  # an importer's last flush: there is no next one
    message = str(info.value)
    assert "the 8 readings still buffered were not stored" in message
    assert "next flush" not in message and "then run again" in message


def test_flushes_while_the_disk_stays_full_do_not_rebuild_the_buffer(tmp_path: Path) -> None:
    disk = FlakyDisk(budget=0)
    disk.full = True
    w = SegmentWriter(tmp_path, "node1", clock=FakeClock(T0), open_file=disk)
    for i in range(100):
        w.append(gpu_rows(1, start=T0 + i * 10**9))
        with pytest.raises(StoreError, match="stay buffered for the next flush"):
            w.flush()
    stats = w.stats()
    assert (stats.flush_errors, stats.buffered_rows, stats.dropped_rows) == (100, 400, 0)
    assert len(w._chunks) <= 64 + 1  # small tables are merged while it waits
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # no probe file left behind
    disk.full = False
    w.flush()
    with Store(tmp_path) as store:
        assert store.tables()["gpu"] == 400


def test_unwritable_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "gpu"
    blocker.write_text("not a directory")
    w = SegmentWriter(tmp_path, "node1", clock=FakeClock(T0))
    w.append(gpu_rows(1))
    with pytest.raises(StoreError, match="cannot write a gpu segment"):
        w.flush()


def test_rejected_values_are_reported_and_the_rest_is_stored(tmp_path: Path) -> None:
    from gpulens.model import Kind, Reading

    w = SegmentWriter(tmp_path, "node1", clock=FakeClock(T0))
    w.append(gpu_rows(1))
    w.append([Reading(Kind.GPU, T0, {"gpu_uuid": "x"}, {"bad": "text"})])  # type: ignore[dict-item]
    with pytest.raises(StoreError, match="rejected"):
        w.flush()
    assert w.stats().rejected_rows == 1
    with Store(tmp_path) as store:
        assert store.tables()["gpu"] == 4


def test_a_removed_data_directory_is_not_made_again(tmp_path: Path) -> None:
    """A data directory removed (or unmounted) under a writer: its flush fails and says so, the
    readings stay buffered, and the directory is not made again, empty, where the volume was;
    once it is back, the next flush stores everything."""
    data = tmp_path / "data"
    w = SegmentWriter(data, "node1", clock=FakeClock(T0))  # made by the first flush
    w.append(gpu_rows(2))
    w.flush()
    shutil.rmtree(data)
    w.append(gpu_rows(3, start=T0 + 10**11))
    with pytest.raises(StoreError, match="no longer exists"):
        w.flush()
    assert not data.exists()
    assert w.stats().buffered_rows == 12
    data.mkdir()  # the volume is back
    w.flush()
    with Store(data) as store:
        assert store.tables()["gpu"] == 12


def test_a_commit_does_not_make_a_removed_data_directory_again(tmp_path: Path) -> None:
    """The temporary store of a read abandoned at shutdown, removed under its writer."""
    data = tmp_path / "data"
    data.mkdir()
    with Commit(data) as commit:
        w = SegmentWriter(data, "node1", clock=FakeClock(T0), commit=commit)
        shutil.rmtree(data)
        w.append(gpu_rows(2))
        with pytest.raises(StoreError, match="no longer exists"):
            w.flush()
    assert not data.exists()
