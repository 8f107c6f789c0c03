"""Awaiting a step of a benchmark unless it is asked to stop: the step is cancelled at once.

SIGTERM or SIGINT to `moe-tui bench` sets its stop event; the timed phase reads it between
requests, but the steps before it (vocab lookup, warmup requests, cache flush, opening the
connection pool) each wait on the server and would otherwise run to their end (116 s for a
warmup request on a slow server) before the command could exit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def until_stopped(stop: asyncio.Event, step: Awaitable[T]) -> tuple[T | None, bool]:
    """(the step's result, False), or (None, True) when `stop` was set first (the step cancelled)."""
    task = asyncio.ensure_future(step)
    waiter = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if task.done():
        return task.result(), False
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return None, True
