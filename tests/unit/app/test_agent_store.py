"""The agent's shared store connection: settings, bounded age, and a try that never waits."""

from __future__ import annotations

import threading
from pathlib import Path

from gpulens.app.agent import AgentContext
from gpulens.model import Kind, Reading
from gpulens.store import SegmentWriter, Store

T0 = 1_764_000_000 * 10**9


def store_dir(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    writer = SegmentWriter(data, "h")
    writer.append(
        [Reading(Kind.GPU, T0, {"host": "h", "gpu_uuid": "GPU-0"}, {"power_watts": 100.0})]
    )
    writer.flush()
    writer.close()
    return data


def test_the_connection_is_opened_anew_once_older_than_its_bound(tmp_path: Path) -> None:
    ctx = AgentContext(data_dir=store_dir(tmp_path), live=None, store_max_age_s=3600.0)
    first: Store = ctx.with_store(lambda s: s)
    assert ctx.with_store(lambda s: s) is first and ctx.store_opens == 1
    ctx.store_max_age_s = 0.0  # every use finds it too old
    second: Store = ctx.with_store(lambda s: s)
    assert second is not first and ctx.store_opens == 2
    assert ctx.with_store(lambda s: s.time_bounds())[1] == T0  # the new one answers
    ctx.close()


def test_the_file_cache_is_off_on_the_agents_connection(tmp_path: Path) -> None:
    ctx = AgentContext(data_dir=store_dir(tmp_path), live=None)
    got = ctx.with_store(
        lambda s: s.query(
            "SELECT value FROM duckdb_settings() WHERE name = 'enable_external_file_cache'"
        )
    ).to_pylist()
    assert got in ([], [{"value": "false"}])  # absent from a DuckDB older than the cache
    ctx.close()


def test_trying_the_store_while_it_is_busy_answers_at_once(tmp_path: Path) -> None:
    ctx = AgentContext(data_dir=store_dir(tmp_path), live=None)
    inside, release = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=ctx.with_store, args=(lambda s: (inside.set(), release.wait(30)),)
    )
    holder.start()
    assert inside.wait(30)
    assert ctx.try_with_store(lambda s: s.time_bounds()) == (False, None)
    release.set()
    holder.join(30)
    got, bounds = ctx.try_with_store(lambda s: s.time_bounds())
    assert got and bounds[1] == T0
    ctx.close()
