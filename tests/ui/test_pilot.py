"""Pilot tests: every screen and key action, asserting on widgets and on the adapter calls they
cause. Core events and GPU samples are injected as the messages a worker would post."""

from __future__ import annotations

import io

from textual.widgets import DataTable, Input, Select, Static

from moe_tui.events import (
    BenchProgress,
    ControllerStatus,
    Notice,
    RunFinished,
    RunStarted,
    ServerLogLine,
    ServerMetrics,
    ServerStateChanged,
)
from moe_tui.ui.messages import CoreEventArrived
from moe_tui.ui.screens.add_campaign import AddCampaignScreen
from moe_tui.ui.screens.confirm import ConfirmScreen
from moe_tui.ui.screens.queue import QueueScreen
from moe_tui.ui.screens.run_detail import RunDetailScreen
from moe_tui.ui.widgets.bench_panel import BenchPanel
from moe_tui.ui.widgets.gpu_panel import GpuPanel
from moe_tui.ui.widgets.server_panel import ServerPanel
from tests.support.pilot import SIZE, emit, open_add_form, open_compare, open_queue, plain, press, press_to, settle, table_text
from tests.ui.fakes import FP_A, gpu_snapshot, no_driver_snapshot, telemetry_message
from tests.ui.waiting import until


# -- dashboard --------------------------------------------------------------------------------
async def test_dashboard_shows_eight_gpus_from_injected_samples(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        for k in range(3):
            app.post_message(telemetry_message(gpu_snapshot(util=60.0 + k)))
        await settle(pilot, app)
        table = app.screen.query_one(GpuPanel).query_one(DataTable)
        assert table.row_count == 8
        text = table_text(table)
        assert "PWR CAP" in text  # GPU 5 reports sw_power_cap
        assert "jupyter:999" in text  # a foreign process on GPU 7
        assert "sim-fl…-cutlass" in text  # pid 4242 is the managed server (name cut in the middle)
        # Three samples posted in one burst collapse to the newest (can_replace).
        assert list(app.live.gpu_util[0]) == [62.0]


async def test_dashboard_without_driver_says_so_cleanly(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.post_message(telemetry_message(no_driver_snapshot()))
        await settle(pilot, app)
        panel = app.screen.query_one(GpuPanel)
        assert "no NVIDIA driver" in plain(panel.query_one("#gpu-unavailable", Static))
        assert not panel.query_one(DataTable).display


async def test_server_events_update_state_mismatch_and_metrics(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await emit(pilot, app,
                   ServerStateChanged(profile="sim-flashinfer-cutedsl", state="starting", phase="loading weights"),
                   ServerLogLine(profile="sim-flashinfer-cutedsl", line="Load weight end. elapsed=1.2 s"))
        table = app.screen.query_one(ServerPanel).query_one(DataTable)
        assert "loading weights" in table_text(table)
        assert "Load weight end" in plain(app.screen.query_one("#server-log-tail", Static))
        await emit(pilot, app,
                   ServerStateChanged(profile="sim-flashinfer-cutedsl", state="ready", port=31001,
                                      resolved_backend="flashinfer_cutlass", backend_mismatch=True),
                   ServerMetrics(profile="sim-flashinfer-cutedsl", healthy=True, running_requests=7,
                                 queued_requests=3))
        text = table_text(table)
        assert "MISMATCH" in text and "7/3" in text


async def test_bench_panel_follows_run_and_labels_simulated(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await emit(pilot, app,
                   RunStarted(run_id=9, queue_item_id=3, profile="sim-flashinfer-cutlass", fingerprint=FP_A,
                              spec_summary="random-ids in=128 out=64"),
                   BenchProgress(run_id=9, completed=20, total=40, errors=2, elapsed_s=3.0, output_tok_s=812.0,
                                 ttft_p50_ms=41.0, ttft_p99_ms=90.0, itl_p50_ms=9.1, itl_p99_ms=20.0,
                                 in_flight=10, client_lag_ms=120.0))
        panel = app.screen.query_one(BenchPanel)
        head = plain(panel.query_one("#bench-head", Static))
        stats = plain(panel.query_one("#bench-stats", Static))
        assert "SIMULATED" in head and FP_A[:12] in head
        assert "812" in stats and "errors 2" in stats and "client-bound" in stats
        assert "41.0/90.0" in stats


async def test_bench_panel_says_what_the_runner_does_before_its_first_run(make_app):
    """Walk 2026-12-05 finding 11: between a server start and its run the panel said "no benchmark running"
    beside the queue line's "benchmarking: #5"; it says what the runner is at (and idle again, nothing)."""
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        panel = app.screen.query_one(BenchPanel)
        await emit(pilot, app, ControllerStatus(activity="idle"))
        assert plain(panel.query_one("#bench-head", Static)) == "no benchmark running"
        await emit(pilot, app, ControllerStatus(activity="starting-server", detail="sim-flashinfer-cutlass for #5",
                                                queue_item_id=5))
        assert plain(panel.query_one("#bench-head", Static)) == "starting server: sim-flashinfer-cutlass for #5"
        await emit(pilot, app, ControllerStatus(activity="idle"))
        assert plain(panel.query_one("#bench-head", Static)) == "no benchmark running"


def test_progress_messages_collapse_to_the_newest():
    a = CoreEventArrived(BenchProgress(run_id=1, completed=1, total=9, errors=0, elapsed_s=1, output_tok_s=1))
    b = CoreEventArrived(BenchProgress(run_id=1, completed=2, total=9, errors=0, elapsed_s=2, output_tok_s=2))
    log = CoreEventArrived(ServerLogLine(profile="x", line="y"))
    assert a.can_replace(b)
    assert not log.can_replace(CoreEventArrived(ServerLogLine(profile="x", line="z")))
    assert telemetry_message(gpu_snapshot()).can_replace(telemetry_message(gpu_snapshot()))


async def test_start_and_stop_server_keys_call_the_adapter(make_app):
    app, adapter = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        table = app.screen.query_one(ServerPanel).query_one(DataTable)
        table.focus()
        table.move_cursor(row=1)  # sim-flashinfer-cutedsl: stopped
        await settle(pilot, app)
        await pilot.press("x")  # not running: disabled, nothing happens
        await press(pilot, app, "s")
        assert adapter.calls == [("start_server", "sim-flashinfer-cutedsl")]
        table.move_cursor(row=0)  # cutlass: ready
        await settle(pilot, app)
        await press_to(pilot, app, ConfirmScreen, "x")
        await press(pilot, app, "y")
        assert adapter.calls[-1] == ("stop_server", "sim-flashinfer-cutlass")


async def test_pause_resume_skip_follow_controller_state(make_app):
    app, adapter = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("r")  # not paused: resume is not offered
        await press(pilot, app, "p")
        assert adapter.calls == [("pause",)]
        await emit(pilot, app, ControllerStatus(activity="paused"))
        await pilot.press("p")  # already paused
        await press(pilot, app, "r")
        assert adapter.calls == [("pause",), ("resume",)]
        await emit(pilot, app, ControllerStatus(activity="benchmarking", queue_item_id=3))
        await press(pilot, app, "n")
        # Skipping stops a benchmark: asked first, and `n` again (or Esc) backs out, nothing sent.
        assert isinstance(app.screen, ConfirmScreen) and "Skip item 3?" in plain(app.screen.query_one("#confirm-question"))
        assert adapter.calls[-1] == ("resume",)
        await press(pilot, app, "n")
        assert not isinstance(app.screen, ConfirmScreen) and adapter.calls[-1] == ("resume",)
        await press(pilot, app, "n")
        await press(pilot, app, "y")
        assert adapter.calls[-1] == ("skip",)


async def test_adapter_failure_becomes_one_error_toast_and_changes_nothing(make_app):
    from tests.ui.fakes import RecordingAdapter

    adapter = RecordingAdapter(fail={"pause": ValueError("queue settings table is locked")})
    app, _ = make_app(adapter=adapter)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await press(pilot, app, "p")
        messages = [n.message for n in app._notifications]
        assert any("pause the queue" in m and "locked" in m for m in messages)
        assert app.live.paused is False


async def test_notice_events_become_toasts(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await emit(pilot, app, Notice(level="error", message="server 'x' failed to start: port 31000 busy"))
        assert any("port 31000 busy" in n.message for n in app._notifications)


# -- queue ------------------------------------------------------------------------------------


async def test_queue_table_is_keyed_and_updated_in_place(make_app):
    app, adapter = make_app()
    async with app.run_test(size=SIZE) as pilot:
        table = await open_queue(pilot, app)
        assert table.row_count == 16
        first_key = table.coordinate_to_cell_key((0, 0)).row_key
        from dataclasses import replace

        adapter.queue = tuple(replace(r, state="done") if r.id == 3 else r for r in adapter.queue)
        await emit(pilot, app, RunFinished(run_id=3, queue_item_id=3, profile="sim-flashinfer-cutlass",
                                           status="complete"))
        assert table.row_count == 16
        assert table.coordinate_to_cell_key((0, 0)).row_key == first_key
        assert "done" in str(table.get_row("3"))


async def test_queue_keys_move_retry_cancel_delete(make_app):
    app, adapter = make_app()
    async with app.run_test(size=SIZE) as pilot:
        table = await open_queue(pilot, app)
        table.move_cursor(row=0)  # item 1: done
        await settle(pilot, app)
        await press(pilot, app, "left_square_bracket", "t", "x")  # none applies to a done item
        assert adapter.calls == []
        table.move_cursor(row=4)  # item 5: pending
        await settle(pilot, app)
        await press(pilot, app, "left_square_bracket")
        await press(pilot, app, "right_square_bracket")
        assert adapter.calls == [("move", 5, "up"), ("move", 5, "down")]
        await press_to(pilot, app, ConfirmScreen, "x")
        await press(pilot, app, "n")  # backed out: nothing sent
        assert adapter.calls[-1] == ("move", 5, "down")
        await press(pilot, app, "x")
        await press(pilot, app, "y")
        assert adapter.calls[-1] == ("cancel", 5)
        table.move_cursor(row=5)  # item 6: failed
        await settle(pilot, app)
        await press(pilot, app, "t")
        assert adapter.calls[-1] == ("retry", 6)
        await press(pilot, app, "delete")
        await press(pilot, app, "y")
        assert adapter.calls[-1] == ("delete", 6)


async def test_queue_enter_opens_run_detail_and_h_cycles_histogram(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        table = await open_queue(pilot, app)
        table.move_cursor(row=0)  # item 1 has run 1
        await settle(pilot, app)
        await press_to(pilot, app, RunDetailScreen, "enter")
        head = plain(app.screen.query_one("#detail-head", Static))
        assert "run #1" in head and "SIMULATED" in head
        from rich.console import Console

        console = Console(width=200, record=True, file=io.StringIO())
        console.print(app.screen.query_one("#detail-roofline", Static).content)
        roofline = console.export_text()
        assert "Roofline (decode ceiling)" in roofline and "% of roofline" in roofline
        assert "distinct experts per MoE layer" in roofline and "memory" in roofline
        await pilot.press("h")
        assert app.screen.histogram == 1
        await pilot.press("escape")
        assert isinstance(app.screen, QueueScreen)


async def test_add_campaign_form_validates_and_submits(make_app):
    app, adapter = make_app()
    async with app.run_test(size=SIZE) as pilot:
        form = await open_add_form(pilot, app)
        assert form.query_one("#campaign-policy", Select).value == "grouped"
        costs = plain(form.query_one("#campaign-costs"))
        # concurrency 2 is in the sweep: it is the control, no items added for it
        assert "Queues 24 items" in costs and "conc 2 in every sweep is the control" in costs and "abba 4" in costs
        form.query_one("#campaign-concurrencies", Input).value = "1,two,64"
        await settle(pilot, app)
        await press(pilot, app, "ctrl+s")
        assert not any(c[0] == "add_campaign" for c in adapter.calls)
        assert any("concurrencies" in n.message and "'two'" in n.message for n in app._notifications)
        assert isinstance(app.screen, AddCampaignScreen)
        form.query_one("#campaign-concurrencies", Input).value = "1, 8"
        form.query_one("#spec-input_len", Input).value = "256"
        form.query_one("#campaign-policy", Select).value = "interleaved"
        await press(pilot, app, "ctrl+s")
        (call,) = [c for c in adapter.calls if c[0] == "add_campaign"]
        request = call[1]
        assert request.concurrencies == (1, 8) and request.policy == "interleaved"
        assert request.spec["input_len"] == 256 and request.repeats == 2
        assert isinstance(app.screen, QueueScreen)


# -- compare ----------------------------------------------------------------------------------


async def test_compare_grid_colours_verdicts_and_names_refused_fields(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_compare(pilot, app)
        assert screen.query_one("#compare-baseline", Select).value == "sim-flashinfer-cutedsl"
        grid = screen.query_one("#compare-grid", DataTable)
        assert grid.row_count == 24
        verdict_10 = grid.get_cell("10/output_throughput", "verdict")
        # The fake's control (concurrency 2, 3 starts a side) agrees: the verdict stands, unlabelled.
        assert verdict_10.plain == "worse" and "red" in str(verdict_10.style)
        refused = grid.get_cell("64/output_throughput", "verdict")
        assert refused.plain == "≠ input_len" and "yellow" in str(refused.style)
        assert "moe_runner_backend" in plain(screen.query_one("#compare-diff", Static))


async def test_swap_and_export_keys(make_app, tmp_path):
    app, adapter = make_app()
    adapter.export_dir = tmp_path
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_compare(pilot, app)
        await press(pilot, app, "w")
        assert screen.query_one("#compare-baseline", Select).value == "sim-flashinfer-cutlass"
        await press(pilot, app, "e")
        await press(pilot, app, "E")
        exports = [c for c in adapter.calls if c[0] == "export"]
        assert exports == [("export", "sim-flashinfer-cutlass", "sim-flashinfer-cutedsl", "markdown"),
                           ("export", "sim-flashinfer-cutlass", "sim-flashinfer-cutedsl", "csv")]
        assert any(str(tmp_path / "compare.md") in n.message for n in app._notifications)


async def test_add_form_shows_what_will_be_queued_with_control_toggle_and_baseline(make_app):
    """The form said 16 items and the core queued the control's extra repeats too; the order of the
    list chose the baseline. Now the count is the core's plan, the control is a toggle, the baseline
    a choice, and the toast names the campaign and its counts."""
    from textual.widgets import Checkbox

    app, adapter = make_app()
    async with app.run_test(size=SIZE) as pilot:
        form = await open_add_form(pilot, app)
        # a sweep without concurrency 2: the control adds it to every sweep (2 profiles x 2 repeats)
        form.query_one("#campaign-concurrencies", Input).value = "1,10,64"
        # typed values are planned once typing pauses (the form's own timer): wait on its plan, not a clock
        await until(pilot, lambda: form._preview is not None and form._preview[0].concurrencies == (1, 10, 64),
                    "the form's plan of the typed sweep")
        await settle(pilot, app)
        request, planned = form._preview  # the request the form shows and the core's plan of it
        assert planned == adapter.campaign_preview(request)
        assert planned.control_items == 4
        costs = plain(form.query_one("#campaign-costs"))
        assert f"Queues {planned.items} items" in costs and "+ 4 control runs at conc 2 (one per sweep)" in costs
        baseline = form.query_one("#campaign-baseline", Select)
        assert baseline.value == "sim-flashinfer-cutlass" and "Baseline sim-flashinfer-cutlass" in costs
        baseline.value = "sim-flashinfer-cutedsl"
        form.query_one("#campaign-control", Checkbox).value = False  # a choice, not typing: planned at once
        await settle(pilot, app)
        costs = plain(form.query_one("#campaign-costs"))
        assert f"Queues {planned.grid_items} items" in costs and "no control" in costs, costs
        await press(pilot, app, "ctrl+s")
        (call,) = [c for c in adapter.calls if c[0] == "add_campaign"]
        request = call[1]
        assert request.profiles[0] == "sim-flashinfer-cutedsl" and request.control is False
        toast = app._notifications
        assert any(n.message.startswith("added campaign 'sim-flashinfer-cutedsl vs sim-flashinfer-cutlass @ conc")
                   and f": {planned.grid_items} item(s)" in n.message for n in toast), [n.message for n in toast]
