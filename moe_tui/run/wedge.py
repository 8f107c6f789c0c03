"""A wedged server: one that still answers `/health` but serves no token. The client cuts each
silent request after its stall timeout, one after the other, so a hung server cost an item a stall
timeout per request (566 s at 120 s in issue 36) and was never restarted, since its health held.

`WedgeWatch` follows the benchmark's progress: when no output token arrived and no request
completed for the stall timeout while requests are in flight (every one of them would be cut by
the client at that moment anyway), the server is wedged. The runner then stops the benchmark, fails
the item naming why, and stops the server, so the next item starts a fresh one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from moe_tui.events import BenchProgress


class WedgeWatch:
    """Feed it every `BenchProgress`; `saw` returns the reason once the server is wedged."""

    def __init__(self, stall_s: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        from moe_tui.bench.client import DEFAULT_STALL_TIMEOUT_S  # the client's own limit when none was asked

        self.stall_s = DEFAULT_STALL_TIMEOUT_S if stall_s is None else stall_s
        self._clock = clock
        self._last_output = clock()
        self._completed = 0
        self.reason: str | None = None

    def saw(self, progress: BenchProgress) -> str | None:
        now = self._clock()
        if progress.output_tok_s > 0 or progress.completed > self._completed:
            self._last_output = now
        self._completed = progress.completed
        silent = now - self._last_output
        if self.reason is None and progress.in_flight > 0 and silent >= self.stall_s:
            self.reason = (f"server wedged: no output token for {silent:.0f} s (stall timeout {self.stall_s:g} s) "
                           f"with {progress.in_flight} request(s) in flight, though /health answers; "
                           f"the server is restarted for the next item")
        return self.reason
