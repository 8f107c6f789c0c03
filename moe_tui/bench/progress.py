"""What a benchmark says while it runs: the progress callback's type and the one way to call it.

Apart from the engine (aiohttp, numpy) so that the runner's side of a client process
(`moe_tui.bench.process`), which only relays progress, imports neither (~0.25 s of CPU a runner).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from moe_tui.events import BenchProgress

ProgressCallback = Callable[[BenchProgress], Awaitable[None] | None]


async def emit(callback: ProgressCallback | None, event: BenchProgress) -> None:
    """Give `event` to `callback` (none: nothing), awaiting it when it is a coroutine function."""
    if callback is None:
        return
    value = callback(event)
    if asyncio.iscoroutine(value):
        await value
