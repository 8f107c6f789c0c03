"""The screens a key pushes are built once and updated in place (issue 23): help, a server's log and
a grid cell's runs are one kept instance each, opened from two contexts here; what they show must
be the second context's, never the first's left over, and Escape returns to where the user was,
focus included. An answer that arrives for a screen no longer shown changes nothing.
Speed itself is benched (benches/tui_overhead.py), not timed here."""

from __future__ import annotations

import threading

from textual.screen import Screen
from textual.widgets import DataTable, Label, RichLog

from moe_tui.events import RunStarted, ServerLogLine
from moe_tui.ui.screens.cell_runs import CellRunsScreen
from moe_tui.ui.screens.compare import CompareScreen
from moe_tui.ui.screens.help import HelpScreen
from moe_tui.ui.screens.log_viewer import LogScreen
from moe_tui.ui.widgets.compare_grid import CompareGrid
from moe_tui.ui.widgets.server_panel import ServerPanel
from tests.support.pilot import SIZE, emit, open_server_log, press, press_to, settle, table_text
from tests.ui.fakes import FP_A, RecordingAdapter
from tests.ui.test_screens_built_once import prepared

CUTLASS, CUTEDSL = "sim-flashinfer-cutlass", "sim-flashinfer-cutedsl"


def log_text(screen: LogScreen) -> str:
    return "\n".join(line.text for line in screen.query_one(RichLog).lines)


async def test_help_is_one_screen_showing_the_keys_of_the_screen_it_was_opened_from(make_app):
    app, _ = make_app(build_ahead=True)
    async with app.run_test(size=SIZE) as pilot:
        await prepared(pilot, app)
        dashboard = app.screen
        focused = app.focused
        assert focused is not None
        kept = await press_to(pilot, app, HelpScreen, "question_mark")
        text = table_text(kept.query_one(DataTable))
        assert "server.start" in text and "queue.add" not in text
        assert "Dashboard" in str(kept.query_one("#help-title", Label).render())
        assert "Open the detail of the current or last run (not now)" in text
        await press(pilot, app, "escape")
        assert app.screen is dashboard and app.focused is focused

        # Opened again after the state changed (a run started): the same keys, updated in place.
        table, cleared = kept.query_one(DataTable), []
        real_clear = table.clear
        table.clear = lambda *a, **k: (cleared.append(1), real_clear(*a, **k))[1]  # type: ignore[method-assign]
        await emit(pilot, app, RunStarted(run_id=7, queue_item_id=3, profile=CUTLASS, fingerprint=FP_A,
                                          spec_summary="conc=10"))
        await press(pilot, app, "question_mark")
        assert app.screen is kept
        text = table_text(kept.query_one(DataTable))
        assert "Open the detail of the current or last run  run.open" in text and "last run (not now)" not in text
        assert cleared == []  # not refilled
        await press(pilot, app, "escape")

        await press(pilot, app, "2")
        queue, queue_focus = app.screen, app.focused
        await press(pilot, app, "question_mark")
        assert app.screen is kept  # the same instance, refilled
        text = table_text(kept.query_one(DataTable))
        assert "queue.add" in text and "server.start" not in text
        assert "Queue" in str(kept.query_one("#help-title", Label).render())
        await press(pilot, app, "question_mark")  # `?` closes it as well
        assert app.screen is queue and app.focused is queue_focus


