"""The multi-segment commit: segments over several kinds and days appear together or never,
a writer killed mid-commit leaves nothing visible, and compaction cleans up after it."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpulens.clock import FakeClock
from gpulens.errors import StoreError
from gpulens.model import Kind, Reading
from gpulens.store import Commit, SegmentWriter, Store, clean_commits, compact
from gpulens.store.layout import COMMITS_DIR, LiveFiles

from .helpers import DAY_NS, T0, gpu_rows

SQL = "SELECT epoch_ns(ts) AS t, gpu_uuid, seq, power_watts FROM gpu ORDER BY gpu_uuid, t"


def _rows(store: Store) -> dict[str, int]:
    return {k: n for k, n in store.tables().items() if n}


def _event(ts: int) -> Reading:
    return Reading(Kind.EVENT, ts, {"host": "node1", "event_type": "x"}, {})


def _write(data_dir: Path, commit: Commit, flushes: int = 3) -> None:
    """Several flushes over two days and two kinds, as a long ingest writes them."""
    writer = SegmentWriter(data_dir, "node1", commit=commit)
    for i in range(flushes):
        writer.append(gpu_rows(5, start=T0 - DAY_NS + i * 10**12))
        writer.append(gpu_rows(5, start=T0 + i * 10**12))
        writer.append([_event(T0 + i)])
        writer.flush()
    writer.close()


def test_segments_appear_together_at_commit(tmp_path: Path) -> None:
    with Store(tmp_path) as store, Commit(tmp_path) as commit:
        _write(tmp_path, commit)
        assert len(commit.files) == 9  # 3 flushes x (2 gpu days + 1 event day)
        assert all(f.exists() for f in commit.files)
        assert _rows(store) == {}
        assert not any(LiveFiles(tmp_path).live(k) for k in Kind)
        commit.commit()
        assert _rows(store) == {"gpu": 3 * 2 * 20, "event": 3}
    with pytest.raises(StoreError, match="already committed"):
        commit.add(tmp_path / "x.parquet")


def test_an_error_inside_the_block_deletes_what_was_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="bad row"), Commit(tmp_path) as commit:
        _write(tmp_path, commit)
        raise ValueError("bad row")
    assert commit.state == "aborted"
    assert not list(tmp_path.rglob("*.parquet"))
    assert not list((tmp_path / COMMITS_DIR).iterdir())  # no record, no lock left
    with Store(tmp_path) as store:
        assert _rows(store) == {}


_KILLED_WRITER = """
import sys, time
from pathlib import Path
sys.path[:0] = [{tests!r}]
from unit.store.helpers import T0, gpu_rows
from gpulens.store import Commit, SegmentWriter
data_dir = Path({data_dir!r})
commit = Commit(data_dir)
writer = SegmentWriter(data_dir, "node1", commit=commit)
writer.append(gpu_rows(5, start=T0 - 86_400 * 10**9))
writer.flush()
print("written", flush=True)
time.sleep(60)
"""


def test_a_writer_killed_before_its_commit_leaves_nothing_visible(tmp_path: Path) -> None:
    with SegmentWriter(tmp_path, "node1") as plain:  # stored before: must survive the cleanup
        plain.append(gpu_rows(2, start=T0 - DAY_NS))
    tests = str(Path(__file__).resolve().parents[2])
    code = textwrap.dedent(_KILLED_WRITER).format(tests=tests, data_dir=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "written"
    pending = list(tmp_path.rglob("txn-*.parquet"))
    assert len(pending) == 1
    assert clean_commits(tmp_path).files_deleted == 0  # its writer is alive: not abandoned
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with Store(tmp_path) as store:
        assert _rows(store) == {"gpu": 8}
    result = compact(tmp_path, clock=FakeClock(T0), delete_grace_seconds=0, min_files=99)
    assert result.files_deleted == 1
    assert not pending[0].exists()
    assert not list((tmp_path / COMMITS_DIR).iterdir())  # the dead writer's lock is gone too
    with Store(tmp_path) as store:
        assert _rows(store) == {"gpu": 8}


def test_committed_segments_are_compacted_and_their_record_retired(tmp_path: Path) -> None:
    with Commit(tmp_path) as commit:
        _write(tmp_path, commit)
        commit.commit()
    records = list((tmp_path / COMMITS_DIR).glob("*.json"))
    assert len(records) == 1
    with Store(tmp_path) as store:
        before = store.query(SQL).to_pylist()
    compact(tmp_path, clock=FakeClock(T0 + DAY_NS), delete_grace_seconds=0)
    assert not list(tmp_path.rglob("txn-*.parquet"))  # merged into cmp- files, then deleted
    assert not records[0].exists()
    with Store(tmp_path) as store:
        assert store.query(SQL).to_pylist() == before
