"""The Queue screen on a queue of months (issue 26): the table holds a window of the items, the
cursor walks past the window's edge into the rest, a reload keeps the highlighted item, and a
status tick that changes neither the rows nor the current item touches no row; the mouse wheel and
the page keys move the window; a queue change is painted while another screen is shown. Speed is benched
(benches/scale.py), not timed here."""

from __future__ import annotations

from dataclasses import replace

from textual import events
from textual.widgets import DataTable

from moe_tui.control import QueueRow
from moe_tui.events import ControllerStatus, QueueChanged
from moe_tui.ui.screens.dashboard import DashboardScreen
from moe_tui.ui.widgets.queue_table import WINDOW, QueueTable
from tests.support.pilot import SIZE, emit, open_queue, press, settle
from tests.ui.fakes import FP_A
from tests.ui.test_screens_built_once import prepared

N = WINDOW * 5 + 7


def big_queue(n: int = N) -> tuple[QueueRow, ...]:
    return tuple(QueueRow(i, float(i), f"profile-{i % 3}", 2 ** (i % 8), i % 5, FP_A,
                          "done" if i < n // 2 else "pending", attempts=1, campaign="months")
                 for i in range(1, n + 1))


def _key(table: DataTable) -> str:
    return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value


async def test_a_long_queue_is_shown_as_a_window_the_cursor_walks_through(make_app):
    app, adapter = make_app()
    adapter.queue = big_queue()
    async with app.run_test(size=SIZE) as pilot:
        table = await open_queue(pilot, app)
        assert isinstance(table, QueueTable)
        assert table.row_count == WINDOW
        assert f"of {N:,}" in str(table.border_subtitle)
        table.move_cursor(row=WINDOW - 1)
        await settle(pilot, app)
        assert _key(table) == str(WINDOW)
        await press(pilot, app, "down")  # past the window's last row: the window moves on
        assert _key(table) == str(WINDOW + 1) and table.row_count == WINDOW
        await press(pilot, app, "ctrl+end")
        assert _key(table) == str(N)
        assert str(table.border_subtitle).endswith(f"-{N:,} of {N:,}")  # the rows on screen, the last among them
        await press(pilot, app, "ctrl+home", "up")  # nothing above the first item
        assert _key(table) == "1"


async def test_a_reload_keeps_the_highlighted_item_and_a_tick_touches_no_row(make_app):
    app, adapter = make_app()
    adapter.queue = big_queue()
    async with app.run_test(size=SIZE) as pilot:
        table = await open_queue(pilot, app)
        await press(pilot, app, "ctrl+end")
        # The first item is deleted: every row moves up one; the cursor stays on the last item.
        adapter.queue = adapter.queue[1:]
        await emit(pilot, app, QueueChanged(reason="item 1 deleted"))
        assert _key(table) == str(N) and table.row_count == WINDOW

        synced: list[int] = []
        real_sync = table.sync
        table.sync = lambda rows: (synced.append(len(rows)), real_sync(rows))  # type: ignore[method-assign]
        await emit(pilot, app, ControllerStatus(activity="benchmarking", detail="1 of 9",
                                                queue_item_id=app.live.current_item))
        assert synced == []  # nothing the table shows changed
        adapter.queue = tuple(replace(r, state="running") if r.id == N else r for r in adapter.queue)
        await emit(pilot, app, QueueChanged(reason=f"item {N} running"))
        assert synced == [WINDOW] and "running" in str(table.get_row(str(N)))


async def test_the_control_room_says_when_the_store_has_grown(make_app):
    app, adapter = make_app()
    loaded = adapter.snapshot
    adapter.snapshot = lambda: replace(loaded(), notices=("the store is 31.0 GB (past 20 GB): [b]see[/b]",))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert any("31.0 GB" in n.message and "[b]see[/b]" in n.message for n in app._notifications)


def _wheel(table: QueueTable, down: bool) -> None:
    cls = events.MouseScrollDown if down else events.MouseScrollUp
    table.post_message(cls(table, 5, 5, 0, 1 if down else -1, 0, False, False, False))


def _window(table: QueueTable) -> tuple[int, int]:
    keys = [int(k) for k in table.row_keys_in_order]
    return keys[0], keys[-1]


async def test_the_mouse_wheel_moves_the_window_past_its_last_and_first_rows(make_app):
    app, adapter = make_app()
    adapter.queue = big_queue()
    async with app.run_test(size=SIZE) as pilot:
        table = await open_queue(pilot, app)
        assert _window(table) == (1, WINDOW)
        for _ in range(3 * WINDOW):  # wheel down until the view is at the window's last rows and on
            _wheel(table, down=True)
            await pilot.pause()
            if _window(table)[0] > 1:
                break
        await settle(pilot, app)
        first, last = _window(table)
        assert first == WINDOW // 2 + 1 and last == first + WINDOW - 1 and table.row_count == WINDOW
        # The items on screen stayed on screen: the view is no longer at the window's bottom.
        assert table.scroll_y < table.max_scroll_y
        assert str(table.border_subtitle).startswith(f"rows {first + int(table.scroll_y):,}-")
        for _ in range(3 * WINDOW):  # and back up, past the window's first row
            _wheel(table, down=False)
            await pilot.pause()
            if _window(table)[0] == 1 and table.scroll_y == 0:
                break
        await settle(pilot, app)
        assert _window(table) == (1, WINDOW)


async def test_page_down_and_up_move_the_window(make_app):
    app, adapter = make_app()
    adapter.queue = big_queue()
    async with app.run_test(size=SIZE) as pilot:
        table = await open_queue(pilot, app)
        for _ in range(WINDOW):  # pages until the cursor leaves the first window
            await pilot.press("pagedown")
            if _window(table)[0] > 1:
                break
        await settle(pilot, app)
        assert _window(table)[0] > 1 and int(_key(table)) > WINDOW
        for _ in range(WINDOW):
            await pilot.press("pageup")
            if _window(table)[0] == 1 and _key(table) == "1":
                break
        await settle(pilot, app)
        assert _window(table) == (1, WINDOW) and _key(table) == "1"


async def test_a_queue_change_while_another_screen_is_shown_is_painted_off_screen(make_app):
    app, adapter = make_app(build_ahead=True)
    adapter.queue = big_queue()
    async with app.run_test(size=SIZE) as pilot:
        await prepared(pilot, app)
        hidden = app._screen_stacks["queue"][0]
        table = hidden.query_one(QueueTable)
        assert table.row_count == WINDOW  # filled before the first visit
        adapter.queue = tuple(replace(r, state="failed", error="boom") if r.id == 1 else r for r in adapter.queue)
        await emit(pilot, app, QueueChanged(reason="item 1 failed"))
        assert isinstance(app.screen, DashboardScreen)  # still on the dashboard
        assert "failed" in str(table.get_row("1"))
