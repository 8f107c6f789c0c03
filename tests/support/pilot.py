"""The App in a pilot: waiting until it has settled, pressing keys and waiting for their answer,
reading its widgets as text, posting core events, opening the queue, compare, add-campaign and server-log screens
(the pilot tests under tests/ui), and timing a key as a user feels it (benches/tui_overhead.py,
benches/scale.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

from textual.screen import Screen
from textual.widgets import DataTable, Static

from moe_tui.ui.messages import CoreEventArrived
from moe_tui.ui.screens.add_campaign import AddCampaignScreen
from moe_tui.ui.screens.compare import CompareScreen
from moe_tui.ui.screens.log_viewer import LogScreen
from moe_tui.ui.screens.queue import QueueScreen
from moe_tui.ui.widgets.server_panel import ServerPanel
from tests.ui.waiting import live_flushed, workers_busy, workers_finished

S = TypeVar("S", bound=Screen[Any])


async def key_to_screen(app: Any, key: str, shown: Callable[[], object], *, poll_s: float = 0.0005) -> float:
    """ms from `key`, posted as a terminal driver delivers it, until `shown()` holds and that screen
    has been painted. (Not through `Pilot.press`: it waits until the whole App goes idle, which a
    live feed never lets it do, and it counted background workers, a grid built in a thread, as
    key latency.)"""
    from textual import events

    t0 = time.perf_counter()
    app.post_message(events.Key(key, key))
    while not shown():
        await asyncio.sleep(poll_s)
    painted = asyncio.get_running_loop().create_future()
    app.screen.call_after_refresh(lambda: painted.done() or painted.set_result(None))
    await painted
    return (time.perf_counter() - t0) * 1000.0


SIZE = (120, 40)


async def settle(pilot: Any, app: Any, seconds: float = 0.0) -> None:
    """Let workers finish, the coalesced repaint run, and the workers their answers started finish too
    (a screen that loads its data in a worker and reads again once painted: Compare)."""
    await pilot.pause(seconds)
    while True:
        await workers_finished(app)
        await live_flushed(app)
        await pilot.pause(0.05)  # the flush's own refreshes reach the screen, workers' answers are handled
        if not workers_busy(app):
            return


async def press(pilot: Any, app: Any, *keys: str) -> None:
    """`keys` pressed as one burst, then the App's answer to them settled."""
    await pilot.press(*keys)
    await settle(pilot, app)


async def press_to(pilot: Any, app: Any, kind: type[S], *keys: str) -> S:
    """`keys` pressed and settled; the screen they lead to, checked to be a `kind`."""
    await press(pilot, app, *keys)
    screen = app.screen
    assert isinstance(screen, kind), screen
    return screen


def plain(widget: Static) -> str:
    return str(widget.render())


def table_text(table: DataTable) -> str:
    return "\n".join(" ".join(str(c) for c in table.get_row_at(i)) for i in range(table.row_count))


async def emit(pilot: Any, app: Any, *events: Any) -> None:
    for event in events:
        app.post_message(CoreEventArrived(event))
    await settle(pilot, app)


async def open_queue(pilot: Any, app: Any) -> DataTable:
    await settle(pilot, app)
    await pilot.press("2")
    await settle(pilot, app)
    assert isinstance(app.screen, QueueScreen)
    table = app.screen.query_one("#queue-table", DataTable)
    table.focus()
    return table


async def open_add_form(pilot: Any, app: Any) -> AddCampaignScreen:
    """The queue screen, then `a`: the add-campaign form."""
    await open_queue(pilot, app)
    return await press_to(pilot, app, AddCampaignScreen, "a")


async def open_server_log(pilot: Any, app: Any) -> LogScreen:
    """The dashboard's server table focused, then `l`: the log of the server under its cursor."""
    app.screen.query_one(ServerPanel).query_one(DataTable).focus()
    return await press_to(pilot, app, LogScreen, "l")


async def open_compare(pilot: Any, app: Any) -> CompareScreen:
    await settle(pilot, app)
    await pilot.press("3")
    await settle(pilot, app, 0.2)
    await settle(pilot, app)
    assert isinstance(app.screen, CompareScreen)
    return app.screen
