"""A released window hands back its DuckDB connection and answers the next query as before,
with the readings that arrived in between (the agent releases it after each unviewed
refresh)."""

from __future__ import annotations

from present.sim import START, fleet, ticks

from gpulens.app.live import LiveState
from gpulens.store.frames import gpu_intervals
from gpulens.store.recent import RecentWindow

NS = 1_000_000_000


def test_a_released_window_reopens_with_the_same_answers_and_new_readings() -> None:
    sim = fleet(hosts=1, gpus_per_host=2, seed=5)
    window = RecentWindow(keep_s=600)
    for tick in ticks(sim, 0, 120):
        window.append(tick.ts, tick.readings)
    before = gpu_intervals(window, 60, START, START + 120 * NS, use_cache=False)
    window.release()
    assert window._con is None  # the connection, and what DuckDB kept with it, is gone
    again = gpu_intervals(window, 60, START, START + 120 * NS, use_cache=False)
    assert again.equals(before)
    for tick in ticks(sim, 120, 180):
        window.append(tick.ts, tick.readings)
    window.release()
    count = window.query("SELECT count(*) AS n FROM gpu WHERE gpu_uuid IS NOT NULL")
    assert count.to_pylist()[0]["n"] == 2 * 180  # every tick of both GPUs, the new ones too
    window.release()
    window.release()  # releasing twice is harmless
    window.close()


def test_live_state_refreshes_alike_after_each_release() -> None:
    sim = fleet(hosts=1, gpus_per_host=2, seed=7)
    kept, released = LiveState(60.0, 180.0), LiveState(60.0, 180.0)
    for tick in ticks(sim, 0, 240):
        for live in (kept, released):
            live.on_tick(tick)
            if live.refresh_due(tick.ts):
                live.refresh()
        if released.window._con is not None:
            released.release()
    assert released.refreshes == kept.refreshes >= 4
    a, b = kept.snapshot(), released.snapshot()
    assert [(g.state, g.useful_ratio) for g in a.gpus] == [
        (g.state, g.useful_ratio) for g in b.gpus
    ]
    assert [(w.labels, w.cause, w.seconds) for w in a.waste] == [
        (w.labels, w.cause, w.seconds) for w in b.waste
    ]
    assert len(a.gpus) == 2 and all(g.state for g in a.gpus)  # both were classified
