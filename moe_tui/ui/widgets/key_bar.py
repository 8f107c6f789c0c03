"""KeyBar: the footer line of keys, painted as one line of text.

Textual's Footer recomposes on every bindings change: one widget per key, each styled through
the stylesheet. Measured on a 2-core box that was most of the time from a key press to the
switched screen (a screen switch always changes the bindings). KeyBar renders the same keys
(enabled ones bright, disabled ones dim, a compact group as one entry) into a single fixed-height
Static and repaints it in place, so a bindings change costs one line of text and no layout.
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Static

# Shown whatever the width: how to learn the keys and how to leave (k9s and lazygit keep both).
ALWAYS_SHOWN = frozenset({"app.help", "app.quit"})


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

    def __init__(self, **kwargs: Any) -> None:
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

    def _bindings_changed(self, screen: object) -> None:
        # After the refresh: the signal can fire while the screen is still mounting its children
        # (whose check_action the active bindings consult); several changes coalesce into one paint.
        if self.is_attached and screen is self.screen and not self._pending:
            self._pending = True
            self.call_after_refresh(self.repaint_keys)

    def repaint_keys(self) -> None:
        self._pending = False
        if self.is_attached:
            self.update(self.keys_text(), layout=False)

    def on_resize(self) -> None:
        # A screen prepared in the background has no active bindings yet; it paints when shown.
        if self.is_attached and self.screen.is_current:
            self._bindings_changed(self.screen)

    def keys_text(self) -> Text:
        """The screen's keys, then (always shown, at the right end) help, quit and the palette:
        a narrow terminal cuts the screen's keys with an ellipsis, never `?` or `q`."""
        app = self.app
        active = self.screen.active_bindings
        shown: list[tuple[Binding, bool]] = []
        kept: list[tuple[Binding, bool]] = []
        seen_actions: set[str] = set()
        for _node, binding, enabled, _tooltip in active.values():
            if not binding.show or binding.action in seen_actions:
                continue
            seen_actions.add(binding.action)
            (kept if binding.id in ALWAYS_SHOWN else shown).append((binding, enabled))
        key_style, dim = self._key_style, "dim"
        entries: list[Text] = []
        for group, members in groupby(shown, key=lambda item: item[0].group):
            items = list(members)
            if group is not None and len(items) > 1:
                entry = Text()
                for binding, enabled in items:
                    entry.append(f" {app.get_key_display(binding)} ", style=key_style if enabled else dim)
                entry.append(f" {group.description}  ", style="" if any(e for _, e in items) else dim)
                entries.append(entry)
                continue
            for binding, enabled in items:
                entries.append(Text.assemble((f" {app.get_key_display(binding)} ", key_style if enabled else dim),
                                             (f" {binding.description}  ", "" if enabled else dim)))
        tail = Text(no_wrap=True)
        for binding, enabled in kept:
            tail.append(f" {app.get_key_display(binding)} ", style=key_style if enabled else dim)
            tail.append(f" {binding.description} ", style="" if enabled else dim)
        palette = active.get(app.COMMAND_PALETTE_BINDING) if app.ENABLE_COMMAND_PALETTE else None
        if palette is not None:
            tail.append(f" {app.get_key_display(palette[1])} ", style=key_style)
            tail.append(f" {palette[1].description}", style="")
        width = self.size.width or app.size.width
        room = width - tail.cell_len
        text = Text(no_wrap=True, overflow="ellipsis")
        for k, entry in enumerate(entries):
            last = k == len(entries) - 1
            if text.cell_len + entry.cell_len > room - (0 if last else 1):
                text.append("…", style=dim)  # more keys: `?` lists them all
                break
            text.append_text(entry)
        text.pad_right(max(room - text.cell_len, 0))
        return text + tail
