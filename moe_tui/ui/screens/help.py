"""HelpScreen (`?`): the keys of the screen underneath, words wrapped to the terminal, each with its id
for `[keys]` remapping.

One HelpScreen is kept (ui.prepare): each opening gives it the screen it was opened from
(`show_for`) and its table is refilled only when the rows (or the width) differ from what it shows.
"""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Label

from moe_tui.ui.prepare import KeepStyles
from moe_tui.ui.screens.base import composed
from moe_tui.ui.widgets.gpu_panel import CLOCK_HELP
from moe_tui.ui.widgets.keyed_table import NAVIGATION_HELP, NavTable

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
    rows.append((*NAVIGATION_HELP, "", True))  # the tables' own keys, the same on every screen
    for key, label, words in getattr(under, "HELP_EXTRA", ()):  # keys of a screen's own widgets (selects)
        rows.append((key, label, words, "", True))
    return tuple(rows)


def _cells(row: HelpRow) -> tuple[Text, Text, Text]:
    key, action, tooltip, binding_id, enabled = row
    style = "" if enabled else "dim"
    what = Text(tooltip + ("" if enabled else " (not now)"), style=style)
    if binding_id:
        what.append(f"  {binding_id}", style="dim italic")
    return Text(key, style=f"bold {style}"), Text(action, style=style), what


def _height(row: HelpRow, width: int) -> int:
    """Lines for `row` at `width` whether its key works now or not, so that a key becoming usable
    (or not) is an update of its cells in place: a DataTable sets a row's height when it is added."""
    return max(len(_cells(row[:4] + (state,))[2].wrap(_MEASURE, width)) for state in (True, False))


_MEASURE = Console(width=200, file=io.StringIO())  # wraps text to count lines; never prints


class HelpScreen(KeepStyles, ModalScreen[Any]):
    BINDINGS = [
        Binding("escape,question_mark", "dismiss_help", "Close", id="help.close", key_display="esc",
                tooltip="Close the key list"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._wanted: tuple[str, tuple[HelpRow, ...]] | None = None  # (title, rows) of this opening
        self._shown: tuple[str, int, tuple[HelpRow, ...]] | None = None  # what the table shows, at which width
        self._dashboard = False

    def compose(self) -> ComposeResult:
        with Vertical(id="help-dialog", classes="dialog"):
            yield Label("Keys", id="help-title", classes="dialog-title", markup=False)
            yield NavTable(id="help-table", cursor_type="row", zebra_stripes=True)
            yield Label("Remap a key in config.toml: [keys] <id> = \"<key>\" (the id ends each line)",
                        classes="dialog-detail", markup=False)
            yield Label(CLOCK_HELP, id="help-legend", classes="dialog-detail", markup=False)

    def show_for(self, under: Screen[Any]) -> None:
        """List the keys of `under` (the screen this opening came from), as they act there: taken
        before this screen covers it (a mode's own key does nothing on that mode's screen)."""
        self._wanted = (f"Keys: {type(under).__name__.removesuffix('Screen')}", help_rows(self.app, under))
        self._dashboard = type(under).__name__ == "DashboardScreen"  # its GPU table's legend below the keys
        if self.is_mounted:
            self.query_one("#help-legend").display = self._dashboard
            self._fill()

    def on_mount(self) -> None:
        if not composed(self):
            return  # the App closed while this screen was built off screen
        self.query_one("#help-legend").display = self._dashboard
        self._fill()

    def _width(self) -> int:
        # The dialog is 80% of the terminal up to its max-width, the whole width when narrow (app.tcss).
        screen_width = self.app.size.width
        dialog = screen_width if self.app.has_class("-narrow") else min(int(screen_width * 0.8), HELP_MAX_WIDTH)
        return max(dialog - HELP_CHROME - KEY_WIDTH - ACTION_WIDTH, 20)

    def _fill(self) -> None:
        if self._wanted is None:
            return
        title, rows = self._wanted
        width = self._width()
        wanted = (title, width, rows)
        if wanted == self._shown:
            return  # opened again from the same screen in the same state: nothing to redo
        shown, self._shown = self._shown, wanted
        table = self.query_one(DataTable)
        with self.app.batch_update():
            if shown is not None and shown[:2] == (title, width) and self._update_in_place(table, shown[2], rows):
                return  # the same keys, some enabled or not since: only those cells changed
            self.query_one("#help-title", Label).update(title)
            # Fixed widths so that "What it does" wraps (rows grow to fit) instead of being cut; the
            # binding id (for [keys] remapping) follows the words, dim, rather than taking a column.
            if shown is None or shown[1] != width:
                table.clear(columns=True)
                table.add_column("Key", width=KEY_WIDTH, key="key")
                table.add_column("Action", width=ACTION_WIDTH, key="action")
                table.add_column("What it does", width=width, key="what")
            else:
                table.clear()
            for row in rows:
                table.add_row(*_cells(row), height=_height(row, width), key=row[3] or f"navigation: {row[1]}")
            table.move_cursor(row=0, animate=False)
            table.scroll_home(animate=False)

    def _update_in_place(self, table: DataTable[Any], before: tuple[HelpRow, ...], rows: tuple[HelpRow, ...]) -> bool:
        """Update the rows that changed when the keys are the same ones (a row's height does not
        depend on its state: see `_height`); False when the table must be refilled."""
        if [r[3:4] + r[:3] for r in before] != [r[3:4] + r[:3] for r in rows]:
            return False
        for new in (new for old, new in zip(before, rows) if old != new):
            for column, cell in zip(("key", "action", "what"), _cells(new)):
                table.update_cell(new[3] or f"navigation: {new[1]}", column, cell)
        return True

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
