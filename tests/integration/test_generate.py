"""Parallel simulated generation gives exactly what one uninterrupted run gives."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa

from gpulens.app.generate import generate, shards
from gpulens.config import Config, load_config
from gpulens.store import Store

START = 1_764_374_400 * 1_000_000_000
SPAN_S = 240


def _config(data_dir: Path) -> Config:
    return load_config(
        env={},
        overrides={
            "data_dir": str(data_dir),
            "host": "gen",
            "simulated.hosts": 1,
            "simulated.gpus_per_host": 4,
            "store.flush_seconds": 60.0,
        },
    )


def _table(data_dir: Path, kind: str, keys: str) -> pa.Table:
    with Store(data_dir) as store:
        return store.query(f"SELECT * EXCLUDE (date) FROM {kind} ORDER BY {keys}")


def test_shards_cover_the_span_on_the_grid(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    parts = shards(cfg, START, START + SPAN_S * 10**9, 3)
    assert parts[0].start_ns == START and parts[-1].end_ns == START + SPAN_S * 10**9
    for a, b in itertools.pairwise(parts):
        assert a.end_ns == b.start_ns and (b.start_ns - START) % 10**9 == 0


def test_two_workers_equal_one_run(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    end = START + SPAN_S * 10**9
    r1 = generate(_config(one), START, end, workers=1)
    seen: list[int] = []
    r2 = generate(_config(two), START, end, workers=2, on_progress=seen.append)
    assert r1.ticks == r2.ticks == SPAN_S
    assert sum(seen) == SPAN_S
    assert r1.readings == r2.readings
    for kind, keys in (
        ("gpu", "gpu_uuid, ts"),
        ("process", "gpu_uuid, pid, ts"),
        ("host", "host, ts"),
        ("app", "job_id, gpu_uuid, ts"),
        ("event", "ts, event, message"),
    ):
        a, b = _table(one, kind, keys), _table(two, kind, keys)
        assert a.num_rows == b.num_rows, kind
        assert a.equals(b), kind
    # The shard boundary is invisible: GPM metrics and counter rates exist at every tick.
    with Store(two) as store:
        missing = store.query(
            "SELECT count(*) AS n FROM gpu WHERE epoch_ns(ts) > $start AND "
            "(sm_active_ratio IS NULL OR energy_watts IS NULL)",
            {"start": START},
        ).column("n")[0]
    assert missing.as_py() == 0
