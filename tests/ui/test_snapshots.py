"""Snapshot tests (pytest-textual-snapshot): every screen at 120x40 with fixed data, a frozen
clock and injected events, so the SVG only changes when the UI does. Baselines live in
tests/ui/__snapshots__/; update with --snapshot-update only after looking at them."""

from __future__ import annotations

from moe_tui.events import BenchProgress, ControllerStatus, RunStarted, ServerLogLine, ServerMetrics
from moe_tui.ui.app import MoeTuiApp
from tests.ui.fakes import FP_A, T0, RecordingAdapter, gpu_snapshot

SIZE = (120, 40)


def build_app() -> MoeTuiApp:
    return MoeTuiApp(RecordingAdapter(), clock=lambda: T0, subtitle="snapshot")


async def feed(pilot) -> None:
    """Three minutes of GPU history, a live run at concurrency 10 and some server log lines."""
    app = pilot.app
    await app.workers.wait_for_complete()
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
    await pilot.pause(0.3)


async def settle(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause(0.3)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause(0.2)


def test_dashboard(snap_compare):
    assert snap_compare(build_app(), terminal_size=SIZE, run_before=feed)


def test_dashboard_80x24(snap_compare):
    assert snap_compare(build_app(), terminal_size=(80, 24), run_before=feed)


def test_queue(snap_compare):
    async def run_before(pilot):
        await feed(pilot)
        await pilot.press("2")
        await settle(pilot)

    assert snap_compare(build_app(), terminal_size=SIZE, run_before=run_before)


def test_add_campaign_form(snap_compare):
    async def run_before(pilot):
        await pilot.press("2")
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)

    assert snap_compare(build_app(), terminal_size=SIZE, run_before=run_before)


def test_compare(snap_compare):
    async def run_before(pilot):
        await pilot.press("3")
        await settle(pilot)
        await settle(pilot)

    assert snap_compare(build_app(), terminal_size=SIZE, run_before=run_before)


def test_log_viewer(snap_compare):
    async def run_before(pilot):
        await feed(pilot)
        pilot.app.screen.query_one("#server-table").focus()
        await pilot.press("l")
        await settle(pilot)

    assert snap_compare(build_app(), terminal_size=SIZE, run_before=run_before)


def test_run_detail(snap_compare):
    async def run_before(pilot):
        await feed(pilot)
        await pilot.press("o")
        await settle(pilot)

    assert snap_compare(build_app(), terminal_size=SIZE, run_before=run_before)


def test_help(snap_compare):
    async def run_before(pilot):
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)

    assert snap_compare(build_app(), terminal_size=SIZE, run_before=run_before)
