"""An App that exits while a screen with Selects is still mounting ends cleanly (moe_tui.ui.widgets.select).

The App builds screens off screen in idle slices, so a quick exit can land while one mounts; Textual
8.2's Select then failed in its own mount handler (NoMatches: its SelectOverlay or `#label` already
taken apart) and the App ended with that error. Textual's Select is the control here: it fails the
same way every time, so the test knows it reproduced the race."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.screen import Screen
from textual.widgets import Select, Static

from moe_tui.ui.widgets.select import ShutdownSafeSelect


def selects(kind: type[Select[str]]) -> Screen[None]:
    class Form(Screen[None]):
        def compose(self) -> ComposeResult:
            for i in range(20):
                yield kind([("a", "a"), ("b", "b")], value="a", id=f"s{i}")

    return Form()


async def exit_while_mounting(kind: type[Select[str]]) -> str:
    """Push a screen of Selects without waiting for its mount, then exit at once."""

    class Bare(App[None]):
        def compose(self) -> ComposeResult:
            yield Static("x")

    app = Bare()
    try:
        async with app.run_test():
            app.push_screen(selects(kind))  # not awaited: the App closes while it mounts
    except Exception as exc:  # the App re-raises what a widget's handler raised
        return type(exc).__name__
    return "ok"


async def test_textuals_select_fails_when_the_app_exits_mid_mount():
    assert await exit_while_mounting(Select) == "NoMatches"


async def test_the_shutdown_safe_select_lets_the_app_exit_mid_mount():
    assert [await exit_while_mounting(ShutdownSafeSelect) for _ in range(5)] == ["ok"] * 5


async def test_a_mounted_shutdown_safe_select_shows_its_value_and_options():
    class Form(App[None]):
        def compose(self) -> ComposeResult:
            yield ShutdownSafeSelect([("alpha", "a"), ("beta", "b")], value="b", id="pick")

    app = Form()
    async with app.run_test() as pilot:
        pick = app.query_one("#pick", Select)
        assert pick.value == "b"
        assert "beta" in str(pick.query_one("SelectCurrent #label", Static).render())
        pick.value = "a"
        await pilot.pause()
        assert "alpha" in str(pick.query_one("SelectCurrent #label", Static).render())
