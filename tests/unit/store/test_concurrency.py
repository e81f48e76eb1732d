"""Readers never fail and never see the row count go down while writers and compaction work."""

from __future__ import annotations

import threading
from pathlib import Path

from gpulens.clock import FakeClock
from gpulens.store import SegmentWriter, Store, compact

from .helpers import T0, gpu_rows


def test_reader_during_writes_and_compaction(tmp_path: Path) -> None:
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        clock = FakeClock(T0)
        w = SegmentWriter(tmp_path, "node1", clock=clock)
        i = 0
        try:
            while not stop.is_set() and i < 300:
                w.append(gpu_rows(2, start=T0 + i * 10**10))
                w.flush()
                i += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            w.close()

    def compactor() -> None:
        try:
            while not stop.wait(0.02):
                compact(tmp_path, clock=FakeClock(T0 + 10**15), delete_grace_seconds=0,
                        min_age_seconds=0)  # fmt: skip
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=compactor)]
    for t in threads:
        t.start()
    counts = []
    try:
        with Store(tmp_path) as store:
            for _ in range(60):
                got = store.query(
                    "SELECT count(*) AS n, count(DISTINCT (gpu_uuid, ts)) AS d FROM gpu"
                )
                n, d = got.column("n")[0].as_py(), got.column("d")[0].as_py()
                assert n == d, "a row was seen twice"
                counts.append(n)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert counts == sorted(counts), "the row count went down"
    assert counts[-1] > 0
