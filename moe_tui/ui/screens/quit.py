"""QuitScreen: leaving while servers run asks whether to stop them or leave them running."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class QuitScreen(ModalScreen[str | None]):
    BINDINGS = [
        Binding("s", "choose('stop')", "Stop & quit", id="quit.stop", tooltip="Stop every server, then quit"),
        Binding("l", "choose('leave')", "Leave running", id="quit.leave",
                tooltip="Quit and leave the servers (and a detached runner) running"),
        Binding("escape", "choose(None)", "Cancel", id="quit.cancel", tooltip="Stay"),
    ]

    def __init__(self, running: list[str], can_detach: bool) -> None:
        super().__init__()
        self.running = running
        self.can_detach = can_detach

    def compose(self) -> ComposeResult:
        names = ", ".join(self.running)
        if self.can_detach:
            leave = "Leave them running: the detached runner keeps them and keeps working the queue."
        else:
            leave = ("This TUI hosts the controller, so its servers stop with it. To keep a campaign "
                     "going after you leave, start `moe-tui run --detach` and open the TUI again.")
        with Vertical(id="dialog", classes="dialog"):
            yield Label("Quit moe-tui?", classes="dialog-title")
            yield Label(f"Servers still running: {names}", classes="dialog-detail")
            yield Label(leave, classes="dialog-detail")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Stop servers & quit (s)", variant="error", id="quit-stop")
                if self.can_detach:
                    yield Button("Leave running (l)", variant="primary", id="quit-leave")
                yield Button("Cancel (esc)", id="quit-cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss({"quit-stop": "stop", "quit-leave": "leave"}.get(event.button.id or ""))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "choose" and parameters and parameters[0] == "leave":
            return self.can_detach
        return True

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)
