"""QueueSummary: one line of queue counts and what the controller is doing now."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from moe_tui.control import LiveState
from moe_tui.ui import render
from moe_tui.ui.widgets.repaint import put

ORDER = ("running", "pending", "done", "failed", "interrupted", "skipped", "cancelled")


class QueueSummary(Static):
    # One line, always (ellipsis past the width): updates repaint in place without a layout pass.
    DEFAULT_CSS = "QueueSummary { height: 1; padding: 0 1; }"

    def show(self, live: LiveState) -> bool:
        """Repaint the line if its text changed (a status tick usually changes nothing); True if so."""
        counts = live.queue_counts()
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("Queue ", style="bold")
        if live.paused:
            text.append_text(render.badge("PAUSED", "bold black on yellow"))
            text.append(" ")
        shown = [f"{counts[s]} {s}" for s in ORDER if counts.get(s)]
        text.append(" · ".join(shown) if shown else "empty", style="")
        if not (live.paused and live.activity == "paused"):  # the badge already says it
            text.append("   ")
            # "idle: waiting for queue items": the colon keeps the two apart (the trailing space
            # belongs to the first span: SVG renderers drop a span's leading blank).
            style = "bold cyan" if live.activity not in ("idle", "paused") else "dim"
            text.append(f"{live.activity}: " if live.detail else live.activity, style=style)
            if live.detail:
                text.append(live.detail, style="dim")
        elif live.paused:
            text.append("   resume to continue", style="dim")
        current = live.current_row()
        if current is not None:
            text.append(f"   now: #{current.id} {current.profile} conc {current.concurrency} rep {current.repeat_index}")
        return put(self, text)
