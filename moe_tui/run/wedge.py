"""A wedged server, told from the benchmark's live figures: `WedgeWatch`.

SGLang 0.5.23's `/health` answers 200 as soon as anything at all comes back from the scheduler
(`health_generate` in srt/entrypoints/http_server.py checks `last_receive_tstamp`), so a server
whose generate streams hang keeps passing the runner's health probe. The client frees each hung
request after the stall timeout, one after the other: at concurrency 1 an item cost its
prompt count times 120 s, and the next item reused the same wedged server.

`WedgeWatch` sees the benchmark's progress events: when a request has failed since the last one
that completed, and none completed for the stall timeout while requests were in flight, the server
is wedged. The runner then stops the benchmark (the item fails with the reason) and the server, so
the next item starts a fresh one. A long healthy request (no failure) never counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from moe_tui.events import BenchProgress


class WedgeWatch:
    """Feed it every `BenchProgress`; `reason` is set once the server looks wedged."""

    def __init__(self, stall_timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_timeout_s = stall_timeout_s
        self._clock = clock
        self._completed = -1
        self._errors = 0
        self._since = 0.0
        self._phase = ""
        self.reason: str | None = None

    def __call__(self, event: BenchProgress) -> bool:
        """True the first time the server is judged wedged."""
        if self.reason is not None:
            return False
        now = self._clock()
        if event.phase != self._phase or event.completed != self._completed:
            # a new phase (its counts restart) or a request completed: progress
            if event.phase != self._phase or event.completed > self._completed:
                self._since, self._errors = now, event.errors
            self._phase, self._completed = event.phase, event.completed
            return False
        silent = now - self._since
        if event.in_flight > 0 and event.errors > self._errors and silent >= self.stall_timeout_s:
            self.reason = (f"server wedged: no request completed for {silent:.0f} s and "
                           f"{event.errors - self._errors} failed (stall timeout {self.stall_timeout_s:g} s) "
                           "while its health check still passed")
            return True
        return False
