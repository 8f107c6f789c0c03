"""KeyBar: the footer line of keys, painted as one line of text.

Textual's Footer recomposes on every bindings change: one widget per key, each styled through
the stylesheet. Measured on a 2-core box that was most of the time from a key press to the
switched screen (a screen switch always changes the bindings). KeyBar renders the same keys
(enabled ones bright, disabled ones dim, a compact group as one entry) into a single fixed-height
Static and repaints it in place, so a bindings change costs one line of text and no layout.
"""

from __future__ import annotations

from itertools import groupby

from rich.text import Text
from textual.widgets import Static


class KeyBar(Static):
    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        width: 1fr;
        background: $footer-background;
        color: $footer-foreground;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("", markup=False, **kwargs)
        self._pending = False
        self._key_style = "bold"

    def on_mount(self) -> None:
        # The theme's footer key colour, as Textual's Footer shows keys.
        colour = self.app.get_css_variables().get("footer-key-foreground") or "yellow"
        self._key_style = f"bold {colour}"
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        self.call_after_refresh(self.repaint_keys)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen) -> None:
        # After the refresh: the signal can fire while the screen is still mounting its children
        # (whose check_action the active bindings consult); several changes coalesce into one paint.
        if self.is_attached and screen is self.screen and not self._pending:
            self._pending = True
            self.call_after_refresh(self.repaint_keys)

    def repaint_keys(self) -> None:
        self._pending = False
        if self.is_attached:
            self.update(self.keys_text(), layout=False)

    def keys_text(self) -> Text:
        app = self.app
        active = self.screen.active_bindings
        shown = []
        seen_actions: set[str] = set()
        for _node, binding, enabled, _tooltip in active.values():
            if not binding.show or binding.action in seen_actions:
                continue
            seen_actions.add(binding.action)
            shown.append((binding, enabled))
        text = Text(no_wrap=True, overflow="ellipsis")
        key_style, dim = self._key_style, "dim"
        for group, members in groupby(shown, key=lambda item: item[0].group):
            items = list(members)
            if group is not None and len(items) > 1:
                for binding, enabled in items:
                    text.append(f" {app.get_key_display(binding)} ", style=key_style if enabled else dim)
                text.append(f" {group.description}  ", style="" if any(e for _, e in items) else dim)
                continue
            for binding, enabled in items:
                text.append(f" {app.get_key_display(binding)} ", style=key_style if enabled else dim)
                text.append(f" {binding.description}  ", style="" if enabled else dim)
        palette = active.get(app.COMMAND_PALETTE_BINDING) if app.ENABLE_COMMAND_PALETTE else None
        if palette is not None:
            text.append(f" {app.get_key_display(palette[1])} ", style=key_style)
            text.append(f" {palette[1].description}", style="")
        return text
