"""ServerPanel: one row per profile (state and startup phase, port, resolved backend with a
mismatch badge, uptime, health, running/queued requests from /metrics) and the highlighted
server's last log lines below the table.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from moe_tui.control import LiveState, ServerLive
from moe_tui.ui import render
from moe_tui.ui.widgets.keyed_table import KeyedTable
from moe_tui.ui.widgets.repaint import put

COLUMNS = (
    ("profile", "Profile", 24),
    ("state", "State", 22),
    ("port", "Port", 5),
    ("backend", "Backend (resolved)", 30),
    ("uptime", "Up", 7),
    ("health", "Health", 6),
    ("reqs", "Run/Queue", 9),
)

# Narrow terminals (80 columns): who, state, what backend actually runs, health.
COMPACT_COLUMNS = {"profile": 22, "state": 14, "backend": 24, "health": 6}
LOG_TAIL_LINES = 3


def server_cells(live: ServerLive, now: float) -> tuple[object, ...]:
    row = live.row
    name = Text(row.profile)
    state = render.state_text(row.state, row.phase if row.state == "starting" else "")
    if row.state == "failed" and live.reason:
        state = render.state_text(row.state, live.reason[:30])
    backend = Text(row.resolved_backend or row.backend or "?",
                   style="" if row.resolved_backend else "dim")
    if row.backend_mismatch:
        backend = Text.assemble(("MISMATCH", "bold white on red"), " ",
                                (row.resolved_backend or "?", "bold red"))
    if row.simulated:
        backend.append(" SIM", style="bold magenta")
    uptime = render.duration(now - row.ready_since) if row.ready_since else "—"
    if live.healthy is None:
        health: Text | str = Text("—", style="dim")
    else:
        health = Text("ok", style="green") if live.healthy else Text("FAIL", style="bold red")
    if live.running_requests is None and live.queued_requests is None:
        reqs = "—"
    else:
        reqs = f"{render.num(live.running_requests, '{:.0f}')}/{render.num(live.queued_requests, '{:.0f}')}"
    return (name, state, str(row.port or "—"), backend, uptime, health, reqs)


class ServerPanel(Vertical):
    DEFAULT_CSS = """
    ServerPanel { height: auto; }
    ServerPanel > KeyedTable { height: auto; max-height: 8; }
    ServerPanel > #server-log-tail { height: 3; color: $text-muted; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        yield KeyedTable(COLUMNS, id="server-table", middle_cut={"profile"})
        yield Static("", id="server-log-tail", markup=False)

    def on_mount(self) -> None:
        self.border_title = "Servers"

    def set_compact(self, compact: bool) -> None:
        self.query_one(KeyedTable).show_columns(COMPACT_COLUMNS if compact else None)

    @property
    def highlighted_profile(self) -> str | None:
        # None while the table is not mounted (being composed, or taken apart at exit): the
        # footer asks check_action, which asks this, at either moment.
        tables = self.query(KeyedTable)
        return tables.first().highlighted_key if tables else None

    def show(self, live: LiveState, now: float | None = None) -> None:
        now = time.time() if now is None else now
        table = self.query_one(KeyedTable)
        table.sync({name: server_cells(s, now) for name, s in live.servers.items()})
        self.show_log_tail(live)

    def show_log_tail(self, live: LiveState) -> None:
        """The newest log line of every server that has one, the highlighted server's first."""
        highlighted = self.highlighted_profile
        names = sorted(live.servers, key=lambda n: n != highlighted)
        text = Text(no_wrap=True, overflow="ellipsis")
        shown = 0
        for name in names:
            log = live.servers[name].log
            if not log:
                continue
            if shown:
                text.append("\n")
            text.append(f"{name}: ", style="cyan" if name == highlighted else "dim")
            text.append(log[-1])
            shown += 1
            if shown >= LOG_TAIL_LINES:
                break
        if not shown:
            text.append("no server log lines yet", style="dim")
        tail = self.query_one("#server-log-tail", Static)
        if tail.display:  # hidden on short terminals; 10 log lines a second must not cost a layout
            put(tail, text)

    def on_data_table_row_highlighted(self) -> None:
        app = self.app
        live = getattr(app, "live", None)
        if live is not None:
            self.show_log_tail(live)
