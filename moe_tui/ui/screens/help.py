"""HelpScreen (`?`): the keys of the screen underneath, with their ids for `[keys]` remapping."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Label


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,question_mark", "dismiss_help", "Close", id="help.close", key_display="esc",
                tooltip="Close the key list"),
    ]

    def __init__(self, under: Screen) -> None:
        super().__init__()
        self.under = under

    def compose(self) -> ComposeResult:
        with Vertical(id="help-dialog", classes="dialog"):
            yield Label(f"Keys: {type(self.under).__name__.removesuffix('Screen')}", classes="dialog-title")
            yield DataTable(id="help-table", cursor_type="row", zebra_stripes=True)
            yield Label("Remap any key in config.toml: [keys] <id> = \"<key>\"", classes="dialog-detail", markup=False)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("Key", "Action", "Id", "What it does")
        seen: set[str] = set()
        # The screen's own bindings first, then the App's; the active keymap decides the key shown.
        for active in self.under.active_bindings.values():
            binding = active.binding
            if binding.system or not binding.id or binding.id in seen:
                continue
            seen.add(binding.id)
            style = "" if active.enabled else "dim"
            table.add_row(
                Text(self.app.get_key_display(binding), style=f"bold {style}"),
                Text(binding.description, style=style),
                Text(binding.id, style="dim"),
                Text(binding.tooltip + ("" if active.enabled else " (not now)"), style=style),
            )

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
