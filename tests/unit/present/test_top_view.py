"""`gpulens top`'s view models, on a LiveState fed by the simulated fleet (real collectors,
scheduler and rate stage, simulated time), and its feed."""

from __future__ import annotations

import threading
from statistics import fmean

import pytest

from gpulens.app import session
from gpulens.app.live import CollectorHealth, GpuNow, LiveSnapshot, ProcessNow
from gpulens.app.top_feed import TopFeed
from gpulens.clock import FakeClock
from gpulens.collect.simulated import SimulatedFleet
from gpulens.model import Kind, Reading
from gpulens.present.top.table import column_widths, line
from gpulens.present.top.view import (
    GPU_COLUMNS,
    MISSING,
    PROCESS_COLUMNS,
    SORT_KEYS,
    bar,
    build_top,
    format_value,
    gpu_cells,
    gpu_detail,
    gpu_row,
    header_text,
    key_text,
    matches,
    next_sort,
    process_cells,
    sort_gpus,
    status_text,
)

NS = 1_000_000_000
START = 1_790_000_040 * NS


def fed_feed(first_s: int = 600, ticks: int = 12) -> TopFeed:
    """A TopFeed over the default 12-GPU simulated fleet, `ticks` seconds from `first_s` on,
    classified once at the end."""
    clock = FakeClock(START + first_s * NS)
    fleet = SimulatedFleet(hosts=3, gpus_per_host=4, start_ns=START)
    feed = TopFeed(
        session.fleet_collectors(fleet, clock), clock, state_window_s=10.0, refresh_every=10**6
    )
    for s in range(first_s, first_s + ticks):
        clock.set(START + s * NS)
        feed.step(START + s * NS)
    feed.refresh()
    return feed


@pytest.fixture(scope="module")
def snap() -> LiveSnapshot:
    feed = fed_feed()
    try:
        return feed.snapshot()
    finally:
        feed.close()


def empty(**kw: object) -> LiveSnapshot:
    fields: dict[str, object] = {
        "ts": START,
        "gpus": [],
        "processes": [],
        "hosts": [],
        "events": [],
        "collectors": [],
        "waste": [],
        "findings": [],
        "findings_ts": None,
        "state_window_s": 60.0,
    }
    fields.update(kw)
    return LiveSnapshot(**fields)  # type: ignore[arg-type]


def gpu(index: int, **values: float) -> GpuNow:
    labels = {"host": "h", "gpu_uuid": f"GPU-{index}", "gpu_index": str(index)}
    return GpuNow(labels=labels, values=dict(values), state="busy")


def test_one_row_per_gpu_with_state_and_the_processes_on_them(snap: LiveSnapshot) -> None:
    view = build_top(snap)
    assert len(view.gpus) == view.total_gpus == 12
    assert len({r.key for r in view.gpus}) == 12
    assert all(r.state for r in view.gpus)
    assert {r.name for r in view.gpus} >= {"sim-node-0/0", "sim-node-2/3"}
    keys = {r.key for r in view.gpus}
    assert view.processes and all(p.gpu_key in keys for p in view.processes)
    # host-side readings of the same processes are joined on, not rows of their own
    assert all(p.memory is not None for p in view.processes)
    assert any(p.cpu_cores is not None for p in view.processes)
    assert view.message is None and view.problems == ()
    for row in view.gpus:
        assert len(gpu_cells(row)) == len(GPU_COLUMNS)
    for p in view.processes:
        assert len(process_cells(p)) == len(PROCESS_COLUMNS)


def test_header_has_fleet_means_and_gpus_per_state(snap: LiveSnapshot) -> None:
    summary = build_top(snap).summary
    duty = [g.values["gpu_util_ratio"] for g in snap.gpus]
    assert summary.duty == pytest.approx(fmean(duty))
    assert summary.sm == pytest.approx(fmean(g.values["sm_active_ratio"] for g in snap.gpus))
    assert summary.power == pytest.approx(sum(g.values["power_watts"] for g in snap.gpus))
    assert sum(n for _, n in summary.states) == 12
    text = header_text(summary)
    assert text.startswith("12 GPUs")
    for state, n in summary.states:
        assert f"{state} {n}" in text


