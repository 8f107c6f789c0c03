"""Screens are built once and updated in place (issues 23/26): every mode's screen is mounted and
rendered off screen after the first paint, a key shows that same instance, a first visit neither
builds a screen nor re-parses the stylesheet, a revisit of Compare with nothing recorded in
between does not repaint the grid, and the add-campaign form opens from a spare built off screen.
Speed itself is benched (benches/tui_overhead.py), not timed here."""

from __future__ import annotations

from textual.widgets import Input

from moe_tui.ui.screens.add_campaign import DEFAULT_CONCURRENCIES, AddCampaignScreen
from moe_tui.ui.screens.compare import CompareScreen
from moe_tui.ui.screens.dashboard import DashboardScreen
from moe_tui.ui.screens.queue import QueueScreen
from moe_tui.ui.widgets.compare_grid import CompareGrid
from tests.support.pilot import SIZE, press, settle


async def prepared(pilot, app) -> None:
    """Wait (on the App's own state, not a clock) until the preparation jobs have all run."""
    assert app.preparer.ahead, "an App that builds nothing ahead: make it with make_app(build_ahead=True)"
    for _ in range(3000):  # a loaded machine takes longer; each pass waits for the App to go idle
        if app.preparer.done and all(m in app._screen_stacks for m in app.MODES):
            await settle(pilot, app)  # workers' answers (the grid) may queue a render of their own
            if app.preparer.done:
                return
        await pilot.pause(0.02)
    raise AssertionError(f"preparation never finished: {app.preparer._jobs}")


async def test_every_screen_is_built_before_its_first_visit_and_shown_as_that_instance(make_app):
    app, _ = make_app(build_ahead=True)
    async with app.run_test(size=SIZE) as pilot:
        await prepared(pilot, app)
        built = {mode: app._screen_stacks[mode][0] for mode in app.MODES}
        assert isinstance(built["queue"], QueueScreen) and isinstance(built["compare"], CompareScreen)
        # Rendered off screen: the Queue table already has its rows (and their lines) before the key.
        assert built["queue"].query_one("#queue-table").row_count > 0
        for _ in range(2):  # visited twice: the same instance each time
            for key, mode in (("2", "queue"), ("3", "compare"), ("1", "dashboard")):
                await press(pilot, app, key)
                assert app.screen is built[mode]
        assert isinstance(app.screen, DashboardScreen)


async def test_a_first_visit_does_not_reparse_the_stylesheet(make_app):
    app, _ = make_app(build_ahead=True)
    async with app.run_test(size=SIZE) as pilot:
        await prepared(pilot, app)
        reparsed: list[int] = []
        real = app.stylesheet.reparse
        app.stylesheet.reparse = lambda: (reparsed.append(1), real())[1]  # type: ignore[method-assign]
        for key in "2313":
            await press(pilot, app, key)
        assert reparsed == []
        # A theme change still restyles every screen, the hidden ones when they are shown.
        app.theme = "textual-light"
        await settle(pilot, app)
        await press(pilot, app, "2")
        assert reparsed


async def test_a_revisit_with_nothing_recorded_does_not_repaint_the_grid(make_app):
    app, adapter = make_app(build_ahead=True)
    async with app.run_test(size=SIZE) as pilot:
        await prepared(pilot, app)
        await press(pilot, app, "3")
        grid = app.screen.query_one(CompareGrid)
        assert grid.row_count > 0
        shown: list[object] = []
        real = grid.show
        grid.show = lambda *a, **k: (shown.append(a[0]), real(*a, **k))[1]  # type: ignore[method-assign]
        for key in "13":
            await press(pilot, app, key)
        assert isinstance(app.screen, CompareScreen) and shown == []
        await press(pilot, app, "f")  # flagged runs included: another grid, painted
        assert len(shown) == 1


async def test_the_add_campaign_form_opens_from_a_spare_built_off_screen(make_app):
    app, _ = make_app(build_ahead=True)
    async with app.run_test(size=SIZE) as pilot:
        await prepared(pilot, app)
        key, spare = app.preparer._spares[AddCampaignScreen]
        assert key == tuple(app.live.servers) and spare.is_mounted and not spare.is_current
        await press(pilot, app, "2", "a")
        assert app.screen is spare  # the form built before the key, not a new one
        assert spare.query_one("#campaign-concurrencies", Input).value == DEFAULT_CONCURRENCIES
        await pilot.press("escape")
        await prepared(pilot, app)
        _, after = app.preparer._spares[AddCampaignScreen]
        assert after is not spare and after.is_mounted  # the next one is ready for the next key
        await press(pilot, app, "a")
        assert app.screen is after
