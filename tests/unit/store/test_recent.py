"""The in-memory window answers the frame query exactly as the store does."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from present.sim import NS, START, fleet, ticks

from gpulens.model import Kind, Reading
from gpulens.store import SegmentWriter, Store
from gpulens.store.frames import gpu_intervals
from gpulens.store.recent import RecentWindow, readings_tables


def _sorted(table: pa.Table) -> list[dict[str, object]]:
    rows = table.to_pylist()
    return sorted(rows, key=lambda r: (r["host"], r["gpu_uuid"], r["start_ns"]))


def test_window_frame_equals_store_frame(tmp_path: Path) -> None:
    sim = fleet(hosts=2, gpus_per_host=2, seed=3)
    window = RecentWindow(keep_s=600)
    with SegmentWriter(tmp_path, "node", flush_seconds=3600) as writer:
        for tick in ticks(sim, 300, 480):
            window.append(tick.ts, tick.readings)
            writer.append(tick.readings)
    start, end = START + 360 * NS, START + 480 * NS
    with Store(tmp_path) as store:
        expected = gpu_intervals(store, 60, start, end, use_cache=False)
    got = gpu_intervals(window, 60, start, end)
    assert got.num_rows == expected.num_rows == 2 * 4  # two 60 s buckets × 4 GPUs
    for a, b in zip(_sorted(got), _sorted(expected), strict=True):
        assert a.keys() == b.keys()
        for key, value in b.items():
            if isinstance(value, float):  # the store rounds each value to its resolution
                assert a[key] == pytest.approx(value, rel=1e-3, abs=2e-3), key
            else:
                assert a[key] == value, key


def test_window_forgets_what_falls_out() -> None:
    sim = fleet(hosts=1, gpus_per_host=1, seed=1)
    window = RecentWindow(keep_s=30)
    for tick in ticks(sim, 0, 100):
        window.append(tick.ts, tick.readings)
    bounds = window.query("SELECT min(ts) AS lo, max(ts) AS hi, count(*) AS n FROM gpu")
    row = bounds.to_pylist()[0]
    assert row["n"] == 30  # ticks 70..99
    assert (row["hi"] - row["lo"]).total_seconds() == 29


def test_empty_window_has_every_view() -> None:
    window = RecentWindow()
    for kind in Kind:
        assert window.query(f"SELECT count(*) AS n FROM {kind.value}").to_pylist() == [{"n": 0}]


def test_readings_tables_keep_missing_as_null() -> None:
    readings = [
        Reading(Kind.GPU, START, {"host": "a", "gpu_uuid": "g0"}, {"power_watts": 100.0}),
        Reading(Kind.GPU, START, {"host": "a", "gpu_uuid": "g1"}, {"sm_active_ratio": 0.5}),
    ]
    table = readings_tables(readings)[Kind.GPU]
    rows = sorted(table.to_pylist(), key=lambda r: r["gpu_uuid"])
    assert rows[0]["sm_active_ratio"] is None and rows[0]["power_watts"] == 100.0
    assert rows[1]["power_watts"] is None and rows[1]["sm_active_ratio"] == 0.5


def test_bad_sql_names_the_problem() -> None:
    from gpulens.store.query import QueryError

    with pytest.raises(QueryError, match="SQL error"):
        RecentWindow().query("SELECT nope FROM gpu")


def test_keep_must_be_positive() -> None:
    with pytest.raises(ValueError, match="keep_s"):
        RecentWindow(keep_s=0)
