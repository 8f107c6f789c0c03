"""HelpScreen (`?`): the keys of the screen underneath, words wrapped to the terminal, each with its id
for `[keys]` remapping."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Label

HELP_MAX_WIDTH = 110  # the dialog's max-width (app.tcss #help-dialog)
# The dialog's border and padding, the table's cell padding (1 a side, 3 columns) and its scrollbar.
HELP_CHROME = 2 + 4 + 6 + 2
KEY_WIDTH = 7
ACTION_WIDTH = 14


class HelpScreen(ModalScreen[Any]):
    BINDINGS = [
        Binding("escape,question_mark", "dismiss_help", "Close", id="help.close", key_display="esc",
                tooltip="Close the key list"),
    ]

    def __init__(self, under: Screen[Any]) -> None:
        super().__init__()
        self.under = under

    def compose(self) -> ComposeResult:
        with Vertical(id="help-dialog", classes="dialog"):
            yield Label(f"Keys: {type(self.under).__name__.removesuffix('Screen')}", classes="dialog-title")
            yield DataTable(id="help-table", cursor_type="row", zebra_stripes=True)
            yield Label("Remap a key in config.toml: [keys] <id> = \"<key>\" (the id ends each line)",
                        classes="dialog-detail", markup=False)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        # Fixed widths so that "What it does" wraps (rows grow to fit) instead of being cut; the
        # binding id (for [keys] remapping) follows the words, dim, rather than taking a column.
        # The dialog is 80% of the terminal up to its max-width, the whole width when narrow (app.tcss).
        screen_width = self.app.size.width
        dialog = screen_width if self.app.has_class("-narrow") else min(int(screen_width * 0.8), HELP_MAX_WIDTH)
        width = dialog - HELP_CHROME
        table.add_column("Key", width=KEY_WIDTH)
        table.add_column("Action", width=ACTION_WIDTH)
        table.add_column("What it does", width=max(width - KEY_WIDTH - ACTION_WIDTH, 20))
        seen: set[str] = set()
        # The screen's own bindings first, then the App's; the active keymap decides the key shown.
        for active in self.under.active_bindings.values():
            binding = active.binding
            if binding.system or not binding.id or binding.id in seen:
                continue
            seen.add(binding.id)
            style = "" if active.enabled else "dim"
            what = Text(binding.tooltip + ("" if active.enabled else " (not now)"), style=style)
            what.append(f"  {binding.id}", style="dim italic")
            table.add_row(
                Text(self.app.get_key_display(binding), style=f"bold {style}"),
                Text(binding.description, style=style),
                what,
                height=None,
            )

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
