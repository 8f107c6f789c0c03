"""LoopThread: an asyncio event loop on a daemon thread, for core code that is async.

The controller (in-process) and the runner client (attached) are asyncio; running them on their
own loop keeps server management and socket I/O off the Textual loop entirely, so a slow health
check or a stuck socket can never delay a key press. `run(coro)` blocks the calling thread (the
App calls it only from thread workers) until the coroutine finishes on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any


class LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout:.0f} s") from None

    def call(self, fn: Any, *args: Any, timeout: float | None = 30.0) -> Any:
        """Run a plain function on the loop's thread (for objects that are not thread-safe)."""

        async def wrapper() -> Any:
            return fn(*args)

        return self.run(wrapper(), timeout)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
