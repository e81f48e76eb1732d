"""A flush of reading groups alone builds its segments straight from the groups
(`segment_table`); they must be what the general path makes (each group's table, concatenated
per kind, split by UTC day, `normalize`d): same columns, types, dictionaries, row order and
values, bit for bit, and the same rejections."""

from __future__ import annotations

import io
import random
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpulens.app import session
from gpulens.catalog import METRICS, metrics_of
from gpulens.clock import FakeClock
from gpulens.collect.dcgm.parse import parse_exposition
from gpulens.collect.simulated import SimulatedFleet
from gpulens.errors import StoreError
from gpulens.model import FrozenLabels, Kind, Reading
from gpulens.pipeline.rates import RateStage
from gpulens.pipeline.scheduler import Scheduler
from gpulens.pipeline.sinks import DiscardSink
from gpulens.store import Store, compact, segments
from gpulens.store.schema import FLOAT32_MAX_STEPS, write_options
from gpulens.store.segments import SegmentWriter

from .helpers import DAY_NS, T0

S = 1_000_000_000
MIDNIGHT = (T0 // DAY_NS + 1) * DAY_NS
PAGES = "data/telemetry/cncf_k8s-ai-conformance"
N_PAGES = 4

Job = tuple[Kind, str, pa.Table]


def _writer(path: Path, readings: list[Reading]) -> SegmentWriter:
    w = SegmentWriter(path, "node1", clock=FakeClock(T0))
    w.append(readings)
    return w


def _both(tmp_path: Path, readings: list[Reading]) -> tuple[list[Job], list[Job]]:
    """(direct, general) jobs and the same rejections for `readings` in two fresh writers."""
    fast = _writer(tmp_path / "fast", readings)
    general = _writer(tmp_path / "general", readings)
    built = fast._direct_jobs()
    assert built is not None, "the direct path should apply"
    jobs, errors = built
    assert errors == general._seal()
    assert fast.stats().rejected_rows == general.stats().rejected_rows
    assert fast.buffered_rows() == 0
    return jobs, general._jobs()


def _encoded(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **write_options(table))  # type: ignore[arg-type]
    return sink.getvalue()


def _assert_same(fast: list[Job], general: list[Job]) -> None:
    assert [(k, d) for k, d, _ in fast] == [(k, d) for k, d, _ in general]
    for (kind, day, a), (_, _, b) in zip(fast, general, strict=True):
        where = f"{kind.value} {day}"
        assert a.schema.equals(b.schema, check_metadata=True), (where, a.schema, b.schema)
        assert a.equals(b), where
        assert _encoded(a) == _encoded(b), where  # the same file: -0.0, order, dictionaries


# -- varied inputs ---------------------------------------------------------------------------

LABEL_KEYS = ["host", "gpu_uuid", "gpu_index", "pid", "job_id", "user", "zone", "rack", "ünï"]
LABEL_VALUES = [
    "a",
    "B",
    "",
    "é",
    "e\u0301",
    "日本",
    "\uff5e",
    "Ω",
    "\U0001f600",
    "a\x00b",
    "10",
    "9",
]
UNKNOWN = ["custom_a", "z_custom_b", "aaa_other"]


def _metric_value(rng: random.Random, name: str) -> float:
    metric = METRICS.get(name)
    res = metric.resolution if metric is not None else 1e-3
    edge = FLOAT32_MAX_STEPS * res
    return rng.choice(
        [
            rng.uniform(-5, 5),
            rng.uniform(0, 1),
            round(rng.uniform(0, 1e3), 2),
            float("nan"),
            0.0,
            -0.0,
            edge,
            -edge,
            edge + res,
            edge - res,
            edge * 1.5,
            float(rng.randrange(2**62)),
            1e18 + rng.uniform(0, 1e6),
            rng.uniform(0, 1e-6),
        ]
    )


def _labels(rng: random.Random, keys: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for key in keys:
        if rng.random() < 0.15:
            continue  # absent
        value = rng.choice([*LABEL_VALUES, None])
        labels[key] = value  # type: ignore[assignment]  # None: a label without a value
    return labels


def _shape(rng: random.Random, kind: Kind) -> tuple[list[str], list[str]]:
    label_keys = rng.sample(LABEL_KEYS, rng.randint(0, 5))
    catalog = [m.name for m in metrics_of(kind)]
    names = rng.sample(catalog, min(len(catalog), rng.randint(0, 8)))
    names += rng.sample(UNKNOWN, rng.randint(0, 2))
    rng.shuffle(names)
    return label_keys, names


def _random_readings(seed: int) -> list[Reading]:
    rng = random.Random(seed)
    base = MIDNIGHT - 3 * S if rng.random() < 0.4 else T0
    times = [base + rng.randrange(8) * S + rng.choice([0, 0, 7]) for _ in range(6)]
    readings: list[Reading] = []
    for kind in rng.sample([Kind.GPU, Kind.PROCESS, Kind.HOST, Kind.APP], rng.randint(1, 4)):
        for _ in range(rng.randint(1, 6)):
            label_keys, names = _shape(rng, kind)
            entities = [_labels(rng, label_keys) for _ in range(rng.randint(1, 4))]
            for _ in range(rng.randint(1, 25)):
                labels = rng.choice(entities)
                values = {n: _metric_value(rng, n) for n in names}
                frozen = rng.random() < 0.5 and None not in labels.values()
                readings.append(
                    Reading(
                        kind, rng.choice(times), FrozenLabels(labels) if frozen else labels, values
                    )
                )
    rng.shuffle(readings)
    return readings


@pytest.mark.parametrize("seed", range(60))
def test_varied_groups_match_the_general_path(tmp_path: Path, seed: int) -> None:
    _assert_same(*_both(tmp_path, _random_readings(seed)))


def test_ties_on_every_label_and_ts_keep_their_order(tmp_path: Path) -> None:
    labels = {"host": "n", "gpu_uuid": "GPU-1"}
    readings = [
        Reading(Kind.GPU, T0 + (i % 2), labels, {"gpu_util_ratio": i / 100}) for i in range(40)
    ]
    readings += [Reading(Kind.GPU, T0, labels, {"power_watts": float(i)}) for i in range(5)]
    fast, general = _both(tmp_path, readings)
    _assert_same(fast, general)
    (_, _, table), *_ = fast
    assert table.column("gpu_util_ratio").to_pylist()[:3] == pytest.approx([0.0, 0.02, 0.04])


def test_one_reading(tmp_path: Path) -> None:
    one = Reading(Kind.HOST, T0, {"host": "ñ"}, {"host_load1": 1.234})
    fast, general = _both(tmp_path, [one])
    _assert_same(fast, general)
    assert fast[0][2].num_rows == 1


def test_null_labels_sort_last_and_unlabelled_groups_mix(tmp_path: Path) -> None:
    readings = [
        Reading(Kind.APP, T0 + 3, {}, {"app_step_seconds": 0.5}),
        Reading(Kind.APP, T0 + 2, {"job_id": None}, {"app_step_seconds": 0.25}),  # type: ignore[dict-item]
        Reading(Kind.APP, T0 + 1, {"job_id": "b", "extra": "x"}, {"custom_a": 1.0}),
        Reading(Kind.APP, T0, {"job_id": "a"}, {"app_step_seconds": 0.125}),
    ]
    fast, general = _both(tmp_path, readings)
    _assert_same(fast, general)
    assert fast[0][2].column("job_id").to_pylist() == ["a", "b", None, None]


def test_midnight_splits_and_each_day_chooses_its_float_width(tmp_path: Path) -> None:
    res = METRICS["gpu_util_ratio"].resolution
    wide = (FLOAT32_MAX_STEPS + 10) * res
    readings = [
        Reading(Kind.GPU, MIDNIGHT - S, {"host": "n"}, {"gpu_util_ratio": 0.5}),
        Reading(Kind.GPU, MIDNIGHT, {"host": "n"}, {"gpu_util_ratio": wide}),
        Reading(Kind.GPU, MIDNIGHT - 1, {"host": "n"}, {"gpu_util_ratio": float("nan")}),
    ]
    fast, general = _both(tmp_path, readings)
    _assert_same(fast, general)
    widths = [t.schema.field("gpu_util_ratio").type for _, _, t in fast]
    assert widths == [pa.float32(), pa.float64()]


def test_all_absent_metrics_are_dropped(tmp_path: Path) -> None:
    readings = [
        Reading(
            Kind.HOST, T0 + i, {"host": "n"}, {"host_load1": float("nan"), "host_cpu_count": 4.0}
        )
        for i in range(3)
    ]
    fast, general = _both(tmp_path, readings)
    _assert_same(fast, general)
    assert "host_load1" not in fast[0][2].column_names


def test_rejected_readings_are_counted_and_reported_as_before(tmp_path: Path) -> None:
    good = [Reading(Kind.GPU, T0 + i, {"host": "n"}, {"gpu_util_ratio": 0.5}) for i in range(3)]
    bad = [
        Reading(Kind.GPU, T0, {"host": "n"}, {"power_watts": "many"}),  # type: ignore[dict-item]
        Reading(Kind.HOST, T0, {"host": 5}, {"host_load1": 1.0}),  # type: ignore[dict-item]
        Reading(Kind.APP, T0, {"job_id": "\ud800"}, {"app_step_seconds": 1.0}),
    ]
    fast, general = _both(tmp_path, good + bad)
    _assert_same(fast, general)
    assert [k for k, _, _ in fast] == [Kind.GPU]
    w = _writer(tmp_path / "flush", good + bad)
    with pytest.raises(StoreError) as err:
        w.flush()
    for kind in ("gpu", "host", "app"):
        assert f"1 {kind} readings with values" in str(err.value)
    assert w.stats().rejected_rows == 3 and w.stats().rows_written == 3


@pytest.mark.parametrize(
    "odd",
    [
        Reading(Kind.GPU, T0, {"host": "n"}, {"pid": 5.0}),  # a metric named as a label
        Reading(Kind.GPU, T0, {"host": "n", "custom_a": "x"}, {"gpu_util_ratio": 1.0}),
        Reading(Kind.GPU, T0, {"ts": "x"}, {"gpu_util_ratio": 1.0}),
        Reading(Kind.GPU, T0, {"host": "n"}, {"date": 1.0}),
    ],
)
def test_what_normalize_reads_otherwise_takes_the_general_path(
    tmp_path: Path, odd: Reading
) -> None:
    others = [Reading(Kind.GPU, T0, {"host": "n"}, {"custom_a": 2.0})]
    w = _writer(tmp_path, [odd, *others])
    assert w._direct_jobs() is None
    assert w.buffered_rows() == 2  # nothing taken from the buffer


# -- real readings -----------------------------------------------------------------------------


def _fleet_flushes(start_ns: int, seconds: int, every: int = 10) -> list[list[Reading]]:
    clock = FakeClock(start_ns)
    fleet = SimulatedFleet(hosts=1, gpus_per_host=8, start_ns=start_ns)
    collectors = session.fleet_collectors(fleet, clock)
    scheduler = Scheduler(collectors, DiscardSink(), clock, rates=RateStage())
    flushes: list[list[Reading]] = []
    for s in range(seconds):
        clock.set(start_ns + s * S)
        if s % every == 0:
            flushes.append([])
        flushes[-1].extend(scheduler.tick(start_ns + s * S).readings)
    return flushes


@pytest.mark.parametrize("start", [T0, MIDNIGHT - 5 * S], ids=["day", "midnight"])
def test_simulated_fleet_flushes_match(tmp_path: Path, start: int) -> None:
    flushes = _fleet_flushes(start, 60)
    kinds = {r.kind for f in flushes for r in f}
    assert {Kind.GPU, Kind.PROCESS, Kind.HOST, Kind.APP} <= kinds
    for i, readings in enumerate(flushes):
        _assert_same(*_both(tmp_path / str(i), readings))


def test_simulated_fleet_300_second_flush_matches(tmp_path: Path) -> None:
    (readings,) = _fleet_flushes(T0, 300, every=300)
    _assert_same(*_both(tmp_path, readings))


def test_dcgm_exporter_pages_match(tmp_path: Path, shared: Path) -> None:
    pages = sorted((shared / PAGES).rglob("*.prom"))
    assert len(pages) == N_PAGES
    readings: list[Reading] = []
    for i, page in enumerate(pages):
        text = page.read_text(encoding="utf-8")
        for tick in range(3):
            readings += parse_exposition(text, page.name, T0 + tick * S + i).readings
    assert {r.kind for r in readings} >= {Kind.GPU, Kind.EVENT}
    _assert_same(*_both(tmp_path, readings))


def test_flush_writes_the_direct_tables_without_normalize(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readings = _fleet_flushes(MIDNIGHT - 5 * S, 10)[0]
    general = _writer(tmp_path / "general", readings)
    general._seal()
    expected = {(k.value, d): t for k, d, t in general._jobs()}

    def refuse(table: pa.Table) -> pa.Table:
        raise AssertionError("normalize called on a flush of reading groups")

    monkeypatch.setattr(segments, "normalize", refuse)
    w = _writer(tmp_path / "store", readings)
    files = w.flush()
    assert len(files) == len(expected)
    for path in files:
        kind, day = Path(path).parent.parent.name, Path(path).parent.name.split("=")[1]
        stored = pq.ParquetFile(path).read()
        assert stored.equals(expected.pop((kind, day))), (kind, day)
    assert not expected
    assert sum(pq.ParquetFile(p).metadata.num_rows for p in files) == len(readings)


def _codecs(path: Path) -> set[str]:
    rows = duckdb.sql(f"SELECT compression FROM parquet_metadata('{path}')").fetchall()
    return {codec for (codec,) in rows}


def test_segments_are_lz4_raw_and_compaction_writes_zstd(tmp_path: Path) -> None:
    flushes = _fleet_flushes(T0, 20)
    w = SegmentWriter(tmp_path, "node1", clock=FakeClock(T0))
    for readings in flushes:
        w.append(readings)
        segment = w.flush()[0]
        assert _codecs(Path(segment)) == {"LZ4_RAW"}
    with Store(tmp_path) as store:
        rows = store.query("SELECT count(*) AS n, count(DISTINCT gpu_uuid) AS g FROM gpu")
        assert rows.to_pylist() == [{"n": 20 * 8, "g": 8}]
    late = FakeClock(T0 + 3 * DAY_NS)
    compact(tmp_path, clock=late, min_age_seconds=0, delete_grace_seconds=0)
    (merged,) = (tmp_path / "gpu").rglob("*.parquet")
    assert _codecs(merged) == {"ZSTD"}
    with Store(tmp_path) as store:
        assert store.query("SELECT count(*) AS n FROM gpu").to_pylist() == [{"n": 20 * 8}]