async def test_the_log_is_one_screen_that_appends_what_came_while_closed_and_follows_the_profile(make_app):
    app, _ = make_app(build_ahead=True)
    async with app.run_test(size=SIZE) as pilot:
        await prepared(pilot, app)
        dashboard = app.screen
        servers = dashboard.query_one(ServerPanel).query_one(DataTable)
        servers.focus()
        servers.move_cursor(row=0)
        await settle(pilot, app)
        kept = await press_to(pilot, app, LogScreen, "l")
        assert kept.profile == CUTLASS
        assert f"{CUTLASS} line 0" in log_text(kept) and CUTEDSL not in log_text(kept)
        shown = kept.query_one(RichLog).lines[:]
        await press(pilot, app, "escape")
        assert app.screen is dashboard and app.focused is servers

        # A line arrives while the log is closed: opened again, it is appended to the lines shown.
        await emit(pilot, app, ServerLogLine(profile=CUTLASS, line="ERROR while closed"))
        await press(pilot, app, "l")
        assert app.screen is kept
        lines = kept.query_one(RichLog).lines
        assert lines[:len(shown)] == shown and [s.text for s in lines[len(shown):]] == ["ERROR while closed"]
        await press(pilot, app, "slash", *"closed", "enter")  # the filter works on the kept screen
        assert log_text(kept) == "ERROR while closed"
        await press(pilot, app, "escape")

        servers.move_cursor(row=1)
        await settle(pilot, app)
        await press(pilot, app, "l")
        assert app.screen is kept and kept.profile == CUTEDSL
        assert f"{CUTEDSL} line 0" in log_text(kept) and CUTLASS not in log_text(kept)
        assert kept.term == ""  # another server's log starts unfiltered
        assert CUTEDSL in str(kept.query_one("#log-status").render())
        await press(pilot, app, "escape")
        assert app.screen is dashboard and app.focused is servers


async def test_the_log_keeps_following_once_the_live_ring_is_full(make_app):
    from moe_tui.control.live import LOG_RING

    app, _ = make_app(build_ahead=True)
    async with app.run_test(size=SIZE) as pilot:
        await prepared(pilot, app)
        kept = await open_server_log(pilot, app)
        before = len(kept.query_one(RichLog).lines)
        half = LOG_RING // 2 + 10  # two bursts that fill the ring and wrap it
        for burst in range(2):
            await emit(pilot, app, *(ServerLogLine(profile=CUTLASS, line=f"open {burst * half + i}") for i in range(half)))
        await pilot.press("escape")
        await emit(pilot, app, *(ServerLogLine(profile=CUTLASS, line=f"closed {i}") for i in range(3)))
        await press(pilot, app, "l")
        texts = [s.text for s in kept.query_one(RichLog).lines]
        assert len(texts) == before + 2 * half + 3 and 2 * half > LOG_RING
        assert texts[-4:] == [f"open {2 * half - 1}", "closed 0", "closed 1", "closed 2"]


