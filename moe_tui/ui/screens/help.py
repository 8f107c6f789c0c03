"""HelpScreen (`?`): the keys of the screen underneath, words wrapped to the terminal, each with its id
for `[keys]` remapping.

One HelpScreen is kept (ui.prepare): each opening gives it the screen it was opened from
(`show_for`) and its table is refilled only when the rows (or the width) differ from what it shows.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Label

from moe_tui.ui.prepare import KeepStyles

HELP_MAX_WIDTH = 110  # the dialog's max-width (app.tcss #help-dialog)
# The dialog's border and padding, the table's cell padding (1 a side, 3 columns) and its scrollbar.
HELP_CHROME = 2 + 4 + 6 + 2
KEY_WIDTH = 7
ACTION_WIDTH = 14

# (key shown, action, what it does, binding id, enabled now)
HelpRow = tuple[str, str, str, str, bool]


def help_rows(app: Any, under: Screen[Any]) -> tuple[HelpRow, ...]:
    """The keys of `under`: its own bindings first, then the App's; the active keymap decides the
    key shown; a key that does nothing now is listed as such."""
    rows: list[HelpRow] = []
    seen: set[str] = set()
    for active in under.active_bindings.values():
        binding = active.binding
        if binding.system or not binding.id or binding.id in seen:
            continue
        seen.add(binding.id)
        rows.append((app.get_key_display(binding), binding.description, binding.tooltip, binding.id,
                     bool(active.enabled)))
    return tuple(rows)


class HelpScreen(KeepStyles, ModalScreen[Any]):
    BINDINGS = [
        Binding("escape,question_mark", "dismiss_help", "Close", id="help.close", key_display="esc",
                tooltip="Close the key list"),
    ]

    def __init__(self, under: Screen[Any] | None = None) -> None:
        super().__init__()
        self.under = under
        self._shown: tuple[object, ...] | None = None  # (title, width, rows) the table shows

    def compose(self) -> ComposeResult:
        with Vertical(id="help-dialog", classes="dialog"):
            yield Label("Keys", id="help-title", classes="dialog-title", markup=False)
            yield DataTable(id="help-table", cursor_type="row", zebra_stripes=True)
            yield Label("Remap a key in config.toml: [keys] <id> = \"<key>\" (the id ends each line)",
                        classes="dialog-detail", markup=False)

    def show_for(self, under: Screen[Any]) -> None:
        """List the keys of `under` (the screen this opening came from)."""
        self.under = under
        if self.is_mounted:
            self._fill()

    def on_mount(self) -> None:
        self._fill()

    def _width(self) -> int:
        # The dialog is 80% of the terminal up to its max-width, the whole width when narrow (app.tcss).
        screen_width = self.app.size.width
        dialog = screen_width if self.app.has_class("-narrow") else min(int(screen_width * 0.8), HELP_MAX_WIDTH)
        return max(dialog - HELP_CHROME - KEY_WIDTH - ACTION_WIDTH, 20)

    def _fill(self) -> None:
        if self.under is None:
            return
        title = f"Keys: {type(self.under).__name__.removesuffix('Screen')}"
        width = self._width()
        rows = help_rows(self.app, self.under)
        wanted = (title, width, rows)
        if wanted == self._shown:
            return  # opened again from the same screen in the same state: nothing to redo
        shown, self._shown = self._shown, wanted
        self.query_one("#help-title", Label).update(title)
        table = self.query_one(DataTable)
        with self.app.batch_update():
            # Fixed widths so that "What it does" wraps (rows grow to fit) instead of being cut; the
            # binding id (for [keys] remapping) follows the words, dim, rather than taking a column.
            if shown is None or shown[1] != width:
                table.clear(columns=True)
                table.add_column("Key", width=KEY_WIDTH)
                table.add_column("Action", width=ACTION_WIDTH)
                table.add_column("What it does", width=width)
            else:
                table.clear()
            for key, action, tooltip, binding_id, enabled in rows:
                style = "" if enabled else "dim"
                what = Text(tooltip + ("" if enabled else " (not now)"), style=style)
                what.append(f"  {binding_id}", style="dim italic")
                table.add_row(Text(key, style=f"bold {style}"), Text(action, style=style), what, height=None)
            table.move_cursor(row=0, animate=False)
            table.scroll_home(animate=False)

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
