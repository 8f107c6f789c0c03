"""QueueTable: the run queue as a keyed table (row key = item id), updated in place.

A queue of months holds tens of thousands of items; the table holds a window of `WINDOW` of them
(far more than a terminal shows) and moves the window when the cursor walks past its edge (arrows,
page keys, home/end) or the mouse wheel scrolls past it, so a queue event or a cursor step costs the same at 100 items as at 100,000.
The subtitle says which rows are shown. A status or progress tick that changes neither the rows nor
the current item touches nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual import events
from textual.coordinate import Coordinate

from moe_tui.control import QueueRow
from moe_tui.ui import render
from moe_tui.ui.widgets.keyed_table import KeyedTable
from moe_tui.ui.widgets.repaint import titles

COLUMNS = (
    ("n", "#", 3),
    ("id", "Item", 5),
    ("profile", "Profile", 24),
    ("conc", "Conc", 5),
    ("rep", "Rep", 3),
    ("spec", "Spec", 12),
    ("state", "State", 11),
    ("tries", "Tries", 5),
    ("run", "Run", 5),
    ("note", "Note", None),
)
WINDOW = 100  # rows in the table at once (a tall terminal shows about 60)

# 80 columns: what an item is and how it went; the item id, spec, tries and run show at 120.
NARROW_COLUMNS = {"n": 3, "profile": 22, "conc": 4, "rep": 3, "state": 11, "note": 19}  # 74 with cell padding


def queue_cells(n: int, row: QueueRow, current: int | None) -> tuple[object, ...]:
    marker = Text("▶", style="bold cyan") if row.id == current else Text(str(n), style="dim")
    return (
        marker,
        str(row.id),
        row.profile,
        str(row.concurrency),
        str(row.repeat_index),
        Text(row.short_fingerprint, style="dim"),
        render.state_text(row.state),
        str(row.attempts),
        str(row.run_id) if row.run_id is not None else "—",
        Text(row.error, style="red") if row.error else Text(row.campaign, style="dim"),
    )


class QueueTable(KeyedTable):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(COLUMNS, zebra_stripes=True, middle_cut={"profile"}, **kwargs)
        self._rows: Sequence[QueueRow] = ()
        self._current: int | None = None
        self._start = 0

    def set_narrow(self, narrow: bool) -> None:
        self.show_columns(NARROW_COLUMNS if narrow else None)

    def show(self, rows: Sequence[QueueRow], current: int | None) -> bool:
        """Show `rows` (the window around the highlighted item); False when nothing changed."""
        if rows is self._rows and current == self._current:
            return False  # a status or progress tick: nothing here changed
        self._rows, self._current = rows, current
        at = self._position(self.highlighted_item)
        if at is not None and not self._start <= at < self._start + WINDOW:
            self._start = at - WINDOW // 2  # the highlighted item stays in the window
        self._sync_window()
        return True

    def _position(self, item_id: int | None) -> int | None:
        """Where the item is in the whole queue: looked for in (and around) the window first, the
        whole queue only when it moved far (a queue event must not cost a pass over every row)."""
        if item_id is None:
            return None
        near = range(max(0, self._start - WINDOW), min(len(self._rows), self._start + 2 * WINDOW))
        for i in itertools.chain(near, range(len(self._rows))):
            if self._rows[i].id == item_id:
                return i
        return None

    def _sync_window(self) -> None:
        total = len(self._rows)
        self._start = max(0, min(self._start, total - WINDOW))
        end = min(total, self._start + WINDOW)
        self.sync({str(r.id): queue_cells(n, r, self._current)
                   for n, r in enumerate(self._rows[self._start:end], start=self._start + 1)})
        titles(self, subtitle=f"rows {self._start + 1:,}-{end:,} of {total:,} (arrows past the edge for more)"
               if total > WINDOW else "")

    def _go(self, position: int) -> None:
        """Put the cursor on the item at `position` in the whole queue, moving the window there."""
        if not self._rows:
            return
        position = max(0, min(position, len(self._rows) - 1))
        if not self._start <= position < self._start + WINDOW:
            self._start = position - WINDOW // 2
            self._sync_window()
        row = position - self._start
        if 0 <= row < self.row_count:
            self.cursor_coordinate = Coordinate(row, self.cursor_coordinate.column)

    def _past_edge(self, step: int) -> bool:
        """A cursor step of `step` rows that leaves the window while the queue goes on that way:
        the window moves (and the cursor with it). False: an ordinary step inside the table."""
        if 0 <= self.cursor_row + step < self.row_count:
            return False
        more = self._start + self.row_count < len(self._rows) if step > 0 else self._start > 0
        if more:
            self._go(self._start + self.cursor_row + step)
        return more

    def _shift_window(self, delta: int) -> bool:
        """Move the window by `delta` items, keeping the items on screen where they are (the view
        scrolls back by what the window moved on). False at either end of the queue."""
        start = max(0, min(self._start + delta, len(self._rows) - WINDOW))
        moved = start - self._start
        if not moved:
            return False
        keep_y = self.scroll_y
        self._start = start
        self._sync_window()
        self.scroll_to(y=max(0, keep_y - moved), animate=False, immediate=True)
        return True

    def _on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        # The wheel at the window's last rows moves the window on (Textual would stop scrolling).
        if not (event.ctrl or event.shift) and self.scroll_y >= self.max_scroll_y \
                and self._shift_window(WINDOW // 2):
            event.prevent_default()
            event.stop()

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if not (event.ctrl or event.shift) and self.scroll_y <= 0 and self._shift_window(-(WINDOW // 2)):
            event.prevent_default()
            event.stop()

    def _page(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)

    def action_cursor_down(self) -> None:
        if not self._past_edge(1):
            super().action_cursor_down()

    def action_cursor_up(self) -> None:
        if not self._past_edge(-1):
            super().action_cursor_up()

    def action_page_down(self) -> None:
        if not self._past_edge(self._page()):
            super().action_page_down()

    def action_page_up(self) -> None:
        if not self._past_edge(-self._page()):
            super().action_page_up()

    def action_scroll_bottom(self) -> None:
        self._go(len(self._rows) - 1)

    def action_scroll_top(self) -> None:
        self._go(0)

    @property
    def highlighted_item(self) -> int | None:
        key = self.highlighted_key
        return int(key) if key is not None else None