class SlowLogAdapter(RecordingAdapter):
    """Answers the first profile's log page only when told to (a late answer)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def log_lines(self, profile: str, limit: int = 2000):
        if profile == CUTLASS:
            self.release.wait(30)
        return super().log_lines(profile, limit)


async def test_a_log_page_answered_after_the_log_moved_to_another_profile_is_dropped(make_app):
    adapter = SlowLogAdapter()
    app, _ = make_app(adapter=adapter, build_ahead=True)
    async with app.run_test(size=SIZE) as pilot:
        await prepared(pilot, app)
        servers = app.screen.query_one(ServerPanel).query_one(DataTable)
        servers.focus()
        await pilot.press("l")  # cutlass: its page is held back
        await pilot.pause(0.1)
        kept = app.screen
        assert isinstance(kept, LogScreen) and kept.profile == CUTLASS
        await pilot.press("escape", "down", "l")
        await pilot.pause(0.1)
        assert app.screen is kept and kept.profile == CUTEDSL
        adapter.release.set()
        await settle(pilot, app)
        assert f"{CUTEDSL} line 0" in log_text(kept) and CUTLASS not in log_text(kept)


async def test_cell_runs_is_one_screen_listing_the_runs_of_the_cell_it_was_opened_on(make_app):
    app, _ = make_app(build_ahead=True)
    async with app.run_test(size=SIZE) as pilot:
        await prepared(pilot, app)
        compare = await press_to(pilot, app, CompareScreen, "3")
        grid = compare.query_one(CompareGrid)
        assert app.focused is grid

        async def open_cell(row: int) -> tuple[CellRunsScreen, object]:
            grid.move_cursor(row=row)
            await settle(pilot, app)
            cell = grid.highlighted_cell
            await press_to(pilot, app, CellRunsScreen, "enter")
            return app.screen, cell

        first, cell = await open_cell(0)
        want = compare.grid

        def ids(c) -> set[str]:
            points = [want.points[(side, c.concurrency)] for side in ("baseline", "candidate")]
            return {f"#{r}" for p in points for r in (*p.run_ids, *p.excluded_run_ids)}

        runs = first.query_one("#runs-table", DataTable)
        assert {str(runs.get_row_at(i)[2]) for i in range(runs.row_count)} == ids(cell)
        await press(pilot, app, "escape")
        assert app.screen is compare and app.focused is grid

        other_row = next(i for i, key in enumerate(grid.row_keys_in_order)
                         if key in grid._cells_by_key and grid._cells_by_key[key].concurrency != cell.concurrency)
        second, other = await open_cell(other_row)
        assert second is first  # the same instance, synced
        assert other.concurrency != cell.concurrency
        assert {str(runs.get_row_at(i)[2]) for i in range(runs.row_count)} == ids(other)
        assert f"conc {other.concurrency} " in str(second.query_one("#runs-title", Label).render())
        assert runs.cursor_row == 0
        await press(pilot, app, "escape")
        assert app.screen is compare and app.focused is grid


class Probe(Screen[None]):
    """A screen that asks the core for something and records what it is answered."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[object] = []

    def answered(self, value: object) -> None:
        self.answers.append(value)


async def test_an_answer_for_a_closed_screen_changes_nothing(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        gate = threading.Event()
        probe = Probe()
        app.push_screen(probe)
        await settle(pilot, app)
        app.call_core("read slowly", lambda: gate.wait(30) and "late", done=probe.answered)
        app.pop_screen()  # closed (and taken apart) before the answer
        await pilot.pause(0.1)
        gate.set()
        await settle(pilot, app)
        assert probe.answers == [] and not probe.is_attached
        # The same call for a screen still shown is answered.
        shown = Probe()
        app.push_screen(shown)
        await settle(pilot, app)
        app.call_core("read", lambda: "now", done=shown.answered)
        await settle(pilot, app)
        assert shown.answers == ["now"]


async def test_the_heap_is_frozen_once_everything_is_built_and_thawed_when_the_app_closes(make_app):
    import gc

    app, _ = make_app(build_ahead=True)
    assert gc.get_freeze_count() == 0
    async with app.run_test(size=SIZE) as pilot:
        await prepared(pilot, app)
        assert gc.get_freeze_count() > 0  # the App's objects are out of the collector's walks
    assert gc.get_freeze_count() == 0  # and back in them once it closed (nothing outlives it)


async def test_the_kept_help_fits_the_terminal_it_is_opened_in_after_a_resize(make_app):
    from moe_tui.ui.screens.help import ACTION_WIDTH, HELP_CHROME, KEY_WIDTH

    app, _ = make_app(build_ahead=True)
    async with app.run_test(size=SIZE) as pilot:
        await prepared(pilot, app)
        kept = await press_to(pilot, app, HelpScreen, "question_mark")
        wide = [c.width for c in kept.query_one(DataTable).ordered_columns]
        await press(pilot, app, "escape")
        await pilot.resize_terminal(80, 24)
        await settle(pilot, app)
        await press(pilot, app, "question_mark")
        assert app.screen is kept
        narrow = [c.width for c in kept.query_one(DataTable).ordered_columns]
        assert narrow != wide and narrow[2] == 80 - HELP_CHROME - KEY_WIDTH - ACTION_WIDTH
        dialog = kept.query_one("#help-dialog")
        assert dialog.region.right <= 80 and dialog.region.width > 0
        assert "server.start" in table_text(kept.query_one(DataTable))
