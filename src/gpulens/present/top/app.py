"""`gpulens top`: the live terminal view (textual).

One row per GPU (duty cycle, SM and tensor activity side by side, memory, power, SM clock,
temperature, state), the processes below; `s` cycles the sort order, `/` filters by any label
text, enter opens a GPU's detail (escape returns), `q` quits. The app renders `top_view`'s view
models of `LiveState.snapshot()` and computes nothing itself.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from gpulens.app import session
from gpulens.app.live import LiveSnapshot
from gpulens.app.top_feed import TopFeed
from gpulens.clock import SystemClock
from gpulens.config import Config
from gpulens.present.top.table import RowTable
from gpulens.present.top.view import (
    GPU_COLUMNS,
    PROCESS_COLUMNS,
    GpuDetail,
    TopView,
    build_top,
    detail_text,
    gpu_cells,
    gpu_detail,
    header_text,
    next_sort,
    process_cells,
    status_text,
)

TONE_STYLES = {"bad": "bold red", "warn": "yellow", "good": "green", "neutral": ""}
COLUMN_INDEX = {key: i for i, (key, _) in enumerate(GPU_COLUMNS)}
STATE_COLUMN = COLUMN_INDEX["state"]
FILTER_HINT = "filter: any label text (user, job, host, state…)"
BAR_STYLES_AT = {COLUMN_INDEX["sm"]: "cyan", COLUMN_INDEX["tensor"]: "green"}


class Feed(Protocol):
    """Where the app reads from (a `TopFeed`, or any fixed source in tests)."""

    def snapshot(self) -> LiveSnapshot: ...

    def notes(self) -> list[str]: ...


def _gpu_styles(view: TopView) -> list[dict[int, str]]:
    """Per GPU row: the state cell coloured by its tone, SM and tensor bars by metric."""
    return [{STATE_COLUMN: TONE_STYLES.get(row.tone, ""), **BAR_STYLES_AT} for row in view.gpus]


class FilterInput(Input):
    """The `/` filter; escape clears it and returns to the table."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Clear filter")]

    def action_cancel(self) -> None:
        self.value = ""
        app = self.app
        if isinstance(app, TopApp):
            app.close_filter()


class DetailScreen(Screen[None]):
    """Everything about one GPU; refreshed with the main view, escape returns."""

    DEFAULT_CSS = "#detail { padding: 0 1; }"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, key: str, detail: GpuDetail | None) -> None:
        super().__init__()
        self.key = key
        self._text = _detail(detail)

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self._text, id="detail")
        yield Footer()

    def show(self, detail: GpuDetail | None) -> None:
        """Redraw with `detail` (None: the GPU is no longer reported)."""
        self.query_one("#detail", Static).update(_detail(detail))


def _detail(detail: GpuDetail | None) -> Text:
    return Text(detail_text(detail) if detail is not None else "this GPU is no longer reported")


class TopApp(App[None]):
    """The live view over `feed`, re-read every `poll_s` seconds."""

    TITLE = "gpulens top"
    CSS = """
    #summary { height: auto; padding: 0 1; background: $boost; }
    RowTable { padding: 0 1; }
    #gpus { height: auto; max-height: 60%; }
    #message { height: auto; padding: 0 1; color: $warning; }
    #procs-title { height: 1; padding: 0 1; color: $text-muted; }
    #procs { height: 1fr; }
    #filter { dock: bottom; display: none; }
    #filter.open { display: block; }
    #status { height: auto; padding: 0 1; background: $boost; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("s", "cycle_sort", "Sort"),
        Binding("slash", "open_filter", "Filter"),
    ]
    MAIN_ACTIONS = frozenset({"cycle_sort", "open_filter"})

    def __init__(self, feed: Feed, poll_s: float = 1.0) -> None:
        super().__init__()
        self.feed = feed
        self.poll_s = poll_s
        self.sort = "gpu"
        self.filter_text = ""
        self.view: TopView | None = None
        self._texts: dict[str, str] = {}

    def compose(self) -> ComposeResult:
        yield Static("", id="summary")
        yield RowTable([title for _, title in GPU_COLUMNS], id="gpus")
        yield Static("", id="message")
        yield Static("processes", id="procs-title")
        yield RowTable([title for _, title in PROCESS_COLUMNS], id="procs")
        yield FilterInput(placeholder=FILTER_HINT, id="filter")
        yield Static("", id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#gpus", RowTable).focus()
        self.refresh_view()
        self.set_interval(self.poll_s, self.refresh_view)

    # -- drawing -------------------------------------------------------------------------------
    def refresh_view(self) -> None:
        """Read the feed and redraw the main view and an open detail screen."""
        snap = self.feed.snapshot()
        view = build_top(snap, self.sort, self.filter_text, self.feed.notes())
        self.show(view)
        screen = self.screen
        if isinstance(screen, DetailScreen):
            screen.show(gpu_detail(snap, screen.key))

    def show(self, view: TopView) -> None:
        """Copy `view` into the widgets."""
        self.view = view
        self._text("#summary", header_text(view.summary))
        self._text("#message", view.message or "")
        self.query_one("#message", Static).display = view.message is not None
        self.query_one("#gpus", RowTable).set_rows(
            [(row.key, gpu_cells(row)) for row in view.gpus], _gpu_styles(view)
        )
        self.query_one("#procs", RowTable).set_rows(
            [(p.key, process_cells(p)) for p in view.processes]
        )
        self._text("#status", status_text(view))

    def _text(self, selector: str, text: str) -> None:
        """Set a Static's text when it changed; lay the screen out again only when its size
        may have changed."""
        before = self._texts.get(selector)
        if text == before:
            return
        self._texts[selector] = text
        same_size = before is not None and len(before) == len(text)
        self.query_one(selector, Static).update(Text(text), layout=not same_size)

    # -- keys ----------------------------------------------------------------------------------
    def action_cycle_sort(self) -> None:
        self.sort = next_sort(self.sort)
        self.refresh_view()

    def action_open_filter(self) -> None:
        box = self.query_one("#filter", FilterInput)
        box.add_class("open")
        box.focus()

    def close_filter(self) -> None:
        self.query_one("#filter", FilterInput).remove_class("open")
        self.query_one("#gpus", RowTable).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self.refresh_view()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.close_filter()

    def on_row_table_selected(self, event: RowTable.Selected) -> None:
        key: str | None = event.key
        if event.table.id == "procs" and self.view is not None:
            key = next((p.gpu_key for p in self.view.processes if p.key == event.key), None)
        if key is not None:
            self.open_detail(key)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Sorting and filtering belong to the main screen only."""
        return not (action in self.MAIN_ACTIONS and isinstance(self.screen, DetailScreen))

    def open_detail(self, key: str) -> None:
        """Push the detail screen of the GPU with row key `key`."""
        self.push_screen(DetailScreen(key, gpu_detail(self.feed.snapshot(), key)))


def run_top(cfg: Config) -> None:
    """Watch the collectors `cfg` names until the user quits."""
    clock = SystemClock()
    collectors = session.build_collectors(cfg, clock)
    interval = float(cfg.get("collect.interval_seconds"))
    try:
        feed = TopFeed(
            collectors,
            clock,
            interval_s=interval,
            timeout_s=cfg.get("collect.timeout_seconds"),
            state_window_s=cfg.get("agent.state_window_seconds"),
            states=session.analysis_settings(cfg)["states"],
        )
    except BaseException:
        for collector in collectors:
            collector.close()
        raise
    try:
        feed.start()
        TopApp(feed, poll_s=min(1.0, interval)).run()
    finally:
        feed.close()
