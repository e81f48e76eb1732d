"""Benchmark one redraw of `gpulens top`: 8 simulated GPUs, ~50 processes, headless.

    .venv/bin/python bench/bench_top.py [--refreshes 200] [--gpus 8] [--per-gpu 6] [--datatable]

Target: "redraw <= 50 ms for 8 GPUs". The simulated fleet (one host, `--gpus` H100s, ten
minutes in so the jobs run) goes through the real NVML collector, scheduler and rate stage
into `TopFeed`'s `LiveState`; every tick is padded so each GPU lists `--per-gpu` processes
(the job's own plus deterministic extra ones). Between two timed refreshes the feed takes one
more tick, so every refresh has new values to draw (the feed's state classification runs
once before, outside the timings: it belongs to the feed thread, not the redraw).

Timed, as medians over `--refreshes` refreshes in a headless `TopApp` (200 × 50 cells):
- "update": `TopApp.refresh_view()`: the snapshot, the view model, the widget updates;
- "update + frame" (every other refresh): the same, then the messages it posted handled and
  the screen's compositor rendering the changed regions (what textual does before writing to
  the terminal; the write itself is skipped headless);
- "update + cold frame" (the other refreshes): the same with every table line rendered anew,
  none reused from the previous frame (an upper bound);
- the frame steps alone with nothing changed: the event loop's own share of the above.
`--datatable` runs the same app and timings with textual's `DataTable` in place of our
`RowTable` (the alternative `present/top/table.py` replaced): the same rows and styles, cells
updated in place with `update_cell` while the row keys stay, the rows rebuilt when they change.
Prints a markdown table. Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Mapping, Sequence

from rich.text import Text
from textual.widgets import DataTable

from gpulens.app import session
from gpulens.app.top_feed import TopFeed
from gpulens.clock import FakeClock
from gpulens.collect.simulated import SimulatedFleet
from gpulens.model import Kind, Reading
from gpulens.pipeline.scheduler import TickResult
from gpulens.present.top import app as top_app
from gpulens.present.top.app import TopApp

NS = 1_000_000_000
START = 1_790_000_040 * NS
EXTRA_PID_BASE = 900_000
USERS = ("alice", "bob", "carol", "dave", "erin")


class DataTableRows(DataTable[Text]):
    """textual's DataTable behind `RowTable`'s interface (`set_rows`, `keys`)."""

    def __init__(self, titles: Sequence[str], *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)
        self.titles = tuple(titles)
        self.keys: list[str] = []
        self._cells: dict[str, list[Text]] = {}
        for i, title in enumerate(self.titles):
            self.add_column(title, key=str(i))

    def set_rows(
        self, rows: Sequence[tuple[str, Sequence[str]]], styles: Sequence[Mapping[int, str]] = ()
    ) -> None:
        """Show `rows` (key, cells): changed cells updated in place while the keys stay."""
        keys = [key for key, _ in rows]
        texts = [
            [
                Text(cell, style=(styles[i] if i < len(styles) else {}).get(j) or "")
                for j, cell in enumerate(cells)
            ]
            for i, (_, cells) in enumerate(rows)
        ]
        if keys != self.keys:
            self.clear()
            for key, cells in zip(keys, texts, strict=True):
                self.add_row(*cells, key=key)
            self.keys = keys
        else:
            for key, cells in zip(keys, texts, strict=True):
                before = self._cells[key]
                for j, cell in enumerate(cells):
                    if cell != before[j]:
                        self.update_cell(key, str(j), cell, update_width=True)
        self._cells = dict(zip(keys, texts, strict=True))


def pad(tick: TickResult, per_gpu: int) -> TickResult:
    """`tick` with extra process readings so every GPU lists `per_gpu` processes."""
    have: dict[str, int] = {}
    for r in tick.readings:
        if r.kind is Kind.PROCESS and r.labels.get("gpu_uuid"):
            have[r.labels["gpu_uuid"]] = have.get(r.labels["gpu_uuid"], 0) + 1
    extra: list[Reading] = []
    for r in tick.readings:
        if r.kind is not Kind.GPU:
            continue
        uuid = r.labels["gpu_uuid"]
        index = int(r.labels.get("gpu_index", "0"))
        for n in range(have.get(uuid, 0), per_gpu):
            user = USERS[(index + n) % len(USERS)]
            labels = {
                **{k: r.labels[k] for k in ("host", "gpu_uuid", "gpu_index", "gpu_model")},
                "pid": str(EXTRA_PID_BASE + index * 100 + n),
                "process_name": f"python worker_{n}.py",
                "user": user,
                "job_id": f"bench-{index}",
                "container": "worker",
                "engine": "pytorch",
            }
            used = float((n + 1) * 512 * 1024**2 + (tick.ts // NS % 7) * 1024**2)
            extra.append(
                Reading(
                    Kind.PROCESS,
                    tick.ts,
                    labels,
                    {"process_memory_used_bytes": used, "process_sm_util_ratio": 0.1 * n},
                )
            )
    return TickResult(tick.ts, tick.lag_s, tick.outcomes, [*tick.readings, *extra])


async def measure(
    feed: TopFeed, clock: FakeClock, refreshes: int, per_gpu: int
) -> dict[str, float]:
    """Median milliseconds of each timing (see the module doc)."""
    app = TopApp(feed, poll_s=3600.0)
    update: list[float] = []
    frame: list[float] = []
    full: list[float] = []
    idle: list[float] = []
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        for i in range(refreshes):
            now = clock.now_ns() + NS
            clock.set(now)
            feed.on_tick(pad(feed.scheduler.tick(now), per_gpu))
            await pilot.pause()
            cold = i % 2 == 0
            if cold:  # forget every rendered line and redraw the tables whole
                for table in app.query(top_app.RowTable):  # type: ignore[attr-defined]
                    table.notify_style_update()
                    table.refresh()
            t0 = time.perf_counter()
            app.refresh_view()
            t1 = time.perf_counter()
            await pilot._wait_for_screen()  # handle the messages the update posted
            screen._on_timer_update()  # render what is dirty, as the screen's timer does
            (full if cold else frame).append(time.perf_counter() - t0)
            update.append(t1 - t0)
        for _ in range(refreshes // 2):  # the same steps with nothing changed
            t0 = time.perf_counter()
            await pilot._wait_for_screen()
            screen._on_timer_update()
            idle.append(time.perf_counter() - t0)
        shown = len(app.view.gpus) if app.view else 0
        procs = len(app.view.processes) if app.view else 0
    return {
        "gpus": shown,
        "processes": procs,
        "update_ms": statistics.median(update) * 1e3,
        "frame_ms": statistics.median(frame) * 1e3,
        "full_ms": statistics.median(full) * 1e3,
        "update_max_ms": max(update) * 1e3,
        "idle_ms": statistics.median(idle) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refreshes", type=int, default=200)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--per-gpu", type=int, default=6)
    parser.add_argument(
        "--datatable",
        action="store_true",
        help="textual's DataTable in place of RowTable (what the line-API table replaced)",
    )
    args = parser.parse_args()
    if args.datatable:  # the app's module looks the table class up by this name
        top_app.RowTable = DataTableRows  # type: ignore[attr-defined,assignment]

    clock = FakeClock(START + 600 * NS)
    fleet = SimulatedFleet(hosts=1, gpus_per_host=args.gpus, start_ns=START)
    feed = TopFeed(
        session.fleet_collectors(fleet, clock), clock, state_window_s=60.0, refresh_every=10**9
    )
    for _ in range(10):
        clock.set(clock.now_ns() + NS)
        feed.on_tick(pad(feed.scheduler.tick(clock.now_ns()), args.per_gpu))
    t0 = time.perf_counter()
    feed.refresh()
    classify_ms = (time.perf_counter() - t0) * 1e3
    result = asyncio.run(measure(feed, clock, args.refreshes, args.per_gpu))
    feed.close()

    table = "textual's DataTable" if args.datatable else "RowTable (line API)"
    print(
        f"{result['gpus']:.0f} GPUs, {result['processes']:.0f} processes, {table}, "
        f"median of {args.refreshes} refreshes (half of them cold)\n"
    )
    print("| step | median ms |")
    print("|---|---|")
    print(f"| update: snapshot + view model + widgets | {result['update_ms']:.2f} |")
    print(f"| update + frame (changed regions) | {result['frame_ms']:.2f} |")
    print(f"| update + cold frame (no line reused) | {result['full_ms']:.2f} |")
    print(f"| update, slowest | {result['update_max_ms']:.2f} |")
    print(
        f"| the frame steps with nothing changed (event-loop overhead) | {result['idle_ms']:.2f} |"
    )
    print(f"| state classification (feed thread, every 5 s; not a redraw) | {classify_ms:.1f} |")


if __name__ == "__main__":
    main()
