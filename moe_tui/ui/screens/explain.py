"""ExplainScreen: where each side's decode step goes at one grid cell (issue 25).

Opened with `x` on the compare grid's highlighted cell. The breakdown comes from the core
(`client.explain_cell`, i.e. `moe_tui.explain.store.explain_cell`) in a worker and is shown as
the same lines `moe-tui explain` prints; when the cell has no profiled runs yet, `y` queues one a
side (`client.queue_explain`). Every line (kernel names come from trace files) is plain Text,
never parsed as markup.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from moe_tui.records import CampaignAddedJson
from moe_tui.ui.room import Room, room


class ExplainScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("y", "queue", "Profile", id="explain.queue", tooltip="Queue one profiled run a side at this cell"),
        Binding("r", "reload", "Reload", id="explain.reload", tooltip="Read the profiled runs again"),
        Binding("escape,q", "close", "Back", id="explain.back", tooltip="Back to the grid"),
    ]
    DEFAULT_CSS = """
    ExplainScreen { align: center middle; }
    #explain-dialog { width: 96%; height: 90%; border: round $accent; padding: 0 1; background: $surface; }
    #explain-box { height: 1fr; }
    """

    def __init__(self, baseline: str, candidate: str, concurrency: int) -> None:
        super().__init__()
        self.cell = (baseline, candidate, int(concurrency))
        self.view: dict[str, Any] | None = None

    @property
    def control(self) -> Room:
        return room(self.app)

    def compose(self) -> ComposeResult:
        baseline, candidate, conc = self.cell
        with Vertical(id="explain-dialog"):
            yield Label(Text(f"Where the decode step goes: {baseline} vs {candidate} at concurrency {conc}"),
                        id="explain-title", classes="dialog-title")
            with VerticalScroll(id="explain-box"):
                yield Static("reading the profiled runs…", id="explain-body")
            yield Static("", id="explain-hint")

    def on_mount(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        self.control.call_core("explain cell", self.control.client.explain_cell, *self.cell, done=self.show,
                               group="explain")

    def show(self, view: dict[str, Any]) -> None:
        self.view = view
        body = Text()
        if view.get("simulated"):
            body.append("SIMULATED: the emulator's kernel model, not a GPU\n", style="bold yellow")
        body.append("\n".join(str(line) for line in view.get("lines") or ()))
        self.query_one("#explain-body", Static).update(body)
        hint = {"none": "y queues one profiled run a side · esc backs out",
                "failed": "y queues them again · esc backs out",
                "pending": "r reads again once `run` has worked them · esc backs out"}.get(view.get("state", ""),
                                                                                        "r reads again · esc backs out")
        self.query_one("#explain-hint", Static).update(Text(hint, style="dim"))

    def run_finished(self) -> None:
        """A run finished (the App says so): while this cell's profiled runs are awaited, read again,
        so the breakdown appears without `r`."""
        if self.view is not None and self.view.get("state") == "pending" and self.is_mounted:
            self.action_reload()

    def action_queue(self) -> None:
        if self.view is None or self.view.get("state") not in ("none", "failed"):
            self.notify("explain: this cell's profiled runs are queued or done already", severity="warning")
            return
        self.control.call_core("queue profiled runs", self.control.client.queue_explain, *self.cell,
                               done=self._queued, group="explain-queue")

    def _queued(self, result: CampaignAddedJson) -> None:
        ids = ", ".join(f"#{i}" for i in result.get("item_ids") or ())
        self.notify(f"queued profiled runs {ids}")
        self.action_reload()

    def action_close(self) -> None:
        self.dismiss(None)
