"""The contract every store implementation passes: write readings of every kind, read them
back; an empty store answers; a reader works while a writer writes; the segments of a
multi-segment commit appear together at its commit, and never after an abort.

Add a backend by appending a `Backend` to BACKENDS.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pytest

from gpulens.clock import FakeClock
from gpulens.model import Kind, Reading
from gpulens.store import Commit, SegmentWriter, Store

T0 = 1_764_000_000 * 1_000_000_000


class Writer(Protocol):
    def append(self, readings: Iterable[Reading]) -> None: ...
    def flush(self) -> object: ...
    def close(self) -> object: ...


class Committer(Protocol):
    def commit(self) -> object: ...
    def abort(self) -> None: ...


class Reader(Protocol):
    def query(self, sql: str) -> pa.Table: ...
    def tables(self) -> dict[str, int]: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class Backend:
    name: str
    writer: Callable[[Path], Writer]
    reader: Callable[[Path], Reader]
    commit: Callable[[Path], Committer]
    writer_in: Callable[[Path, Committer], Writer]


BACKENDS = [
    Backend(
        "parquet-segments",
        lambda d: SegmentWriter(d, "contract", flush_seconds=1.0, clock=FakeClock(T0)),
        lambda d: Store(d),
        lambda d: Commit(d),
        lambda d, c: SegmentWriter(d, "contract", commit=c),  # type: ignore[arg-type]
    ),
]


@pytest.fixture(params=BACKENDS, ids=lambda b: b.name)
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.param  # type: ignore[no-any-return]


def one_of_each(ts: int) -> list[Reading]:
    return [
        Reading(Kind.GPU, ts, {"host": "h", "gpu_uuid": "GPU-1"}, {"sm_active_ratio": 0.5}),
        Reading(Kind.PROCESS, ts, {"host": "h", "pid": "7"}, {"process_rss_bytes": 1024.0}),
        Reading(Kind.HOST, ts, {"host": "h"}, {"host_load1": 1.5}),
        Reading(Kind.APP, ts, {"job_id": "j"}, {"app_step_seconds": 0.25}),
        Reading(Kind.EVENT, ts, {"host": "h", "event": "xid", "message": "Xid 79"}, {}),
    ]


def test_readings_of_every_kind_round_trip(backend: Backend, tmp_path: Path) -> None:
    w = backend.writer(tmp_path)
    w.append(one_of_each(T0) + one_of_each(T0 + 1_000))
    w.close()
    r = backend.reader(tmp_path)
    try:
        assert r.tables() == {k.value: 2 for k in Kind}
        gpu = r.query("SELECT epoch_ns(ts) AS ns, sm_active_ratio FROM gpu ORDER BY ts")
        assert gpu.to_pylist() == [
            {"ns": T0, "sm_active_ratio": 0.5},
            {"ns": T0 + 1_000, "sm_active_ratio": 0.5},
        ]
        assert r.query("SELECT DISTINCT pid, process_rss_bytes FROM process").to_pylist() == [
            {"pid": "7", "process_rss_bytes": 1024.0}
        ]
        assert r.query("SELECT DISTINCT message FROM event").to_pylist() == [{"message": "Xid 79"}]
        # absent is null, never 0
        assert r.query("SELECT count(power_watts) AS n FROM gpu").to_pylist() == [{"n": 0}]
    finally:
        r.close()


def test_empty_store_answers(backend: Backend, tmp_path: Path) -> None:
    r = backend.reader(tmp_path)
    try:
        assert r.tables() == {k.value: 0 for k in Kind}
        for kind in Kind:
            assert r.query(f"SELECT ts, host FROM {kind.value}").num_rows == 0
    finally:
        r.close()


def test_reader_works_while_a_writer_writes(backend: Backend, tmp_path: Path) -> None:
    done = threading.Event()

    def write() -> None:
        w = backend.writer(tmp_path)
        for i in range(100):
            w.append(one_of_each(T0 + i * 10**9))
            w.flush()
        w.close()
        done.set()

    thread = threading.Thread(target=write)
    thread.start()
    r = backend.reader(tmp_path)
    seen: list[int] = []
    try:
        while not done.is_set() or len(seen) < 2:
            seen.append(r.tables()["gpu"])
    finally:
        thread.join()
        r.close()
    assert seen == sorted(seen)
    assert backend.reader(tmp_path).tables()["gpu"] == 100


def test_a_commit_shows_all_its_segments_at_once_or_none(backend: Backend, tmp_path: Path) -> None:
    reader = backend.reader(tmp_path)
    try:
        for outcome in ("abort", "commit"):
            commit = backend.commit(tmp_path)
            writer = backend.writer_in(tmp_path, commit)
            for day in range(3):  # several flushes, kinds and days
                writer.append(one_of_each(T0 + day * 86_400 * 10**9))
                writer.flush()
            writer.close()
            assert sum(reader.tables().values()) == 0
            if outcome == "abort":
                commit.abort()
            else:
                commit.commit()
        assert reader.tables() == {k.value: 3 for k in Kind}
    finally:
        reader.close()
