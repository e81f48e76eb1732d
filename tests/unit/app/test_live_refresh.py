"""When the live state is analysed: once per closed interval for /metrics, and for a viewer
only when its states are older than it accepts; the recent window merges ticks into blocks."""

from __future__ import annotations

from present.sim import NS, START, fleet, ticks

from gpulens.app.live import LiveState
from gpulens.store.recent import BLOCK_TICKS


def test_refresh_is_due_once_per_closed_interval_and_fresh_on_demand() -> None:
    sim = fleet(hosts=1, gpus_per_host=2, seed=0)
    live = LiveState(state_window_s=60, keep_s=180)
    first = 60 - (START // NS) % 60  # START + first is a whole minute
    due = []
    for tick in ticks(sim, first, first + 150):
        live.on_tick(tick)
        if live.refresh_due(tick.ts):
            due.append(tick.ts // NS - START // NS - first)
            live.refresh()
    assert due == [0, 60, 120]  # the first tick, then each tick that closes a minute
    assert live.refreshes == 3
    live.fresh(max_age_s=60)  # the last refresh (at 120 s) is 29 s old: nothing to do
    assert live.refreshes == 3
    live.fresh(max_age_s=5)
    assert live.refreshes == 4 and live.refreshed_ns == live.window.latest_ns
    live.fresh(max_age_s=5)
    assert live.refreshes == 4
    assert all(g.state is not None for g in live.snapshot().gpus)


def test_the_recent_window_keeps_blocks_not_ticks() -> None:
    sim = fleet(hosts=1, gpus_per_host=2, seed=0)
    live = LiveState(state_window_s=60, keep_s=180)
    first = 60 - (START // NS) % 60
    for tick in ticks(sim, first, first + 400):
        live.on_tick(tick)
    blocks = live.window.blocks
    assert blocks <= 180 // BLOCK_TICKS + 1  # what the window keeps, as blocks of ticks
    got = live.window.query("SELECT min(ts) AS lo, max(ts) AS hi FROM gpu").to_pylist()[0]
    span_s = got["hi"].timestamp() - got["lo"].timestamp()
    assert 180 - 1 <= span_s < 180 + BLOCK_TICKS  # whole blocks leave once out of the window
