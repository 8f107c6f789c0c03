"""Issue 33, second walk: what `?` tells on Compare (Tab to the profile selects, j/k, Esc)."""

from __future__ import annotations

from textual.widgets import DataTable, Select

from moe_tui.ui.screens.help import HelpScreen
from tests.ui.test_pushed_screens import prepared, settle, table_text


async def test_help_on_compare_lists_tab_the_selects_j_k_and_esc(make_app):
    app, _ = make_app()
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
