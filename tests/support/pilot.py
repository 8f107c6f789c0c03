"""The App in a pilot, timed as a user feels it (benches/tui_overhead.py, benches/scale.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


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
