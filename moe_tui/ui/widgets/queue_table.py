"""QueueTable: one window of the run queue as a keyed table (row key = item id), updated in place.

A queue of months holds 100,000 items; the table holds one page of `WINDOW` of them (far more than
a terminal shows), read from the store by the control client (`ControlClient.queue_window`), never
the whole queue. When the cursor walks past the window's edge (arrows, j/k, page keys, home/end)
or the mouse wheel scrolls past it, the table asks its screen for the page there
(`WindowWanted`) and puts the cursor on the item it walked to once that page has arrived, so a
queue event or a cursor step costs the same at 100 items as at 100,000. The subtitle says which
items are on screen ("rows 1-38 of 10,035"). A status or progress tick that changes neither the
page nor the current item touches nothing.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.message import Message

from moe_tui.control import QueueRow, QueueWindow
from moe_tui.control.api import QUEUE_PAGE
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
    ("job", "Job", 22),
    ("note", "Note", None),
)
WINDOW = QUEUE_PAGE  # rows in the table at once (a tall terminal shows about 60)

# 80 columns: what an item is and how it went; the item id, spec, tries and run show at 120.
NARROW_COLUMNS = {"n": 3, "profile": 22, "conc": 4, "rep": 3, "state": 11, "note": 19}  # 74 with cell padding
# The Job column (an executor's batch job: id, Slurm state, node) shows only while the page has
# one: at 120 in place of the spec; at 80 it takes room from the profile and the note (78 in all).
WIDE_JOB_COLUMNS = tuple(key for key, _, _ in COLUMNS if key != "spec")
NARROW_JOB_COLUMNS = {"n": 3, "profile": 15, "conc": 4, "rep": 3, "state": 11, "job": 17, "note": 11}
# Slurm's words, k9s's colours: working, waiting, ended well, lost (retried) or failed.
JOB_STATE_STYLES = {"RUNNING": "bold cyan", "COMPLETING": "cyan", "PENDING": "yellow", "SUBMITTING": "yellow",
                    "CONFIGURING": "yellow", "COMPLETED": "green", "CANCELLED": "dim", "GONE": "dim"}


def job_text(row: QueueRow) -> Text:
    """The item's batch job: its id, Slurm's state for it, its node (the node is cut first)."""
    if not row.job_id:
        return Text("—", style="dim")
    # The blank before the node is a span of its own: an SVG renderer drops a span's leading blank
    # (screenshots read "RUNNINGnode1").
    return Text.assemble(row.job_id, " ", (row.job_state, JOB_STATE_STYLES.get(row.job_state, "bold red")),
                         " " if row.job_node else "", (row.job_node, "dim"), no_wrap=True, overflow="ellipsis")


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
        job_text(row),
        Text(row.error, style="red") if row.error else Text(row.campaign, style="dim"),
    )


class QueueTable(KeyedTable):
    BINDINGS = [  # the keys of NAVIGATION, over the whole queue rather than the window shown
        Binding("home,g", "scroll_top", "First", show=False),
        Binding("end,G", "scroll_bottom", "Last", show=False),
    ]

    class WindowWanted(Message):
        """The page of the queue starting at `offset` is wanted (the cursor or the wheel left the window)."""

        def __init__(self, offset: int) -> None:
            super().__init__()
            self.offset = offset

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(COLUMNS, zebra_stripes=True, middle_cut={"profile"}, **kwargs)
        self._window = QueueWindow()
        self._current: int | None = None
        self._target: int | None = None  # where the cursor goes once the page holding it arrives
        self._keep_view: tuple[int, float] | None = None  # (window start, scroll) before a wheel shift
        self._narrow = False
        self._fit_columns()  # no Job column until a page has a batch job

    def set_narrow(self, narrow: bool) -> None:
        self._narrow = narrow
        self._fit_columns()

    def _fit_columns(self) -> None:
        jobs = any(r.job_id for r in self._window.rows)
        if self._narrow:
            self.show_columns(NARROW_JOB_COLUMNS if jobs else NARROW_COLUMNS)
        else:
            self.show_columns(WIDE_JOB_COLUMNS if jobs else tuple(k for k, _, _ in COLUMNS if k != "job"))

    @property
    def window_start(self) -> int:
        """Where the window starts in the (filtered) queue."""
        return self._window.offset

    @property
    def total(self) -> int:
        return self._window.total

    def show(self, window: QueueWindow, current: int | None) -> bool:
        """Show this page of the queue; False when nothing changed (a status or progress tick)."""
        if window is self._window and current == self._current:
            return False
        before = self._window.offset
        self._window, self._current = window, current
        self._fit_columns()
        self.sync({str(r.id): queue_cells(n, r, current)
                   for n, r in enumerate(window.rows, start=window.offset + 1)})
        target, self._target = self._target, None
        keep, self._keep_view = self._keep_view, None
        if target is not None:
            self._go(target)
        elif keep is not None and keep[0] == before:  # the wheel moved the window: the items on screen stay
            self.scroll_to(y=max(0, keep[1] - (window.offset - before)), animate=False, immediate=True)
        self._say_where()
        return True

    def _say_where(self) -> None:
        total = self._window.total
        first = self._window.offset + min(int(self.scroll_y), max(0, self.row_count - 1)) + 1
        last = min(self._window.offset + self.row_count, first + max(1, self.scrollable_content_region.height - 1) - 1)
        matching = " matching the filter" if self._window.words else ""
        if not total:
            subtitle = "nothing matches the filter" if matching else ""
        elif matching or first > 1 or last < total:
            subtitle = f"rows {first:,}-{last:,} of {total:,}{matching}"
        else:
            subtitle = ""  # the whole queue is on screen
        titles(self, subtitle=subtitle)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self._say_where()

    def on_resize(self) -> None:
        self._say_where()

    def _go(self, position: int) -> None:
        """Put the cursor on the item at `position` in the (filtered) queue: at once when it is in
        the window, else once the page around it has arrived."""
        total = self._window.total
        if not total:
            return
        position = max(0, min(position, total - 1))
        row = position - self._window.offset
        if 0 <= row < self.row_count:
            self.cursor_coordinate = Coordinate(row, self.cursor_coordinate.column)
            return
        self._target = position
        self.post_message(self.WindowWanted(max(0, min(position - WINDOW // 2, total - WINDOW))))

    def _past_edge(self, step: int) -> bool:
        """A cursor step of `step` rows that leaves the window (or follows one still on its way):
        the cursor goes to that item in the whole queue. False: an ordinary step inside the table."""
        if self._target is None and 0 <= self.cursor_row + step < self.row_count:
            return False
        here = self._target if self._target is not None else self._window.offset + self.cursor_row
        self._go(here + step)
        return True

    def _shift_window(self, delta: int) -> bool:
        """Move the window by `delta` items, keeping the items on screen where they are (the view
        scrolls back by what the window moved on, once it arrived). False at either end of the queue."""
        start = max(0, min(self._window.offset + delta, self._window.total - WINDOW))
        if start == self._window.offset:
            return False
        self._keep_view = (self._window.offset, self.scroll_y)
        self.post_message(self.WindowWanted(start))
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
        self._go(self._window.total - 1)

    def action_scroll_top(self) -> None:
        self._go(0)

    @property
    def highlighted_item(self) -> int | None:
        key = self.highlighted_key
        return int(key) if key is not None else None
