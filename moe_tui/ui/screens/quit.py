"""QuitScreen: leaving asks whether to stop the servers (and the runner) or leave the campaign running.

In-process it asks only while servers run (they stop with the TUI either way). Attached to a
runner it always asks: "stop servers and runner" ends everything; "leave the campaign running"
detaches, and the command it prints (this data dir's, `ControlClient.attach_command`) attaches again."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class QuitScreen(ModalScreen[str | None]):
    BINDINGS = [
        Binding("s", "choose('stop')", "Stop & quit", id="quit.stop",
                tooltip="Stop every server (and the runner, when attached to one), then quit"),
        Binding("l", "choose('leave')", "Leave running", id="quit.leave",
                tooltip="Detach: the runner keeps its servers and keeps working the queue"),
        Binding("escape", "choose(None)", "Cancel", id="quit.cancel", tooltip="Stay"),
    ]

    def __init__(self, running: list[str], can_detach: bool, pending: int = 0, attach_command: str = "moe-tui") -> None:
        super().__init__()
        self.attach_command = attach_command
        self.running = running
        self.can_detach = can_detach
        self.pending = pending

    def compose(self) -> ComposeResult:
        names = ", ".join(self.running) or "none"
        if self.can_detach:
            work = f"{self.pending} queue item(s) pending or running. " if self.pending else "The queue is idle. "
            leave = (work + "Leave the campaign running: the runner keeps its servers and works the queue; "
                     f"attach again with: {self.attach_command}")
        else:
            leave = ("This TUI hosts the controller, so its servers stop with it. To keep a campaign "
                     "going after you leave, run `moe-tui` without --in-process.")
        with VerticalScroll(id="dialog", classes="dialog"):
            yield Label("Quit moe-tui?", classes="dialog-title")
            yield Label(f"Servers running: {names}", classes="dialog-detail", markup=False)
            yield Label(leave, classes="dialog-detail", markup=False)
            with Horizontal(classes="dialog-buttons"):
                stop = "Stop servers & runner (s)" if self.can_detach else "Stop servers & quit (s)"
                yield Button(stop, variant="error", id="quit-stop")
                if self.can_detach:
                    yield Button("Leave campaign running (l)", variant="primary", id="quit-leave")
                yield Button("Cancel (esc)", id="quit-cancel")

    def on_mount(self) -> None:
        # Toasts stack over the bottom right, where the dialog's buttons are at 80x24: the question
        # is what matters now, and a toast that came before it is old news.
        self.app.clear_notifications()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss({"quit-stop": "stop", "quit-leave": "leave"}.get(event.button.id or ""))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "choose" and parameters and parameters[0] == "leave":
            return self.can_detach
        return True

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)
