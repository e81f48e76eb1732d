"""A light, keyed table for `gpulens top`, drawn with textual's line API.

Why not textual's DataTable: it renders every cell through Rich on each change and any cell
update invalidates the whole table, so redrawing 8 GPU rows and ~50 process rows cost ~100 ms
a second on a 2-core machine. Here a row is one pre-aligned line; a line is rendered once and
reused until its text changes, so a refresh renders only the rows whose values moved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from rich.segment import Segment
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

GAP = "  "


def column_widths(titles: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    """The width of each column: its longest cell or title."""
    widths = [len(t) for t in titles]
    for cells in rows:
        for i, cell in enumerate(cells):
            if len(cell) > widths[i]:
                widths[i] = len(cell)
    return widths


def line(cells: Sequence[str], widths: Sequence[int], styles: Mapping[int, str]) -> Text:
    """One row: cells left-aligned to `widths`, `styles` by column position."""
    text = Text(no_wrap=True, end="")
    last = len(cells) - 1
    for i, (cell, width) in enumerate(zip(cells, widths, strict=True)):
        text.append(cell if i == last else cell.ljust(width), styles.get(i) or None)
        if i != last:
            text.append(GAP)
    return text


class RowTable(ScrollView, can_focus=True):
    """Rows of text cells under a fixed header line, with a row cursor kept on the same key
    across updates; enter posts `RowTable.Selected`."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"row-table--header", "row-table--cursor"}
    DEFAULT_CSS = """
    RowTable { height: auto; }
    RowTable > .row-table--header { text-style: bold; }
    RowTable > .row-table--cursor { background: $surface-lighten-2; }
    RowTable:focus > .row-table--cursor { background: $accent 50%; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select", "Detail"),
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "move(-1000000)", "First", show=False),
        Binding("end", "move(1000000)", "Last", show=False),
    ]

    class Selected(Message):
        """Enter (or a double click) on a row."""

        def __init__(self, table: RowTable, key: str) -> None:
            super().__init__()
            self.table = table
            self.key = key

    def __init__(self, titles: Sequence[str], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.titles = tuple(titles)
        self.keys: list[str] = []
        self.cursor = 0
        self._lines: list[Text] = []
        self._header = Text()
        self._width = 0
        self._strips: dict[tuple[str, bool, int, int, int], Strip] = {}
        self._texts: dict[tuple[tuple[str, ...], tuple[tuple[int, str], ...]], Text] = {}
        self._widths: list[int] = []

    # -- content -------------------------------------------------------------------------------
    def set_rows(
        self, rows: Sequence[tuple[str, Sequence[str]]], styles: Sequence[Mapping[int, str]] = ()
    ) -> None:
        """Show `rows` (key, cells); `styles[i]` styles row i's cells by column position."""
        current = self.cursor_key
        widths = column_widths(self.titles, [cells for _, cells in rows])
        keys = [key for key, _ in rows]
        whole = widths != self._widths or keys != self.keys
        if widths != self._widths:
            self._texts.clear()
            self._widths = widths
            self._header = line(self.titles, widths, {})
        texts: dict[tuple[tuple[str, ...], tuple[tuple[int, str], ...]], Text] = {}
        before = self._lines
        self._lines = []
        for i, (_, cells) in enumerate(rows):
            style = styles[i] if i < len(styles) else {}
            key = (tuple(cells), tuple(sorted(style.items())))
            text = self._texts.get(key) or line(cells, widths, style)
            texts[key] = text
            self._lines.append(text)
        self._texts = texts
        self.keys = keys
        if current in self.keys:
            self.cursor = self.keys.index(current)
        self.cursor = max(0, min(self.cursor, len(self.keys) - 1))
        self._width = max([self._header.cell_len, *(t.cell_len for t in self._lines)])
        self.virtual_size = Size(self._width, len(self._lines) + 1)
        if whole:
            self.refresh()
            return
        top = round(self.scroll_y)
        for i, (old, new) in enumerate(zip(before, self._lines, strict=True)):
            if old is not new and 1 <= i + 1 - top < self.size.height:
                self.refresh(Region(0, i + 1 - top, self.size.width, 1))

    @property
    def cursor_key(self) -> str | None:
        """The key of the row under the cursor (None when empty)."""
        return self.keys[self.cursor] if 0 <= self.cursor < len(self.keys) else None

    # -- drawing -------------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        if y == 0:
            return self._strip(self._header, "row-table--header", scroll_x, width)
        index = scroll_y + y - 1
        if not 0 <= index < len(self._lines):
            return Strip.blank(width, self.rich_style)
        component = "row-table--cursor" if index == self.cursor else ""
        return self._strip(self._lines[index], component, scroll_x, width)

    def _strip(self, text: Text, component: str, scroll_x: int, width: int) -> Strip:
        """`text` rendered, styled, cut to the visible columns; cached until it changes."""
        key = (text.plain + "\0" + component, self.has_focus, scroll_x, width, id(text))
        strip = self._strips.get(key)
        if strip is None:
            full = max(self._width, width) + scroll_x
            strip = Strip(list(text.render(self.app.console)), text.cell_len)
            strip = strip.extend_cell_length(full).apply_style(self.rich_style)
            if component:  # over the cells' own colours (a background, a weight)
                over = self.get_component_rich_style(component)
                strip = Strip(Segment.apply_style(strip, post_style=over), strip.cell_length)
            strip = strip.crop(scroll_x, scroll_x + width).simplify()
            if len(self._strips) > 4 * (len(self._lines) + 1):
                self._strips.clear()
            self._strips[key] = strip
        return strip

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    # -- moving --------------------------------------------------------------------------------
    def move_to(self, index: int) -> None:
        """Put the cursor on row `index` (clamped) and scroll it into view."""
        if not self.keys:
            return
        self.cursor = max(0, min(index, len(self.keys) - 1))
        visible = max(1, self.size.height - 1)
        top = round(self.scroll_y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False)
        elif self.cursor >= top + visible:
            self.scroll_to(y=self.cursor - visible + 1, animate=False)
        self.refresh()

    def action_move(self, step: int) -> None:
        self.move_to(self.cursor + step)

    def action_page(self, direction: int) -> None:
        self.move_to(self.cursor + direction * max(1, self.size.height - 2))

    def action_select(self) -> None:
        if (key := self.cursor_key) is not None:
            self.post_message(self.Selected(self, key))

    def on_click(self, event: events.Click) -> None:
        if event.y < 1:
            return
        index = round(self.scroll_y) + event.y - 1
        if 0 <= index < len(self.keys):
            self.move_to(index)
            if event.chain >= 2:
                self.action_select()