def test_sorting_orders_by_the_column_highest_first(snap: LiveSnapshot) -> None:
    by_gpu = build_top(snap, "gpu").gpus
    by_duty = build_top(snap, "duty").gpus
    duties = [r.duty for r in by_duty]
    assert duties == sorted(duties, reverse=True)  # type: ignore[type-var]
    assert [r.key for r in by_duty] != [r.key for r in by_gpu]
    tones = [r.tone for r in build_top(snap, "state").gpus]
    assert tones[0] == "bad"
    for sort in SORT_KEYS:
        assert {r.key for r in build_top(snap, sort).gpus} == {r.key for r in by_gpu}


def test_missing_values_sort_last_and_show_as_missing() -> None:
    rows = [gpu_row(gpu(0)), gpu_row(gpu(1, tensor_active_ratio=0.2)), gpu_row(gpu(2))]
    assert [r.name for r in sort_gpus(rows, "tensor")] == ["h/1", "h/0", "h/2"]
    cells = dict(zip((k for k, _ in GPU_COLUMNS), gpu_cells(rows[0]), strict=True))
    assert cells["tensor"].strip() == MISSING
    assert cells["memory"] == MISSING and cells["temperature"] == MISSING
    assert "0%" not in cells["duty"]
    with pytest.raises(ValueError, match="unknown sort"):
        sort_gpus(rows, "colour")


def test_next_sort_cycles_through_every_order() -> None:
    seen = [SORT_KEYS[0]]
    for _ in SORT_KEYS:
        seen.append(next_sort(seen[-1]))
    assert seen[:-1] == list(SORT_KEYS) and seen[-1] == SORT_KEYS[0]


def test_filter_narrows_gpus_and_processes_by_any_label(snap: LiveSnapshot) -> None:
    alice = build_top(snap, query="alice")
    assert 0 < len(alice.gpus) < 12
    assert all(p.user == "alice" for p in alice.processes)
    assert all(r.user == "alice" for r in alice.gpus)
    node = build_top(snap, query="SIM-NODE-2")
    assert {r.name.split("/")[0] for r in node.gpus} == {"sim-node-2"} and len(node.gpus) == 4
    state = build_top(snap, query=alice.gpus[0].state or "")
    assert alice.gpus[0].key in {r.key for r in state.gpus}
    # a process shows when its GPU matches: the state is no label of a process
    assert {p.gpu_key for p in state.processes} <= {r.key for r in state.gpus}
    assert build_top(snap, query="alice sim-node-2").gpus == ()
    nothing = build_top(snap, query="no-such-thing")
    assert nothing.gpus == () and nothing.message == "no GPU matches the filter"
    assert "filter: 'no-such-thing'" in status_text(nothing)


def test_matches_needs_every_term() -> None:
    assert matches("alice sim-1001 pytorch", "ALICE pytorch")
    assert not matches("alice sim-1001", "alice bob")
    assert matches("anything", "  ")


def test_detail_has_every_value_the_reason_and_the_processes(snap: LiveSnapshot) -> None:
    target = snap.gpus[0]
    detail = gpu_detail(snap, key_text(target.labels))
    assert detail is not None
    assert [name for name, _ in detail.values] == sorted(target.values)
    assert detail.row.reason and detail.row.state
    assert detail.processes and all(p.gpu_key == detail.row.key for p in detail.processes)
    assert gpu_detail(snap, "nowhere||") is None


def test_values_are_formatted_in_their_catalog_unit() -> None:
    assert format_value("sm_active_ratio", 0.456) == "46%"
    assert format_value("memory_used_bytes", 3 * 1024**3) == "3.22 GB"  # decimal units
    assert format_value("sm_clock_hertz", 1.98e9) == "1,980 MHz"
    assert format_value("power_watts", 312.04) == "312 W"
    assert format_value("energy_joules", 1.8e9) == "500 kWh"
    assert format_value("pcie_replay_total", 1_234_567) == "1.23 M"
    assert format_value("clocks_event_reasons", 0x4) == "0x4 (sw_power_cap)"
    assert format_value("not_in_catalog", 2.5) == "2.5"
    assert bar(None) == "     " and bar(1.0) == "█████" and bar(0.5) == "██▌  "
    assert bar(2.0) == "█████" and bar(-1.0) == "     "


