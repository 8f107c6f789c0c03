"""Issue 33, second walk: what `?` tells on Compare (Tab to the profile selects, j/k, Esc)."""

from __future__ import annotations

from textual.widgets import DataTable, Select

from moe_tui.ui.screens.help import HelpScreen
from tests.ui.test_pushed_screens import prepared, settle, table_text


async def test_help_on_compare_lists_tab_the_selects_j_k_and_esc(make_app):
    app, _ = make_app(build_ahead=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await prepared(pilot, app)
        await pilot.press("3")
        await settle(pilot, app)
        await pilot.press("question_mark")
        await settle(pilot, app)
        assert isinstance(app.screen, HelpScreen)
        text = table_text(app.screen.query_one(DataTable))
        assert "baseline and candidate selects" in text and "Tab" in text, text
        assert "j k g G" in text and "Esc" in text
        await pilot.press("escape")
        await settle(pilot, app)
        await pilot.press("tab")  # what the row says: Tab reaches the baseline select
        await settle(pilot, app)
        assert isinstance(app.focused, Select) and app.focused.id == "compare-baseline"


def test_the_compare_screen_says_the_emulator_clock_above_a_simulated_grid():
    """The x10 scale was said only in run detail; the grid's numbers are on that clock too."""
    from compare_data import control_fail_runs

    from moe_tui.compare.build import build_grid_from_runs
    from moe_tui.ui.screens.compare import diff_text

    a, b = control_fail_runs()
    grid = build_grid_from_runs(a, b, baseline_name="sim-cutlass", candidate_name="sim-cutedsl")
    assert "SIMULATED  emulator clock x10: tok/s read x the clock, ms / it\n" in diff_text(grid).plain
