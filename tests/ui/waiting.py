"""Waiting for the App's background work in pilot tests.

Textual's ``WorkerManager.wait_for_complete`` raises ``WorkerCancelled`` when any worker it waits
on was cancelled; an exclusive group (the add form's server-start count) cancels its older worker
whenever a newer one starts, which is the App working as meant, so a settle must not fail on it.
"""

from __future__ import annotations

import asyncio

from textual.app import App
from textual.pilot import Pilot
from textual.worker import WorkerCancelled, WorkerFailed, WorkerState

from moe_tui.ui.screens.compare import CompareScreen

_UNFINISHED = (WorkerState.PENDING, WorkerState.RUNNING)
_POLL_S = 0.02


async def workers_finished(app: App[object]) -> None:
    """Wait until no worker of ``app`` is pending or running, including workers that finished
    workers started (a done callback may start another); a cancelled one counts as finished, a
    failed one is left to the App's own error handling (it notifies)."""
    while True:
        unfinished = [w for w in app.workers if w.state in _UNFINISHED]
        if not unfinished:
            return
        for worker in unfinished:
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


async def workers_settled(pilot: Pilot[object]) -> None:
    """Workers finished, a pause for what their results post, and any workers those started finished: a
    screen that loads its data in a worker (Compare) and re-reads once it has painted."""
    await workers_finished(pilot.app)
    await pilot.pause(0.05)
    await workers_finished(pilot.app)
    await pilot.pause(0.05)


async def compare_opened(pilot: Pilot[object]) -> CompareScreen:
    """Key 3 from a settled App, then settled again: the Compare screen with its first grid read."""
    await workers_settled(pilot)
    await pilot.press("3")
    await workers_settled(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, CompareScreen), screen
    return screen
