"""LogScreen: one server's log, following new lines live; search narrows it to matching lines.

The first page comes from the adapter (the log file or ring), then new lines arrive as
`ServerLogLine` events through the App's live state. Follow mode (f) keeps the view pinned to the
end; with it off the view stays where you scrolled while lines keep arriving.

One LogScreen is kept (ui.prepare) and given a profile each opening (`open`): for the profile it
showed last, only the lines that arrived while it was closed are appended (`ServerLive.log_total`
counts them); for another profile it is cleared and refilled, and a page answered for a profile
it no longer shows is dropped.
"""

from __future__ import annotations

import functools

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Header, Input, RichLog, Static

from moe_tui.ui.room import Room, room
from moe_tui.ui.screens.base import LiveScreen, composed
from moe_tui.ui.widgets.key_bar import KeyBar

MAX_LINES = 5000


class LogScreen(LiveScreen):
    BINDINGS = [
        Binding("f", "toggle_follow", "Follow", id="log.follow", tooltip="Keep the view at the newest line"),
        Binding("slash", "search", "Search", id="log.search", key_display="/",
                tooltip="Show only lines containing a text (empty shows all)"),
        Binding("escape", "close", "Back", id="log.close", tooltip="Back to the previous screen"),
    ]

    def __init__(self, profile: str = "") -> None:
        super().__init__()
        self.profile = profile
        self.follow = True
        self.term = ""
        self._lines: list[str] = []
        self._seen = 0  # the profile's `log_total` when its lines were last taken in

    @property
    def control(self) -> Room:
        return room(self.app)

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="◆")
        with Horizontal(id="log-bar"):
            yield Static("", id="log-status")
            yield Input(placeholder="search (enter to apply, esc to leave)", id="log-search")
        yield RichLog(id="log-view", max_lines=MAX_LINES, wrap=False, highlight=False, markup=False)
        yield KeyBar()

    def on_mount(self) -> None:
        if not composed(self):
            return  # the App closed while this screen was built off screen
        self.query_one("#log-search", Input).display = False
        self.query_one(RichLog).focus()
        self._status()
        if self.profile:
            self._read()

    def open(self, profile: str) -> None:
        """Show `profile`'s log: the same profile as last time keeps its lines (the new ones are
        appended when shown), another one starts from its own page."""
        if not self.is_mounted:
            self.profile = profile
            return  # on_mount reads the first page
        self.query_one("#log-search", Input).display = False
        self.query_one(RichLog).focus()
        if profile == self.profile:
            # The lines that came while it was closed, appended before it is shown: the layout
            # their writes ask for is then part of the showing's one repaint, not a second one.
            self.live_update({"logs"})
            return
        self.profile, self.term, self.follow = profile, "", True
        self._lines, self._seen = [], self._total()
        view = self.query_one(RichLog)
        view.clear()
        view.auto_scroll = True
        self._status()
        self._read()

    def _read(self) -> None:
        profile = self.profile
        self.control.call_core(f"read the log of {profile}", self.control.client.log_lines, profile,
                               done=functools.partial(self._initial, profile))

    def _total(self) -> int:
        live = self.control.live.servers.get(self.profile)
        return live.log_total if live else 0

    def _initial(self, profile: str, lines: list[str]) -> None:
        if profile != self.profile:
            return  # the page of a log this screen no longer shows (it was opened for another since)
        self._lines = list(lines)[-MAX_LINES:]
        live = self.control.live.servers.get(self.profile)
        self._seen = live.log_total if live else 0
        if not self._lines and live:
            self._lines = list(live.log)
        self._render_all()

    def on_screen_resume(self) -> None:
        self.live_update({"logs"})  # lines that arrived while it was closed

    def live_update(self, topics: set[str]) -> None:
        if not topics & {"logs", "servers"}:
            return
        live = self.control.live.servers.get(self.profile)
        if live is None:
            return
        # The ring is bounded: past its length, the lines in between are gone from it (the page
        # read at opening had them; a reader that fell this far behind shows the ring's lines).
        count = live.log_total - self._seen
        self._seen = live.log_total
        if count <= 0:
            return
        new = list(live.log)[-count:]
        self._lines.extend(new)
        del self._lines[:-MAX_LINES]
        view = self.query_one(RichLog)
        for line in new:
            if self._matches(line):
                view.write(self._styled(line), scroll_end=self.follow)

    def _matches(self, line: str) -> bool:
        return not self.term or self.term.lower() in line.lower()

    def _styled(self, line: str) -> Text:
        text = Text(line)
        if "ERROR" in line or "Traceback" in line:
            text.stylize("red")
        elif "WARNING" in line:
            text.stylize("yellow")
        if self.term:
            text.highlight_words([self.term], style="bold reverse", case_sensitive=False)
        return text

    def _render_all(self) -> None:
        view = self.query_one(RichLog)
        view.clear()
        shown = 0
        for line in self._lines:
            if self._matches(line):
                view.write(self._styled(line), scroll_end=False)
                shown += 1
        if self.follow:
            view.scroll_end(animate=False)
        self._status(shown)

    def _status(self, shown: int | None = None) -> None:
        text = Text.assemble(("Log ", "bold"), (self.profile, "cyan"), "  ")
        text.append("following" if self.follow else "paused (f to follow)", style="green" if self.follow else "yellow")
        if self.term:
            text.append(f"  filter {self.term!r}", style="bold")
            if shown is not None:
                text.append(f" ({shown} lines)", style="dim")
        self.query_one("#log-status", Static).update(text, layout=False)  # a fixed one-line bar

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        view = self.query_one(RichLog)
        view.auto_scroll = self.follow
        if self.follow:
            view.scroll_end(animate=False)
        self._status()

    def action_search(self) -> None:
        box = self.query_one("#log-search", Input)
        box.display = True
        box.value = self.term
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.term = event.value.strip()
        event.input.display = False
        self.query_one(RichLog).focus()
        self._render_all()

    def action_close(self) -> None:
        box = self.query_one("#log-search", Input)
        if box.display:
            box.display = False
            self.query_one(RichLog).focus()
            return
        self.app.pop_screen()
