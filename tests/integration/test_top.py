"""`gpulens top` headless: the textual app over a feed of the simulated 12-GPU fleet, driven by
key presses; and the command on a machine without NVML."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from gpulens.app import session
from gpulens.app.top_feed import TopFeed
from gpulens.clock import FakeClock
from gpulens.collect.simulated import SimulatedFleet
from gpulens.model import Reading
from gpulens.present.top.app import DetailScreen, TopApp
from gpulens.present.top.table import RowTable

NS = 1_000_000_000
START = 1_790_000_040 * NS


class Broken:
    """A collector that fails at runtime (a GPU fell off the bus)."""

    name = "nvml@lost"

    def collect(self, now_ns: int) -> list[Reading]:
        raise RuntimeError("GPU is lost")

    def close(self) -> None:
        pass


def feed(extra: list[Broken] | None = None) -> TopFeed:
    clock = FakeClock(START + 600 * NS)
    fleet = SimulatedFleet(hosts=3, gpus_per_host=4, start_ns=START)
    collectors = [*(extra or []), *session.fleet_collectors(fleet, clock)]
    top = TopFeed(collectors, clock, state_window_s=10.0, refresh_every=10**6)
    for s in range(600, 608):
        clock.set(START + s * NS)
        top.step(START + s * NS)
    top.refresh()
    return top


@pytest.fixture(scope="module")
def fleet_feed() -> Iterator[TopFeed]:
    top = feed()
    yield top
    top.close()


def drive(top: TopFeed, script: Callable[[TopApp, Pilot[None]], Awaitable[None]]) -> TopApp:
    """Run the app headless, play `script`, return the app once it has stopped."""
    app = TopApp(top, poll_s=3600.0)

    async def main() -> None:
        async with app.run_test(size=(180, 50)) as pilot:
            await pilot.pause()
            await script(app, pilot)

    asyncio.run(main())
    return app


def gpu_keys(app: TopApp) -> list[str]:
    return list(app.query_one("#gpus", RowTable).keys)


def test_rows_sort_filter_detail_and_quit(fleet_feed: TopFeed) -> None:
    seen: dict[str, object] = {}

    async def script(app: TopApp, pilot: Pilot[None]) -> None:
        first = gpu_keys(app)
        assert len(first) == 12
        assert len(app.query_one("#procs", RowTable).keys) > 0
        await pilot.press("down")
        table = app.query_one("#gpus", RowTable)
        assert table.cursor_key == first[1]
        await pilot.press("s", "s")  # gpu → state → duty
        assert table.cursor_key == first[1]  # the cursor stays on its GPU
        await pilot.press("home")
        assert app.sort == "duty"
        by_duty = gpu_keys(app)
        assert sorted(by_duty) == sorted(first) and by_duty != first
        await pilot.press("slash", *"alice")
        narrowed = gpu_keys(app)
        assert 0 < len(narrowed) < 12
        await pilot.press("q")  # typed into the filter, not quitting
        assert app.is_running and app.filter_text == "aliceq" and gpu_keys(app) == []
        await pilot.press("escape")  # clears the filter
        assert app.filter_text == "" and len(gpu_keys(app)) == 12
        await pilot.press("down", "enter")
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        assert screen.key == by_duty[1]
        app.refresh_view()  # the detail follows the feed
        detail = str(screen.query_one("#detail", Static).render())
        assert by_duty[1].split("|")[1] in detail and "state" in detail
        await pilot.press("escape")
        assert not isinstance(app.screen, DetailScreen)
        await pilot.press("q")
        seen["quit"] = True

    app = drive(fleet_feed, script)
    assert seen["quit"] and not app.is_running and app.return_code == 0


def test_enter_on_a_process_opens_its_gpu(fleet_feed: TopFeed) -> None:
    async def script(app: TopApp, pilot: Pilot[None]) -> None:
        procs = app.query_one("#procs", RowTable)
        procs.focus()
        await pilot.press("down", "enter")
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        assert app.view is not None
        assert screen.key == app.view.processes[1].gpu_key
        await pilot.press("q")

    assert not drive(fleet_feed, script).is_running


def test_a_collector_failing_at_runtime_shows_in_the_status_line() -> None:
    top = feed([Broken()])

    async def script(app: TopApp, pilot: Pilot[None]) -> None:
        assert len(gpu_keys(app)) == 12  # the others still run
        assert app.view is not None
        assert app.view.problems == ("nvml@lost: error: RuntimeError: GPU is lost",)
        await pilot.press("q")

    try:
        assert drive(top, script).return_code == 0
    finally:
        top.close()


def _has_nvml() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.skipif(_has_nvml(), reason="this machine has NVML: top would start")
def test_top_without_nvml_says_so_in_one_message() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    result = subprocess.run(
        [sys.executable, "-m", "gpulens", "top"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "COLUMNS": "200"},
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode != 0
    assert result.stderr.startswith("error:") and "NVML" in result.stderr
    assert "Traceback" not in result.stderr
