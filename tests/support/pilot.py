"""The App in a pilot: waiting until it has settled, reading its widgets as text, posting core events,
opening the queue and compare screens (the pilot tests under tests/ui), and timing a key as a user
feels it (benches/tui_overhead.py, benches/scale.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from textual.widgets import DataTable, Static

from moe_tui.ui.messages import CoreEventArrived
from moe_tui.ui.screens.compare import CompareScreen
from moe_tui.ui.screens.queue import QueueScreen
from tests.ui.waiting import live_flushed, workers_finished


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
    """Let workers finish and the coalesced repaint run."""
    await pilot.pause(seconds)
    await workers_finished(app)
    await live_flushed(app)
    await pilot.pause(0.05)  # the flush's own refreshes reach the screen


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


async def open_compare(pilot: Any, app: Any) -> CompareScreen:
    await settle(pilot, app)
    await pilot.press("3")
    await settle(pilot, app, 0.2)
    await settle(pilot, app)
    assert isinstance(app.screen, CompareScreen)
    return app.screen
