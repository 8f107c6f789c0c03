"""FilterBar: the `/` filter of a table (k9s and lazygit users type `/` to narrow any list).

A one-line Input, hidden until `/`; what is typed narrows the table's rows (case-insensitive, every
word must appear in the row's text); Enter goes back to the table keeping the filter, Escape clears
it. The screen owns the rows: it asks `matches(text)` and shows only those.
"""

from __future__ import annotations

from typing import Any

from textual.binding import Binding
from textual.message import Message
from textual.widgets import Input


class FilterBar(Input):
    DEFAULT_CSS = """
    FilterBar { display: none; height: 1; border: none; padding: 0 1; }
    FilterBar.-shown { display: block; }
    /* Input's own focus border outranks a plain type rule: in one row it left no line for the text */
    FilterBar:focus, FilterBar.-shown:focus { border: none; height: 1; background: $boost; }
    """
    BINDINGS = [Binding("escape", "clear_filter", "Clear filter", show=False)]

    class Done(Message):
        """The user left the filter (Enter keeps it, Escape cleared it): focus the table again."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(placeholder="filter: type words (Enter keeps, Esc clears)", **kwargs)

    def open(self) -> None:
        self.add_class("-shown")
        self.focus()

    def matches(self, text: str) -> bool:
        words = self.value.lower().split()
        low = text.lower()
        return all(w in low for w in words)

    @property
    def active(self) -> bool:
        return bool(self.value.strip())

    def action_clear_filter(self) -> None:
        self.value = ""
        self.remove_class("-shown")
        self.post_message(self.Done())

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if not self.active:
            self.remove_class("-shown")
        self.post_message(self.Done())
