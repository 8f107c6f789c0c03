"""Snapshot tests (pytest-textual-snapshot): every screen at 120x40 and at 80x24 with fixed data, a
frozen clock and injected events, so the SVG only changes when the UI does. Baselines live in
tests/ui/__snapshots__/; update with --snapshot-update only after looking at them."""

from __future__ import annotations

import pytest

from moe_tui.events import BenchProgress, ControllerStatus, RunStarted, ServerLogLine, ServerMetrics
from moe_tui.ui.app import MoeTuiApp
from tests.support.pilot import open_server_log, press, settle
from tests.ui.fakes import FP_A, T0, RecordingAdapter, gpu_snapshot
from tests.ui.waiting import workers_finished


def build_app() -> MoeTuiApp:
    return MoeTuiApp(RecordingAdapter(), clock=lambda: T0, subtitle="snapshot")


async def feed(pilot) -> None:
    """Three minutes of GPU history, a live run at concurrency 10 and some server log lines."""
    app = pilot.app
    await workers_finished(app)
    await pilot.pause()
    for k in range(180):
        app.live.add_telemetry(gpu_snapshot(t=T0 - 180 + k, util=40.0 + (k * 7) % 50))
    app.live.apply(ServerLogLine(profile="sim-flashinfer-cutlass",
                                 line="[2025-01-01 12:00:00] Decode batch. #running-req: 10, gen throughput (token/s): 702.4"))
    app.live.apply(ServerMetrics(profile="sim-flashinfer-cutlass", healthy=True, running_requests=10, queued_requests=0))
    app.live.apply(RunStarted(run_id=3, queue_item_id=3, profile="sim-flashinfer-cutlass", fingerprint=FP_A,
                              spec_summary="random-ids in=128 out=64 ratio=1 n=40 conc=10 rate=inf seed=42"))
    for k in range(40):
        app.live.apply(BenchProgress(run_id=3, completed=k // 2, total=40, errors=0, elapsed_s=k * 0.25,
                                     output_tok_s=600.0 + (k * 37) % 200, ttft_p50_ms=41.2, ttft_p99_ms=88.0,
                                     itl_p50_ms=9.12, itl_p99_ms=19.5, in_flight=10, client_lag_ms=1.0))
    app.live.apply(ControllerStatus(activity="benchmarking", detail="#3 sim-flashinfer-cutlass conc=10",
                                    queue_item_id=3))
    app.mark_dirty("gpus", "servers", "bench", "status", "queue")
    await settle(pilot, app)


async def open_queue(pilot) -> None:
    await feed(pilot)
    await press(pilot, pilot.app, "2")


async def open_add_form(pilot) -> None:
    await press(pilot, pilot.app, "2")
    await press(pilot, pilot.app, "a")


async def open_compare(pilot) -> None:
    await press(pilot, pilot.app, "3")


async def open_log(pilot) -> None:
    await feed(pilot)
    await open_server_log(pilot, pilot.app)


async def open_run(pilot) -> None:
    await feed(pilot)
    await press(pilot, pilot.app, "o")


async def open_help(pilot) -> None:
    await settle(pilot, pilot.app)
    await press(pilot, pilot.app, "question_mark")


async def open_quit(pilot) -> None:
    await feed(pilot)
    await press(pilot, pilot.app, "q")


async def open_investigate(pilot) -> None:
    await press(pilot, pilot.app, "3")
    await press(pilot, pilot.app, "i")


class DetachableAdapter(RecordingAdapter):
    """Attached to a runner: quitting offers to leave the campaign running, with the command back."""

    can_detach = True
    attach_command = "~/src/moe-tui/.venv/bin/moe-tui demo --attach"  # the demo in its default home


SCREENS = {
    "dashboard": feed,
    "queue": open_queue,
    "add_campaign": open_add_form,
    "compare": open_compare,
    "log_viewer": open_log,
    "run_detail": open_run,
    "help": open_help,
    "quit": open_quit,
    "investigate": open_investigate,
}
SIZES = {"120x40": (120, 40), "80x24": (80, 24)}


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("screen", list(SCREENS))
def test_screen(snap_compare, screen, size, tmp_path):
    if screen == "investigate":
        adapter = investigate_adapter(tmp_path)
        app = MoeTuiApp(adapter, clock=lambda: T0, subtitle="snapshot")
    elif screen == "quit":
        app = MoeTuiApp(DetachableAdapter(), clock=lambda: T0, subtitle="snapshot")
    else:
        app = build_app()
    assert snap_compare(app, terminal_size=SIZES[size], run_before=SCREENS[screen])


def investigate_adapter(tmp_path):
    """The investigate dialog plans from a real store holding the demo runs."""
    from moe_tui.store.db import Store
    from tests.support.stores import stored_row
    from tests.ui.fakes import demo_runs
    from tests.ui.test_investigate_pilot import StoreBackedAdapter

    store = Store(tmp_path / "store.sqlite3")
    a, b = demo_runs()
    store.import_runs([stored_row(r) for r in a + b])
    return StoreBackedAdapter(store)
