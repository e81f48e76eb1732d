from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from gpulens.clock import FakeClock
from gpulens.errors import StoreError
from gpulens.model import Kind, Reading
from gpulens.store import QueryError, SegmentWriter, Store

from .helpers import DAY_NS, T0, gpu, gpu_rows


def write(data_dir: Path, readings: list[Reading]) -> list[Path]:
    with SegmentWriter(data_dir, "node1", clock=FakeClock(T0)) as w:
        w.append(readings)
        return w.flush()


def test_round_trip_values_labels_nulls_and_exact_ts(tmp_path: Path) -> None:
    readings = [
        gpu(T0 + 123, "GPU-a", sm_active_ratio=0.5, power_watts=312.25),
        Reading(Kind.GPU, T0 + 987_654_321, {"host": "node1", "gpu_uuid": "GPU-b"},
                {"sm_active_ratio": 0.25}),
    ]  # fmt: skip
    write(tmp_path, readings)
    with Store(tmp_path) as store:
        got = store.query(
            "SELECT epoch_ns(ts) AS ns, host, gpu_uuid, gpu_index, sm_active_ratio, power_watts "
            "FROM gpu ORDER BY ts"
        ).to_pylist()
    assert got == [
        {"ns": T0 + 123, "host": "node1", "gpu_uuid": "GPU-a", "gpu_index": "0",
         "sm_active_ratio": 0.5, "power_watts": 312.25},
        {"ns": T0 + 987_654_321, "host": "node1", "gpu_uuid": "GPU-b", "gpu_index": None,
         "sm_active_ratio": 0.25, "power_watts": None},
    ]  # fmt: skip


def test_every_kind_round_trips(tmp_path: Path) -> None:
    readings = [
        gpu(T0, sm_active_ratio=0.5),
        Reading(Kind.PROCESS, T0, {"pid": "42", "user": "ana"}, {"process_cpu_cores": 1.5}),
        Reading(Kind.HOST, T0, {"host": "node1"}, {"host_load1": 3.25}),
        Reading(Kind.APP, T0, {"job_id": "7"}, {"app_tokens_per_second": 1000.5}),
        Reading(Kind.EVENT, T0, {"event": "deploy", "message": "v2"}, {}),
    ]
    write(tmp_path, readings)
    with Store(tmp_path) as store:
        assert store.tables() == {k.value: 1 for k in Kind}
        assert store.query("SELECT event, message FROM event").to_pylist() == [
            {"event": "deploy", "message": "v2"}
        ]


def test_new_metric_appears_later_as_nullable_column(tmp_path: Path) -> None:
    write(tmp_path, [gpu(T0, sm_active_ratio=0.5)])
    write(tmp_path, [gpu(T0 + 1, sm_active_ratio=0.75, my_new_metric=3.0)])
    with Store(tmp_path) as store:
        rows = store.query("SELECT sm_active_ratio, my_new_metric FROM gpu ORDER BY ts")
    assert rows.to_pylist() == [
        {"sm_active_ratio": 0.5, "my_new_metric": None},
        {"sm_active_ratio": 0.75, "my_new_metric": 3.0},
    ]


