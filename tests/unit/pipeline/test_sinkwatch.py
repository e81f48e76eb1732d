"""SinkWatch: a failing store is said at once, then at most once a minute, then its recovery."""

from __future__ import annotations

from gpulens.pipeline.sinkwatch import SinkWatch

S = 10**9
ERROR = "StoreError: cannot write a gpu segment in '/data/gpu': No space left on device"


def stats(buffered: int, dropped: int = 0) -> dict[str, float]:
    return {"buffered_rows": buffered, "max_buffered_rows": 1000, "dropped_rows": dropped}


def test_said_at_once_then_once_a_minute_then_the_recovery() -> None:
    said: list[str] = []
    watch = SinkWatch(said.append)
    watch.update(0, None, stats(40))
    assert said == []
    watch.update(10 * S, ERROR, stats(400))
    assert len(said) == 1  # at once
    assert said[0].startswith("warning: ") and ERROR in said[0]
    assert "400 readings buffered in memory (at most 1,000: store.max_buffered_rows)" in said[0]
    for t in range(11, 70):  # every tick fails or waits: nothing more within the minute
        watch.update(t * S, ERROR if t % 10 == 0 else None, stats(40 * t))
    assert len(said) == 1 and watch.failing
    watch.update(70 * S, ERROR, stats(1000, dropped=200))
    assert len(said) == 2
    assert "failed for 60 s (7 failed flushes)" in said[1] and "200 dropped so far" in said[1]
    watch.update(75 * S, None, stats(0, dropped=200))
    assert len(said) == 3 and not watch.failing
    assert "takes writes again after 65 s" in said[2] and "200 dropped in all" in said[2]
    watch.update(200 * S, ERROR, stats(40, dropped=200))  # a new failure is said at once
    assert len(said) == 4 and said[3].startswith("warning: ")
