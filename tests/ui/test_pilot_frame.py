"""Pilot tests of the frame around the screens: the log viewer, help, the palette, the key map from
the config, quitting with servers running, and narrow and resized terminals."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, RichLog, Static

from moe_tui.events import (
    ServerLogLine,
)
from moe_tui.ui.screens.help import HelpScreen
from moe_tui.ui.screens.log_viewer import LogScreen
from moe_tui.ui.screens.queue import QueueScreen
from moe_tui.ui.screens.quit import QuitScreen
from moe_tui.ui.widgets.bench_panel import BenchPanel
from moe_tui.ui.widgets.gpu_panel import GpuPanel
from moe_tui.ui.widgets.server_panel import ServerPanel
from tests.support.pilot import SIZE, emit, open_queue, open_server_log, plain, press, press_to, settle, table_text
from tests.ui.fakes import gpu_snapshot, telemetry_message


# -- logs, help, palette, keymap, quit --------------------------------------------------------
async def test_log_viewer_follow_and_search(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        screen = await open_server_log(pilot, app)
        assert screen.profile == "sim-flashinfer-cutlass"
        log = screen.query_one(RichLog)
        assert len(log.lines) == 6
        await emit(pilot, app, ServerLogLine(profile="sim-flashinfer-cutlass", line="Decode batch. #running-req: 3"))
        assert len(log.lines) == 7
        await pilot.press("f")
        assert screen.follow is False and "paused" in plain(screen.query_one("#log-status", Static))
        await pilot.press("slash")
        await press(pilot, app, *"ERROR", "enter")
        assert screen.term == "ERROR" and len(log.lines) == 1
        await pilot.press("escape")
        assert not isinstance(app.screen, LogScreen)


async def test_help_lists_the_current_screens_keys_with_ids(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await open_queue(pilot, app)
        await press_to(pilot, app, HelpScreen, "question_mark")
        text = table_text(app.screen.query_one(DataTable))
        assert "queue.add" in text and "queue.move_up" in text and "app.quit" in text
        assert "server.start" not in text  # a dashboard key, not this screen's
        await pilot.press("escape")
        assert isinstance(app.screen, QueueScreen)


async def test_palette_verbs_follow_state_and_call_the_app(make_app):
    from moe_tui.ui.palette import palette_verbs

    app, adapter = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        verbs = {text: cb for text, cb, _ in palette_verbs(app)}
        assert "server: start sim-flashinfer-cutedsl" in verbs
        assert "server: stop sim-flashinfer-cutlass" in verbs
        assert "queue: pause" in verbs and "queue: resume" not in verbs
        assert {"export: markdown", "export: csv"} <= set(verbs)
        verbs["server: start sim-flashinfer-cutedsl"]()
        await settle(pilot, app)
        assert adapter.calls == [("start_server", "sim-flashinfer-cutedsl")]


async def test_palette_search_runs_a_verb(make_app):
    app, adapter = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await press(pilot, app, "ctrl+p")
        await pilot.press(*"queue: pause")
        await pilot.pause(0.5)
        await press(pilot, app, "enter")
        assert ("pause",) in adapter.calls


async def test_keys_remap_from_config(make_app, tmp_path):
    from moe_tui import paths
    from moe_tui.ui.keymap import load_keymap

    config = paths.config_file()
    config.write_text('[keys]\n"queue.pause" = "P"\n"queue.pasue" = "z"\n"app.help" = 3\n')
    keymap, problems = load_keymap(config)
    assert keymap == {"queue.pause": "P"}
    assert any("'queue.pasue'" in p and "did you mean 'queue.pause'" in p for p in problems)
    assert any("'app.help'" in p for p in problems)
    app, adapter = make_app(keymap=keymap)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await press(pilot, app, "p")
        assert adapter.calls == []
        await press(pilot, app, "P")
        assert adapter.calls == [("pause",)]


async def test_quit_asks_about_running_servers(make_app):
    app, adapter = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await press_to(pilot, app, QuitScreen, "q")
        await press(pilot, app, "l")  # an in-process controller cannot leave servers to a runner
        assert isinstance(app.screen, QuitScreen) and adapter.calls == []
        await press(pilot, app, "escape")
        assert not isinstance(app.screen, QuitScreen)
        await press(pilot, app, "q")
        await press(pilot, app, "s")
        assert adapter.calls == [("shutdown", True)]


async def test_narrow_terminal_still_renders_everything(make_app):
    app, _ = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(telemetry_message(gpu_snapshot()))
        await settle(pilot, app)
        assert app.screen.query_one(GpuPanel).query_one(DataTable).row_count == 8
        for key in ("2", "3", "1"):
            await press(pilot, app, key)


@pytest.mark.parametrize("size, compact, start", [((80, 24), True, None), ((120, 40), False, None),
                                                  ((80, 24), True, (120, 40))],
                         ids=["80x24", "120x40", "resized-to-80x24"])
async def test_dashboard_fits_without_scrolling(make_app, size, compact, start):
    """At 80x24 (compact) and 120x40 (full) every dashboard panel, the eight GPU rows and the queue
    line are on screen; nothing important is scrolled away."""
    from moe_tui.ui.widgets.queue_summary import QueueSummary

    app, _ = make_app()
    async with app.run_test(size=start or size) as pilot:
        app.post_message(telemetry_message(gpu_snapshot()))
        await settle(pilot, app)
        if start:
            await pilot.resize_terminal(*size)
            await settle(pilot, app)
        screen = app.screen
        gpu_table = screen.query_one(GpuPanel).query_one(DataTable)
        assert gpu_table.row_count == 8
        assert len(gpu_table.columns) == (7 if compact else 11)
        assert len(screen.query_one(ServerPanel).query_one(DataTable).columns) == (4 if compact else 7)
        assert screen.query_one("#server-log-tail").display is not compact
        height = size[1]
        for widget in (gpu_table, screen.query_one(ServerPanel), screen.query_one(BenchPanel),
                       screen.query_one(QueueSummary)):
            region = widget.region
            assert region.height > 0 and region.y >= 1 and region.bottom <= height - 1, (widget, region)
            assert region.right <= size[0], (widget, region)
        assert gpu_table.region.height >= 9  # the header and all eight GPUs, no inner scrolling
        assert screen.query_one("#dashboard-body").max_scroll_y == 0
