"""An in-process controller driven through its public calls only (`start`, `wait_idle`): worked until its
queue is empty, with a callback on every tick while it works (benches/runner_memory.py's snapshots)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from moe_tui.run.controller import Controller


async def work_until_empty(controller: Controller, on_tick: Callable[[], None] | None = None, *,
                           interval_s: float = 0.2, before: Callable[[], None] | None = None) -> None:
    """Start `controller` on its queue until it is empty; `before()` once it is started, then
    `on_tick()` every `interval_s` until the worker is idle."""
    await controller.start(until_empty=True)
    if before is not None:
        before()
    idle = asyncio.ensure_future(controller.wait_idle())
    while not idle.done():
        await asyncio.wait({idle}, timeout=interval_s)
        if on_tick is not None:
            on_tick()
    await idle
