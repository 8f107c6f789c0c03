"""QueueScreen: the persistent run queue, keyboard-driven.

Add a campaign (a form), move pending items up/down, retry, cancel, delete (destructive ones ask
first), open an item's run. What is allowed for the highlighted item is decided by its state and
shown greyed in the footer when not allowed.
"""

from __future__ import annotations

from collections.abc import Hashable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.timer import Timer
from textual.widgets import DataTable, Header, Input

from moe_tui.control import QueueRow
from moe_tui.ui.room import Room, room
from moe_tui.ui.screens.add_campaign import AddCampaignScreen
from moe_tui.ui.screens.base import LiveScreen, composed
from moe_tui.ui.screens.confirm import ConfirmScreen
from moe_tui.ui.widgets.filter_bar import FilterBar
from moe_tui.ui.widgets.key_bar import KeyBar
from moe_tui.ui.widgets.queue_summary import QueueSummary
from moe_tui.ui.widgets.queue_table import QueueTable

RETRYABLE = {"failed", "interrupted", "skipped", "cancelled"}
MOVE = Binding.Group("Move", compact=True)
FILTER_PAUSE_S = 0.15


class QueueScreen(LiveScreen):
    # The main table has the focus (and a visible cursor) from the start: arrows, j/k and / work at once.
    AUTO_FOCUS = "#queue-table"
    BINDINGS = [
        Binding("a", "add_campaign", "Add", id="queue.add",
                tooltip="Add profiles x concurrencies x repeats from one spec"),
        Binding("left_square_bracket", "move('up')", "Up", id="queue.move_up", key_display="[",
                tooltip="Move the pending item up", group=MOVE),
        Binding("right_square_bracket", "move('down')", "Down", id="queue.move_down", key_display="]",
                tooltip="Move the pending item down", group=MOVE),
        Binding("t", "retry", "Retry", id="queue.retry",
                tooltip="Put a failed, interrupted, skipped or cancelled item back to pending"),
        Binding("x", "cancel_item", "Cancel", id="queue.cancel", tooltip="Withdraw a pending item (asks first)"),
        Binding("delete", "delete_item", "Delete", id="queue.delete", key_display="del",
                tooltip="Remove an item that is not running (asks first)"),
        Binding("enter", "open_run", "Run", id="queue.open_run", tooltip="Open the item's run detail"),
        Binding("slash", "filter", "Filter", id="queue.filter", key_display="/",
                tooltip="Show only the items whose profile, state, campaign or note hold these words"),
    ]

    BACKGROUND_TOPICS = frozenset({"queue", "status"})
    _table: QueueTable | None = None
    _typing: Timer | None = None  # the filter's words are read once typing pauses

    @property
    def control(self) -> Room:
        return room(self.app)

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="◆")
        with Vertical(id="queue-body"):
            yield QueueSummary(id="queue-screen-summary", classes="panel")
            yield FilterBar(id="queue-filter")
            self._table = QueueTable(id="queue-table", classes="panel")
            yield self._table
        yield KeyBar()

    def on_mount(self) -> None:
        if not composed(self):
            return  # the App closed while this screen was built off screen
        self.query_one(QueueTable).border_title = "Run queue"
        self.live_update({"queue"})
        self.control.refresh_queue()

    def on_screen_resume(self) -> None:
        if self.is_current:  # not while the App prepares it in the background (not composed yet)
            self.live_update({"queue"})

    def live_update(self, topics: set[str]) -> None:
        if topics & {"layout", "queue"}:
            self.query_one(QueueTable).set_narrow(self.app.has_class("-narrow"))
        if topics & {"queue", "status", "bench"}:
            live = self.control.live
            table = self.query_one(QueueTable)
            changed = table.show(live.queue, live.current_item)
            live.queue_view.offset = table.window_start  # the store may have moved the page (the queue shrank)
            changed = self.query_one(QueueSummary).show(live) or changed
            if changed and not self.is_current:
                self.prerender_soon()

    def _want(self, offset: int | None = None) -> None:
        """Ask for the page at `offset` (None: the page shown now) with the filter and highlighted item."""
        view = self.control.live.queue_view
        if offset is not None:
            view.offset, view.around = offset, None  # the cursor walks to a position, not an item
        view.words = tuple(self.query_one(FilterBar).value.lower().split())
        self.control.refresh_queue()

    def on_queue_table_window_wanted(self, message: QueueTable.WindowWanted) -> None:
        message.stop()
        self._want(message.offset)

    def action_filter(self) -> None:
        self.query_one(FilterBar).open()

    def on_input_changed(self, event: Input.Changed) -> None:
        # The store scans every item for a filter (0.4 s of a worker's CPU at 100,000): the words
        # are asked for once typing pauses, not on every key.
        if isinstance(event.input, FilterBar):
            if self._typing is not None:
                self._typing.stop()
            self._typing = self.set_timer(FILTER_PAUSE_S, self._want)

    def on_filter_bar_done(self) -> None:
        if self._typing is not None:
            self._typing.stop()
        self.query_one(QueueTable).focus()
        self._want()

    def _item(self) -> QueueRow | None:
        # The key bar asks check_action while the screen is still composing or already going away:
        # no table then means no highlighted item, not an error.
        # (The table is kept from compose: a DOM query per binding per footer repaint cost ~5 ms each.)
        table = self._table
        return self.control.live.queue_row(table.highlighted_item) if table is not None and table.is_attached \
            else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("add_campaign", "filter"):  # no item needed (a filter that matched nothing is changed by `/`)
            return True
        item = self._item()
        if item is None:
            return None
        state = item.state
        allowed = {
            "move": state == "pending",
            "retry": state in RETRYABLE,
            "cancel_item": state == "pending",
            "delete_item": state != "running",
            "open_run": item.run_id is not None,
        }.get(action, True)
        return True if allowed else None

    def binding_state(self) -> Hashable:
        item = self._item()
        return (item.id, item.state, item.run_id) if item else None

    def on_data_table_row_highlighted(self) -> None:
        # The next read of the queue keeps this item in the page (an item deleted above it moves it up).
        self.control.live.queue_view.around = self._table.highlighted_item if self._table is not None else None
        self.maybe_refresh_bindings()

    def action_add_campaign(self) -> None:
        # The form lists the profiles: a spare built off screen for the same profiles opens at once.
        self.control.push_spare(AddCampaignScreen, tuple(self.control.live.servers))

    def action_move(self, direction: str) -> None:
        item = self._item()
        if item is not None:
            self.control.queue_command(f"move item {item.id} {direction}", self.control.client.move, item.id, direction)

    def action_retry(self) -> None:
        item = self._item()
        if item is not None:
            self.control.queue_command(f"retry item {item.id}", self.control.client.retry, item.id)

    def action_cancel_item(self) -> None:
        item = self._item()
        if item is None:
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self.control.queue_command(f"cancel item {item.id}", self.control.client.cancel, item.id)

        self.app.push_screen(ConfirmScreen(f"Cancel item {item.id} ({item.profile}, conc {item.concurrency})?",
                                           "It stays in the queue as cancelled; retry brings it back.",
                                           confirm="Cancel item"), answer)

    def action_delete_item(self) -> None:
        item = self._item()
        if item is None:
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self.control.queue_command(f"delete item {item.id}", self.control.client.delete, item.id)

        self.app.push_screen(ConfirmScreen(f"Delete item {item.id} ({item.profile}, conc {item.concurrency})?",
                                           "Its recorded runs stay in the store.", confirm="Delete"), answer)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        # The focused table takes `enter` itself (its select binding); treat a selection the same.
        event.stop()
        if self.check_action("open_run", ()):
            self.action_open_run()

    def action_open_run(self) -> None:
        item = self._item()
        if item is not None and item.run_id is not None:
            self.control.open_run(item.run_id)
