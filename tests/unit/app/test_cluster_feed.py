"""The Cluster page's feed: a failed Prometheus read keeps the last good data, says why and is
retried sooner (30 s, doubling up to the refresh interval); the interval is bounded; a store's
windows are built once per `ttl_s`; `agent --since` slides with the clock when it is a
duration and stays put when it is a time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpulens.app.cluster_feed import MAX_EVERY_S, MIN_EVERY_S, ClusterFeed, check_every
from gpulens.config import load_config
from gpulens.errors import CollectError, ConfigError
from gpulens.present.cli_live import cluster_feed

NS = 1_000_000_000


class Clock:
    def __init__(self) -> None:
        self.ns = 1_790_812_800 * NS

    def __call__(self) -> int:
        return self.ns


class Reads:
    """What each read returns (an object) or raises (an exception), in turn."""

    def __init__(self, *outcomes: Any) -> None:
        self.outcomes = list(outcomes)
        self.windows: list[tuple[int, int]] = []

    def __call__(self, start: int, end: int) -> Any:
        self.windows.append((start, end))
        got = self.outcomes.pop(0)
        if isinstance(got, Exception):
            raise got
        return got


def feed(tmp_path: Path, reads: Reads, clock: Clock, every_s: float = 300.0) -> ClusterFeed:
    cfg = load_config(None, overrides={"data_dir": str(tmp_path)})
    return ClusterFeed(
        cfg, "http://127.0.0.1:9", every_s=every_s, now_ns=clock, build=reads, span_s=86400
    )


def test_a_failed_read_keeps_the_last_data_and_is_retried_sooner(tmp_path: Path) -> None:
    clock = Clock()
    down = CollectError("http://127.0.0.1:9: connection refused")
    first, second = object(), object()
    reads = Reads(down, down, down, down, first, down, second)
    f = feed(tmp_path, reads, clock, every_s=100.0)
    waits = []
    for _ in range(4):
        st = f.refresh()
        assert st.data is None and st.error == str(down) and st.failed_ns == clock.ns
        assert st.next_ns is not None
        waits.append((st.next_ns - clock.ns) / NS)
        clock.ns += 10 * NS
    assert waits == [30.0, 60.0, 100.0, 100.0]  # doubling, capped at the interval
    st = f.refresh()
    assert st.data is first and st.error is None and st.refreshed_ns == clock.ns
    assert st.next_ns == clock.ns + 100 * NS
    good_at = clock.ns
    clock.ns += 100 * NS
    st = f.refresh()
    assert st.data is first and st.refreshed_ns == good_at  # still shown, with the error
    assert st.error == str(down) and st.next_ns == clock.ns + 30 * NS  # the count restarted
    assert f.refresh().data is second and f.state().error is None
    assert {end - start for start, end in reads.windows} == {86400 * NS}  # the sliding window


def test_a_password_in_the_url_is_not_shown(tmp_path: Path) -> None:
    cfg = load_config(None, overrides={"data_dir": str(tmp_path)})
    f = ClusterFeed(cfg, "https://ops:s3cret@prometheus.example:9090", build=Reads(object()))
    assert f.state().source == "Prometheus https://prometheus.example:9090"
    assert "s3cret" not in f.refresh().source and f.url is not None and "s3cret" in f.url


def test_the_refresh_interval_is_bounded(tmp_path: Path) -> None:
    for bad in (MIN_EVERY_S - 1, MAX_EVERY_S + 1, 0.0):
        with pytest.raises(ConfigError, match="--cluster-every"):
            check_every(bad)
    with pytest.raises(ConfigError, match="--cluster-every"):
        feed(tmp_path, Reads(), Clock(), every_s=5.0)


def test_a_stores_window_is_built_once_per_ttl(tmp_path: Path) -> None:
    cfg = load_config(None, overrides={"data_dir": str(tmp_path)})
    data = object()
    reads = Reads(data, ValueError("bad window"))
    f = ClusterFeed(cfg, build=reads, ttl_s=3600)
    assert not f.prometheus
    one = f.for_window(0, 3600 * NS, 60)
    assert f.for_window(0, 3600 * NS, 60) is one and one.data is data
    other = f.for_window(0, 7200 * NS, 60)  # another window: built, and its error shown
    assert other.data is None and other.error == "bad window"
    assert len(reads.windows) == 2


def test_agent_since_slides_as_a_duration_and_stays_as_a_time(tmp_path: Path) -> None:
    cfg = load_config(None, overrides={"data_dir": str(tmp_path)})
    url = "http://127.0.0.1:9"
    sliding = cluster_feed(cfg, url, "2d", None, 300.0, True)
    assert sliding is not None and sliding.start_ns is None and sliding.end_ns is None
    assert sliding.span_s == pytest.approx(2 * 86400, abs=1)
    fixed = cluster_feed(cfg, url, "2026-10-01T00:00:00Z", "2026-10-31T00:00:00Z", 60, True)
    assert fixed is not None and fixed.window() == (1_790_812_800 * NS, 1_793_404_800 * NS)
    default = cluster_feed(cfg, url, None, None, 300.0, True)
    assert default is not None and default.span_s == 7 * 86400
    with pytest.raises(ConfigError, match="must be before"):
        cluster_feed(cfg, url, "2026-10-31T00:00:00Z", "2026-10-01T00:00:00Z", 300.0, True)
    assert cluster_feed(cfg, None, None, None, 300.0, False) is None  # the store's cluster


def test_no_collect_without_prometheus_is_one_clear_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env["GPULENS_DATA_DIR"] = str(tmp_path / "store")
    proc = subprocess.run(
        [sys.executable, "-m", "gpulens", "agent", "--no-collect", "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "--no-collect serves the cluster from a Prometheus: give --prometheus URL" in (
        proc.stderr.replace("\n", " ")
    )
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "store").exists()
