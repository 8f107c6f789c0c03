"""`ShutdownSafeSelect`: Textual's Select, minus a race with the App's shutdown.

Screens are built off screen in idle slices (`moe_tui.ui.prepare`): the add-campaign form's spare and
the Compare screen may still be mounting when the App exits. Textual 8.2's Select sets its value when
it mounts, which updates the `#label` inside its SelectCurrent; with the App already closing its
screens, that child may be gone, and the NoMatches ended the App with an error (seen in
tests/ui/test_walk_lows under load: an App closed right after its first paint). While the App is
shutting down there is nothing to show, so a Select mounting then skips its set-up.
"""

from __future__ import annotations

from textual import events
from textual.widgets import Select


class ShutdownSafeSelect(Select[str]):
    def _on_mount(self, event: events.Mount) -> None:
        # Textual calls each class's _on_mount in turn (subclass first); preventing the default
        # skips Select's own. App._shutdown has set is_running False before it closes the screens.
        if not self.app.is_running:
            event.prevent_default()
