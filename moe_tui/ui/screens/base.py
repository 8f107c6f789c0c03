"""LiveScreen: a screen the App repaints from live state, with cheap footer refreshes.

Refreshing bindings repaints the KeyBar and re-checks every action, so a screen asks
for it only when what its `check_action` depends on has changed: `binding_state()` returns that,
and `maybe_refresh_bindings()` compares it (with the App's own) to the last one shown.

A screen whose content changed while another screen is shown calls `prerender_soon()`: it is laid
out and rendered off screen in an idle slice, so that showing it repaints from cached lines
(`moe_tui.ui.prepare`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from textual.screen import Screen

from moe_tui.ui.prepare import KeepStyles, prerender_soon


class LiveScreen(KeepStyles, Screen[Any]):
    _binding_sig: Any = object()
    # Topics this screen follows while another mode's screen is shown (then it renders itself off
    # screen when something changed); every other topic waits for on_screen_resume.
    BACKGROUND_TOPICS: frozenset[str] = frozenset()

    def live_update(self, topics: set[str]) -> None:
        """Repaint what `topics` touched; the App calls this at most every flush interval."""

    def binding_state(self) -> Hashable:
        return None

    def maybe_refresh_bindings(self) -> None:
        app_state = getattr(self.app, "binding_state", lambda: None)()
        sig = (app_state, self.binding_state())
        if sig != self._binding_sig:
            self._binding_sig = sig
            self.refresh_bindings()

    def prerender_soon(self) -> None:
        prerender_soon(self)


def composed(screen: Screen[Any]) -> bool:
    """Whether the screen's composed widgets can be filled. A screen built off screen (a mode, a
    kept or spare screen) can receive Mount after the App began to close (Textual's shutdown sets
    the App not running first), with some of its children never mounted: its on_mount then has
    nothing to fill and must not query for it."""
    return bool(screen.app.is_running and screen.children)
