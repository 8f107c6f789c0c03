"""DashboardScreen (the default): GPUs, batch jobs' nodes, servers, the live benchmark and the queue at a glance."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Header

from moe_tui.judgement import can_start, can_stop
from moe_tui.ui.room import Room, room
from moe_tui.ui.screens.base import LiveScreen, composed
from moe_tui.ui.widgets.bench_panel import BenchPanel
from moe_tui.ui.widgets.gpu_panel import GpuPanel
from moe_tui.ui.widgets.key_bar import KeyBar
from moe_tui.ui.widgets.node_panel import NodePanel
from moe_tui.ui.widgets.queue_summary import QueueSummary
from moe_tui.ui.widgets.server_panel import ServerPanel


class DashboardScreen(LiveScreen):
    # The main table has the focus (and a visible cursor) from the start: arrows, j/k and / work at once.
    AUTO_FOCUS = "#server-table"
    BINDINGS = [
        Binding("s", "start_server", "Start", id="server.start",
                tooltip="Start the highlighted profile's server"),
        Binding("x", "stop_server", "Stop", id="server.stop",
                tooltip="Stop the highlighted profile's server (asks first)"),
        Binding("l", "open_log", "Log", id="server.log",
                tooltip="Open the highlighted server's log viewer"),
        Binding("o", "open_run", "Run", id="run.open",
                tooltip="Open the detail of the current or last run"),
    ]

    @property
    def control(self) -> Room:
        return room(self.app)

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="◆")
        with VerticalScroll(id="dashboard-body"):
            yield GpuPanel(id="gpu-panel", classes="panel")
            yield NodePanel(id="node-panel", classes="panel")
            with Horizontal(id="dashboard-lower"):
                yield ServerPanel(id="server-panel", classes="panel")
                yield BenchPanel(id="bench-panel", classes="panel")
            yield QueueSummary(id="queue-summary", classes="panel")
        yield KeyBar()

    def on_mount(self) -> None:
        if not composed(self):
            return  # the App closed while this screen was built off screen
        self.live_update({"layout", "servers", "logs", "bench", "queue", "status", "gpus", "nodes"})

    def on_screen_resume(self) -> None:
        self.live_update({"layout", "servers", "logs", "bench", "queue", "status", "gpus", "nodes"})

    def live_update(self, topics: set[str]) -> None:
        app = self.control
        live = app.live
        if "layout" in topics:
            self.query_one(GpuPanel).set_compact(app.narrow)
            self.query_one(ServerPanel).set_compact(app.narrow)
            self.query_one(NodePanel).set_compact(app.narrow)
        if "gpus" in topics:
            self.query_one(GpuPanel).show(live.telemetry, live.gpu_util, live.gpu_mem, app.gpu_owners())
        if topics & {"nodes", "layout"}:
            self.query_one(NodePanel).show(app.live.nodes)
        if topics & {"servers", "logs", "tick"}:
            self.query_one(ServerPanel).show(live, now=app.clock())
        if topics & {"bench", "servers", "status"}:  # status: what comes before a run (a server starting)
            self.query_one(BenchPanel).show(live)
        if topics & {"queue", "status"}:
            self.query_one(QueueSummary).show(live)

    # -- actions -------------------------------------------------------------------------------
    def _profile(self) -> str | None:
        panels = self.query(ServerPanel)  # none while composing or at exit (check_action asks then)
        return panels.first().highlighted_profile if panels else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        live = self.control.live
        profile = self._profile()
        state = live.servers[profile].row.state if profile in live.servers else None
        if action == "start_server":
            return True if state is not None and can_start(state) else None
        if action == "stop_server":
            return True if can_stop(state) else None
        if action == "open_log":
            return True if profile else None
        if action == "open_run":
            bench = live.bench
            return True if bench.run or bench.last_finished else None
        return True

    def action_start_server(self) -> None:
        profile = self._profile()
        if profile:
            self.control.start_server(profile)

    def action_stop_server(self) -> None:
        profile = self._profile()
        if profile:
            self.control.confirm_stop_server(profile)

    def action_open_log(self) -> None:
        profile = self._profile()
        if profile:
            self.control.open_log(profile)

    def action_open_run(self) -> None:
        bench = self.control.live.bench
        run_id = bench.run.run_id if bench.run else bench.last_finished.run_id if bench.last_finished else None
        if run_id is not None:
            self.control.open_run(run_id)

    def binding_state(self) -> tuple[object, ...]:
        live = self.control.live
        profile = self._profile()
        state = live.servers[profile].row.state if profile in live.servers else None
        return (profile, state, live.bench.run is not None or live.bench.last_finished is not None)

    def on_data_table_row_highlighted(self) -> None:
        self.maybe_refresh_bindings()