def test_rows_across_midnight_go_to_two_partitions(tmp_path: Path) -> None:
    midnight = (T0 // DAY_NS + 1) * DAY_NS
    files = write(
        tmp_path, [gpu(midnight - 1, sm_active_ratio=0.1), gpu(midnight, sm_active_ratio=0.2)]
    )
    assert sorted(f.parent.name for f in files) == ["date=2025-11-24", "date=2025-11-25"]
    with Store(tmp_path) as store:
        got = store.query("SELECT CAST(date AS VARCHAR) AS d FROM gpu ORDER BY ts").to_pylist()
    assert got == [{"d": "2025-11-24"}, {"d": "2025-11-25"}]


def test_values_are_rounded_to_resolution_and_counters_exact(tmp_path: Path) -> None:
    write(tmp_path, [gpu(T0, sm_active_ratio=0.123456, power_watts=312.456,
                         energy_joules=123_456_789.0123, unknown_thing=1.23456789)])  # fmt: skip
    with Store(tmp_path) as store:
        row = store.query("SELECT * FROM gpu").to_pylist()[0]
    assert row["sm_active_ratio"] == pytest.approx(0.1235, abs=0.25e-4)
    assert round(row["sm_active_ratio"] / 1e-4) == 1235
    assert row["power_watts"] == pytest.approx(312.46, abs=0.0025)
    assert row["energy_joules"] == 123_456_789.012
    assert row["unknown_thing"] == 1.23456789


def test_ts_is_timestamp_ns_and_hourly_truncation_works(tmp_path: Path) -> None:
    write(tmp_path, gpu_rows(10))
    with Store(tmp_path) as store:
        described = store.query("DESCRIBE gpu").to_pylist()
        types = {row["column_name"]: row["column_type"] for row in described}
        hourly = store.query(
            "SELECT gpu_uuid, date_trunc('hour', ts) AS h, avg(sm_active_ratio) AS sm "
            "FROM gpu GROUP BY 1, 2 ORDER BY 1"
        )
    assert types["ts"] == "TIMESTAMP_NS"
    assert hourly.num_rows == 4


def test_empty_store_is_queryable(tmp_path: Path) -> None:
    with Store(tmp_path / "nothing-yet") as store:
        assert store.tables() == {k.value: 0 for k in Kind}
        got = store.query("SELECT gpu_uuid, avg(sm_active_ratio) AS a FROM gpu GROUP BY 1")
        assert got.num_rows == 0
        assert store.query("SELECT pid, user FROM process").num_rows == 0


def test_bad_sql_is_one_clear_line(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        with pytest.raises(QueryError, match=r"SQL error: .*in query: SELEC") as info:
            store.query("SELEC 1")
        assert "\n" not in str(info.value)
        with pytest.raises(QueryError, match="no_such_column"):
            store.query("SELECT no_such_column FROM gpu")


def test_query_params(tmp_path: Path) -> None:
    write(tmp_path, gpu_rows(3))
    with Store(tmp_path) as store:
        got = store.query("SELECT count(*) AS n FROM gpu WHERE gpu_uuid = ?", ["GPU-1"])
    assert got.column("n").to_pylist() == [3]


def test_corrupt_file_names_the_file_and_what_to_do(tmp_path: Path) -> None:
    files = write(tmp_path, gpu_rows(5))
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 2])
    with Store(tmp_path) as store, pytest.raises(StoreError) as info:
        store.query("SELECT count(*) FROM gpu")
    assert str(files[0]) in str(info.value)
    assert "move it aside" in str(info.value)


def test_append_table_columnar(tmp_path: Path) -> None:
    table = pa.table({
        "ts": pa.array([T0, T0 + 1], pa.int64()),
        "gpu_uuid": ["GPU-a", "GPU-b"],
        "gpu_index": pa.array([0, 1]),  # a label key given as a number becomes a string
        "sm_active_ratio": [0.5, None],
    })  # fmt: skip
    with SegmentWriter(tmp_path, "imp", clock=FakeClock(T0)) as w:
        w.append_table(Kind.GPU, table)
    with Store(tmp_path) as store:
        got = store.query("SELECT gpu_uuid, gpu_index, sm_active_ratio FROM gpu ORDER BY ts")
    assert got.to_pylist() == [
        {"gpu_uuid": "GPU-a", "gpu_index": "0", "sm_active_ratio": 0.5},
        {"gpu_uuid": "GPU-b", "gpu_index": "1", "sm_active_ratio": None},
    ]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (pa.table({"x": [1.0]}), "needs a 'ts' column"),
        (pa.table({"ts": [T0], "date": ["x"]}), "'date' is reserved"),
        (pa.table({"ts": [T0], "blob": pa.array([b"x"])}), "'blob' has type binary"),
    ],
)
def test_append_table_rejects_what_it_cannot_store(
    tmp_path: Path, table: pa.Table, message: str
) -> None:
    w = SegmentWriter(tmp_path, "imp", clock=FakeClock(T0))
    with pytest.raises(StoreError, match=message):
        w.append_table(Kind.GPU, table)


def test_flush_due_and_stats(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    w = SegmentWriter(tmp_path, "node1", flush_seconds=10, clock=clock)
    assert not w.flush_due(clock.now_ns())
    w.append(gpu_rows(2))
    assert not w.flush_due(clock.now_ns() + 9 * 10**9)
    assert w.flush_due(clock.now_ns() + 10 * 10**9)
    files = w.flush()
    stats = w.stats()
    assert stats.rows_written == 8
    assert stats.segments_written == len(files) == 1
    assert stats.bytes_written == files[0].stat().st_size
    assert stats.buffered_rows == 0
    w.close()
    with pytest.raises(StoreError, match="closed"):
        w.append(gpu_rows(1))
