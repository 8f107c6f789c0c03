"""Waiting for the App's background work in pilot tests, and for a condition the App reaches on a
timer of its own (a debounce) or on another process's news.

Textual's ``WorkerManager.wait_for_complete`` raises ``WorkerCancelled`` when any worker it waits
on was cancelled; an exclusive group (the add form's server-start count) cancels its older worker
whenever a newer one starts, which is the App working as meant, so a settle must not fail on it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from textual.app import App
from textual.pilot import Pilot
from textual.worker import WorkerCancelled, WorkerFailed, WorkerState

_UNFINISHED = (WorkerState.PENDING, WorkerState.RUNNING)
_POLL_S = 0.02


def workers_busy(app: App[object]) -> bool:
    """Whether any worker of ``app`` is pending or running."""
    return any(w.state in _UNFINISHED for w in app.workers)


async def workers_finished(app: App[object]) -> None:
    """Wait until no worker of ``app`` is pending or running, including workers that finished
    workers started (a done callback may start another); a cancelled one counts as finished, a
    failed one is left to the App's own error handling (it notifies)."""
    while True:
        if not workers_busy(app):
            return
        for worker in [w for w in app.workers if w.state in _UNFINISHED]:
            try:
                await worker.wait()
            except (WorkerCancelled, WorkerFailed):
                pass


async def live_flushed(app: App[object]) -> None:
    """Wait until the App has painted every live topic marked so far: the coalesced repaint runs
    at most every FLUSH_INTERVAL_S, so a fixed pause after an event races it on a loaded box;
    this waits on the App's own state instead (its pending flush and its dirty topics)."""
    while getattr(app, "_flush_pending", False) or getattr(app, "_dirty", None):
        await asyncio.sleep(_POLL_S)


async def until(pilot: Pilot[object], holds: Callable[[], object], what: str, timeout_s: float = 10.0,
                poll_s: float = 0.02) -> None:
    """Poll `holds` between pauses of the App until it is true; fail naming `what` after `timeout_s`
    (a ceiling for a loaded machine, not a wait: the usual case returns at the first true poll)."""
    deadline = time.monotonic() + timeout_s
    while not holds():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await pilot.pause(poll_s)