def test_collector_failures_and_empty_fleets_say_what_happened() -> None:
    failing = CollectorHealth("nvml", "error", 0.01, 3, 0, "NvmlError: GPU is lost")
    no_gpus = build_top(empty(collectors=[failing]), notes=["states: boom"])
    assert no_gpus.problems == ("nvml: error: NvmlError: GPU is lost", "states: boom")
    assert no_gpus.message is not None and "GPU is lost" in no_gpus.message
    assert status_text(no_gpus).startswith("nvml: error: NvmlError: GPU is lost")
    quiet = build_top(empty(collectors=[CollectorHealth("nvml", "ok", 0.01, 0, 0, None)]))
    assert quiet.message is not None and "--simulated" in quiet.message
    assert build_top(empty(ts=None)).message == "waiting for the first readings…"


def test_processes_follow_their_gpu_order_biggest_first() -> None:
    gpus = [gpu(0, gpu_util_ratio=0.1), gpu(1, gpu_util_ratio=0.9)]
    procs = [
        ProcessNow({**g.labels, "pid": str(i)}, {"process_memory_used_bytes": float(i)})
        for i, g in enumerate(gpus * 2)
    ]
    view = build_top(empty(gpus=gpus, processes=procs), "duty")
    assert [r.name for r in view.gpus] == ["h/1", "h/0"]
    assert [p.pid for p in view.processes] == ["3", "1", "2", "0"]


def test_table_lines_align_columns() -> None:
    widths = column_widths(("a", "bb"), [("xxx", "y"), ("z", "")])
    assert widths == [3, 2]
    assert line(("z", "q"), widths, {}).plain == "z    q"
    assert line(("z", "q"), widths, {1: "red"}).spans[-1].style == "red"


# -- the feed ------------------------------------------------------------------------------------
class Broken:
    name = "broken"

    def __init__(self) -> None:
        self.closed = False

    def collect(self, now_ns: int) -> list[Reading]:
        raise RuntimeError("device vanished")

    def close(self) -> None:
        self.closed = True
        raise OSError("already gone")


def test_a_failing_collector_is_reported_and_closing_survives_it() -> None:
    clock = FakeClock(START)
    broken = Broken()
    feed = TopFeed([broken], clock, state_window_s=10.0)
    feed.step(START)
    snap = feed.snapshot()
    assert snap.gpus == []
    view = build_top(snap, notes=feed.notes())
    assert view.problems == ("broken: error: RuntimeError: device vanished",)
    feed.close()
    assert broken.closed
    assert any("closing broken" in n for n in feed.notes())


class Stopping:
    """A clock whose waiting fails: the tick loop itself breaks."""

    def now_ns(self) -> int:
        return START

    def sleep_until(self, deadline_ns: int, stop: threading.Event | None = None) -> bool:
        raise RuntimeError("clock broke")


def test_a_broken_loop_becomes_a_note_not_a_crash() -> None:
    feed = TopFeed([], Stopping())
    feed.start()
    assert feed._thread is not None
    feed._thread.join(5)
    assert feed.notes() == ["collection stopped: RuntimeError: clock broke"]
    feed.close()


def test_feed_refreshes_states_every_few_ticks() -> None:
    clock = FakeClock(START)

    class One:
        name = "one"

        def collect(self, now_ns: int) -> list[Reading]:
            labels = {"host": "h", "gpu_uuid": "GPU-1", "gpu_index": "0"}
            return [Reading(Kind.GPU, now_ns, labels, {"gpu_util_ratio": 0.0})]

        def close(self) -> None:
            pass

    feed = TopFeed([One()], clock, interval_s=1.0, state_window_s=10.0)
    assert feed.refresh_every == 5
    feed.step(START)
    assert feed.snapshot().gpus[0].state is not None  # classified on the first tick
    feed.close()
