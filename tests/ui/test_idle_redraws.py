"""An idle control room redraws nothing (issue 23): GPU samples, /metrics scrapes and controller
status that repeat what is shown, and the 1 s clock tick, repaint no widget; a changed value
repaints. Each tick is followed by waiting for the App's own repaint pass to have run (an event set
by `_flush_dirty`), not by a wall clock. CPU itself is benched (benches/tui_overhead.py)."""

from __future__ import annotations

import asyncio
import collections

from textual.widget import Widget

from moe_tui.events import ControllerStatus, ServerMetrics
from moe_tui.ui.messages import CoreEventArrived
from tests.support.pilot import SIZE, settle
from tests.ui.fakes import gpu_snapshot, telemetry_message

PROFILE = "sim-flashinfer-cutlass"


def _feed(app, util: float) -> None:
    app.post_message(telemetry_message(gpu_snapshot(util=util)))
    app.post_message(CoreEventArrived(ServerMetrics(profile=PROFILE, healthy=True, running_requests=4,
                                                    queued_requests=0)))
    app.post_message(CoreEventArrived(ControllerStatus(activity="benchmarking",
                                                       detail="sim-flashinfer-cutlass conc 10", queue_item_id=3)))
    app._tick()


async def _ticks(pilot, app, util: float, n: int) -> None:
    flushed = asyncio.Event()
    real = app._flush_dirty

    def flush() -> None:
        real()
        flushed.set()

    app._flush_dirty = flush
    try:
        for _ in range(n):
            flushed.clear()
            _feed(app, util)
            await asyncio.wait_for(flushed.wait(), timeout=30)
            await pilot.pause()  # the screen's own update pass after the flush
    finally:
        app._flush_dirty = real


async def test_an_idle_dashboard_repaints_nothing_and_a_change_repaints(make_app, monkeypatch):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        # Fill the GPU history with one value, so the sparklines stop moving, then start counting.
        await _ticks(pilot, app, util=40.0, n=200)
        await settle(pilot, app)
        screen = app.screen
        refreshed: collections.Counter[str] = collections.Counter()
        real_refresh = Widget.refresh

        def counting(self, *args, **kwargs):
            if self.screen is screen:
                refreshed[f"{type(self).__name__}#{self.id}"] += 1
            return real_refresh(self, *args, **kwargs)

        monkeypatch.setattr(Widget, "refresh", counting)
        await _ticks(pilot, app, util=40.0, n=5)
        assert dict(refreshed) == {}
        await _ticks(pilot, app, util=55.0, n=1)  # one GPU value changed: its table repaints
        assert refreshed["KeyedTable#gpu-table"] > 0
