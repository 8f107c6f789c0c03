"""QuitScreen: leaving asks whether to stop the servers (and the runner) or leave the campaign running.

In-process it asks only while servers run (they stop with the TUI either way). Attached to a
runner it always asks: "stop servers and runner" ends everything; "leave the campaign running"
detaches, and the command it prints (this data dir's, `ControlClient.attach_command`) attaches again.

That command sits on a row of its own, never folded (a terminal copies a folded line back as two
broken lines, with the dialog's border in between): it scrolls sideways when longer than the
dialog, `c` copies it to the clipboard, and it is printed whole once the terminal is back."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, HorizontalScroll, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label

DIALOG_MAX_WIDTH = 90  # .dialog's max-width (app.tcss)
DIALOG_CHROME = 8  # its border, padding and a scrollbar
COPY_HINT = "c copies it to the clipboard; it is printed again when you leave"
COPIED = "copied to the clipboard (where the terminal allows it); it is printed again when you leave"


class QuitScreen(ModalScreen[str | None]):
    BINDINGS = [
        Binding("s", "choose('stop')", "Stop & quit", id="quit.stop",
                tooltip="Stop every server (and the runner, when attached to one), then quit"),
        Binding("l", "choose('leave')", "Leave running", id="quit.leave",
                tooltip="Detach: the runner keeps its servers and keeps working the queue"),
        Binding("escape", "choose(None)", "Cancel", id="quit.cancel", tooltip="Stay"),
        Binding("c", "copy_command", "Copy command", id="quit.copy",
                tooltip="Copy the command that attaches again to the clipboard"),
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
                     "attach again with:")
        else:
            leave = ("This TUI hosts the controller, so its servers stop with it. To keep a campaign "
                     "going after you leave, run `moe-tui` without --in-process.")
        with VerticalScroll(id="dialog", classes="dialog"):
            yield Label("Quit moe-tui?", classes="dialog-title")
            yield Label(f"Servers running: {names}", classes="dialog-detail", markup=False)
            yield Label(leave, classes="dialog-detail", markup=False)
            if self.can_detach:
                with HorizontalScroll(id="quit-command-row"):
                    yield Label(self.attach_command, id="quit-command", markup=False)
                yield Label(COPY_HINT, id="quit-copy-hint", classes="dialog-detail")
            with Horizontal(classes="dialog-buttons"):
                stop = "Stop servers & runner (s)" if self.can_detach else "Stop servers & quit (s)"
                yield Button(stop, variant="error", id="quit-stop")
                if self.can_detach:
                    yield Button("Leave campaign running (l)", variant="primary", id="quit-leave")
                yield Button("Cancel (esc)", id="quit-cancel")

    def on_mount(self) -> None:
        # A command longer than the dialog's usual width widens the dialog (up to the whole
        # terminal) so that it sits on one row where the terminal has the columns.
        need = len(self.attach_command) + DIALOG_CHROME
        if self.can_detach and need > DIALOG_MAX_WIDTH:
            dialog = self.query_one("#dialog")
            dialog.styles.max_width = "100%"
            dialog.styles.width = need
        # Toasts stack over the bottom right, where the dialog's buttons are at 80x24: the question
        # is what matters now, and a toast that came before it is old news.
        self.app.clear_notifications()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss({"quit-stop": "stop", "quit-leave": "leave"}.get(event.button.id or ""))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "choose" and parameters and parameters[0] == "leave" or action == "copy_command":
            return self.can_detach
        return True

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)

    def action_copy_command(self) -> None:
        # OSC 52: most terminals put it on the clipboard (tmux with set-clipboard on); where one
        # refuses, the row above still copies whole with the mouse, and the exit prints it again.
        self.app.copy_to_clipboard(self.attach_command)
        self.query_one("#quit-copy-hint", Label).update(COPIED)
