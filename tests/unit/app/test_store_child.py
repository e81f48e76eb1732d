"""Store work in a child process: the findings pass gives the findings the pass in the agent
gives, the frames cache is the one written in process, and a child that fails, times out or is
stopped gives one clear error."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from gpulens.app.agent import context_from_config
from gpulens.app.store_child import (
    ChildError,
    analyse_window,
    cache_in_child,
    compact_in_child,
    findings_in_child,
    findings_of,
)
from gpulens.clock import FakeClock
from gpulens.findings.model import Finding
from gpulens.model import Kind
from gpulens.store import Store
from gpulens.store.compact import CompactionResult
from gpulens.store.frame_cache import cached_days, closed_days_to_cache
from gpulens.store.layout import LiveFiles, partitions
from gpulens.store.maintenance import MaintenanceThread, maintain

NS = 1_000_000_000
T0 = 1_767_225_600 * NS  # 2026-01-01 00:00 UTC
SPAN_S = 3600


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory, simulated_store: Callable[..., Any]) -> Any:
    return simulated_store(tmp_path_factory.mktemp("store"), T0, SPAN_S, gpus_per_host=4)


def _dumps(findings: list[dict[str, Any]]) -> str:
    return json.dumps(findings, sort_keys=True)


def test_the_child_finds_what_the_agent_finds(sim: Any) -> None:
    """The child against the agent's own pass: the settings the agent derives from its
    configuration (`context_from_config`), on the store the agent opens."""
    end = T0 + SPAN_S * NS
    ctx = context_from_config(sim.config)
    with Store(sim.data_dir) as store:
        here = findings_of(store, T0, end, ctx.prices, ctx.region, ctx.quotas, ctx.analysis)
    assert here, "the simulated hour should hold findings"
    child = findings_in_child(sim.config, T0, end, threading.Event())
    assert all(isinstance(f, Finding) for f in child)
    assert _dumps([f.to_dict() for f in child]) == _dumps([f.to_dict() for f in here])
    assert _dumps(analyse_window(sim.config, T0, end)) == _dumps([f.to_dict() for f in here])


def test_a_finding_reads_back_as_it_was_written(sim: Any) -> None:
    found = analyse_window(sim.config, T0, T0 + SPAN_S * NS)
    again = [Finding.from_dict(json.loads(json.dumps(d))).to_dict() for d in found]
    assert _dumps(again) == _dumps(found)
    with pytest.raises(KeyError):
        Finding.from_dict({"rule_id": "x"})


def test_a_damaged_store_fails_the_pass_with_the_file_named(
    sim: Any, tmp_path: Path, simulated_store: Callable[..., Any]
) -> None:
    other = simulated_store(tmp_path / "store", T0, 600, gpus_per_host=1)
    segment = next(p for p in sorted((other.data_dir / "gpu").rglob("*.parquet")))
    segment.write_bytes(b"not parquet at all" * 100)
    with pytest.raises(ChildError) as err:
        findings_in_child(other.config, T0, T0 + 600 * NS, threading.Event())
    assert "failed" in str(err.value)
    assert segment.name in str(err.value)


def test_a_stop_ends_the_child_at_once(sim: Any) -> None:
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    began = time.monotonic()
    with pytest.raises(ChildError, match="findings pass was stopped"):
        findings_in_child(sim.config, T0, T0 + SPAN_S * NS, stop)
    assert time.monotonic() - began < 2.0


def test_a_pass_past_its_time_is_given_up(sim: Any) -> None:
    began = time.monotonic()
    with pytest.raises(ChildError, match=r"gave up after 0\.2 s"):
        findings_in_child(sim.config, T0, T0 + SPAN_S * NS, threading.Event(), timeout_s=0.2)
    assert time.monotonic() - began < 2.0


def test_the_cache_of_closed_days_is_written_by_a_child_and_only_when_needed(
    tmp_path: Path, simulated_store: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    day = 86_400 * NS
    start = T0 + day - 600 * NS  # ten minutes before midnight, ten after
    sim = simulated_store(tmp_path / "store", start, 1200, gpus_per_host=1)
    clock = FakeClock(T0 + 2 * day)
    assert closed_days_to_cache(sim.data_dir, clock=clock) == ["2026-01-01", "2026-01-02"]
    assert cache_in_child(sim.data_dir, clock) == (2, 0)
    assert [d for d, _ in cached_days(sim.data_dir)] == ["2026-01-01", "2026-01-02"]
    assert closed_days_to_cache(sim.data_dir, clock=clock) == []

    def no_child(*args: object, **kwargs: object) -> None:
        raise AssertionError("a child was started with nothing to do")

    monkeypatch.setattr("subprocess.Popen", no_child)
    assert cache_in_child(sim.data_dir, clock) == (0, 0)
    assert cache_in_child(str(sim.data_dir), clock) == (0, 0)  # a path given as text
    # today's partition is never cached: the day is still open
    assert closed_days_to_cache(sim.data_dir, clock=FakeClock(T0 + day + 60 * NS)) == []


def test_a_failing_child_is_counted_and_maintenance_goes_on(
    tmp_path: Path, simulated_store: Callable[..., Any]
) -> None:
    """A frames-cache child that fails is a StoreError for the maintenance thread: counted,
    and the next pass runs (compaction and retention are not lost with it)."""
    day = 86_400 * NS
    sim = simulated_store(tmp_path / "store", T0 + day - 600 * NS, 1200, gpus_per_host=1)
    stopped = threading.Event()
    stopped.set()
    janitor = MaintenanceThread(
        sim.data_dir,
        every_seconds=3600,
        keep_days=3650,
        compact_min_age_seconds=0,
        materialize=partial(cache_in_child, stop=stopped),
    )
    janitor.run_once()
    assert (janitor.passes, janitor.errors) == (0, 1)
    assert "the frames cache was stopped" in (janitor.last_error or "")
    janitor.materialize = cache_in_child
    janitor.run_once()
    assert (janitor.passes, janitor.errors) == (1, 1)
    assert len(cached_days(sim.data_dir)) == 2


def test_the_findings_only_pass_finds_what_the_whole_report_finds(sim: Any) -> None:
    """The pass stops once the findings are known; the report goes on (the rest of the view,
    the previous half hour's frame for its job verdicts) and finds the same."""
    from gpulens.app.analysis import analyse

    start, end = T0 + SPAN_S * NS // 2, T0 + SPAN_S * NS  # the half hour before is history
    ctx = context_from_config(sim.config)
    settings = {"prices": ctx.prices, "region": ctx.region, "quotas": ctx.quotas, **ctx.analysis}
    with Store(sim.data_dir) as store:
        whole = analyse(store, start_ns=start, end_ns=end, **settings)
        only = findings_of(store, start, end, ctx.prices, ctx.region, ctx.quotas, ctx.analysis)
    assert whole.findings and whole.jobs, "the report has findings and job verdicts"
    assert _dumps([f.to_dict() for f in only]) == _dumps([f.to_dict() for f in whole.findings])


def _rows(data_dir: Path) -> list[tuple[object, ...]]:
    with Store(data_dir) as store:
        sql = "SELECT epoch_ns(ts), gpu_uuid, sm_active_ratio FROM gpu ORDER BY 1, 2"
        return [tuple(r.values()) for r in store.query(sql).to_pylist()]


def _live_names(data_dir: Path) -> dict[str, list[str]]:
    """The live gpu files of each day, by name prefix (seg- or cmp-)."""
    live = LiveFiles(data_dir)
    return {day: sorted(f.name[:4] for f in live.partition(part)[0])
            for day, part in partitions(data_dir, Kind.GPU)}  # fmt: skip


def test_a_closed_day_is_merged_by_a_child_and_today_s_segments_here(
    tmp_path: Path, simulated_store: Callable[..., Any]
) -> None:
    """The maintenance pass merges today's segments itself and hands the closed day's merge,
    which can hold a whole day in memory, to the child, once; every row stays, exactly once."""
    day = 86_400 * NS
    sim = simulated_store(tmp_path / "store", T0 + day - 1800 * NS, 3600, flush_s=60.0,
                          gpus_per_host=1)  # fmt: skip
    clock = FakeClock(T0 + day + 1800 * NS + 600 * NS)  # today's segments all older than 300 s
    before = _rows(sim.data_dir)
    calls: list[CompactionResult] = []

    def in_child(data_dir: Any, at: Any) -> CompactionResult:
        calls.append(compact_in_child(data_dir, at, host=None, min_age_seconds=300))
        return calls[-1]

    result = maintain(sim.data_dir, keep_days=3650, compact_min_age_seconds=300, clock=clock,
                      materialize_frames=False, compact_large=in_child)  # fmt: skip
    assert len(calls) == 1 and calls[0].files_merged > 0
    assert calls[0].deferred == 0 and result.compaction.deferred >= 1  # the child does all
    assert result.compaction.files_merged > calls[0].files_merged  # today's, here
    assert _live_names(sim.data_dir) == {"2026-01-01": ["cmp-"], "2026-01-02": ["cmp-"]}
    assert _rows(sim.data_dir) == before
    again = maintain(sim.data_dir, keep_days=3650, compact_min_age_seconds=300, clock=clock,
                     materialize_frames=False, compact_large=in_child)  # fmt: skip
    assert len(calls) == 1 and again.compaction.files_merged == 0  # nothing large was due


def test_a_failing_compaction_child_is_counted_and_the_next_pass_merges(
    tmp_path: Path, simulated_store: Callable[..., Any]
) -> None:
    sim = simulated_store(tmp_path / "store", T0, 1200, flush_s=60.0, gpus_per_host=1)
    stopped = threading.Event()
    stopped.set()
    released: list[int] = []
    janitor = MaintenanceThread(
        sim.data_dir,
        every_seconds=3600,
        keep_days=3650,
        compact_min_age_seconds=0,
        compact_large=partial(compact_in_child, host=None, min_age_seconds=0, stop=stopped),
        after_pass=lambda: released.append(1),
    )
    before = _rows(sim.data_dir)
    janitor.run_once()  # the store's day closed long ago (wall clock): its merge is large
    assert (janitor.passes, janitor.errors, len(released)) == (0, 1, 1)
    assert "the compaction was stopped" in (janitor.last_error or "")
    assert _rows(sim.data_dir) == before  # (a child killed after its rename merged the day)
    janitor.compact_large = partial(compact_in_child, host=None, min_age_seconds=0)
    janitor.run_once()
    assert (janitor.passes, janitor.errors, len(released)) == (1, 1, 2)
    assert _live_names(sim.data_dir) == {"2026-01-01": ["cmp-"]}
    assert _rows(sim.data_dir) == before
