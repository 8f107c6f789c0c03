"""ConfirmScreen: a yes/no modal for destructive actions (stop a server, cancel, delete)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes", tooltip="Confirm"),
        Binding("escape,n", "answer(False)", "No", id="confirm.no", tooltip="Back out"),
    ]

    def __init__(self, question: str, detail: str = "", confirm: str = "Yes") -> None:
        super().__init__()
        self.question = question
        self.detail = detail
        self.confirm_label = confirm

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="dialog"):
            yield Label(self.question, id="confirm-question", classes="dialog-title", markup=False)
            if self.detail:
                yield Label(self.detail, id="confirm-detail", classes="dialog-detail", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button(f"{self.confirm_label} (y)", variant="error", id="confirm-yes")
                yield Button("Cancel (n)", id="confirm-no")

    def on_mount(self) -> None:
        self.query_one("#confirm-no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
