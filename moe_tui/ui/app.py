"""MoeTuiApp: wiring only. Core events in, screens out, commands to the control client.

- Core events arrive through `ControlClient.subscribe` on any thread and are posted as messages;
  GPU snapshots are core events too (`GpuTelemetry`, from the controller's one sampler: the TUI
  runs no NVML loop of its own). They fold into `LiveState`, and the visible screens are told
  which topics changed, at most every `FLUSH_INTERVAL_S`.
- Every client call runs in a thread worker (`call_core`); results come back through a callback
  on the App's thread and every failure becomes one error toast naming the action (one place:
  `on_worker_state_changed`). An answer whose callback belongs to a screen or widget no longer
  attached (closed before the answer came) is dropped there too: late answers change nothing.
- The screens a key pushes are built once (`ui.prepare`): help, a server's log and a grid cell's
  runs are kept and updated in place each opening; the add-campaign form opens from a spare.
- Keys: each Binding has an id and a tooltip; `[keys]` in the config file remaps them by id.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from textual import events
from textual.app import App
from textual.binding import Binding
from textual.content import Content
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.worker import Worker, WorkerState

from moe_tui.control import CampaignPreview, CampaignRequest, ControlClient, ControlSnapshot, LiveState, QueueWindow
from moe_tui.control.seen import SeenVerdicts
from moe_tui.events import Notice, RunFinished
from moe_tui.ui import render
from moe_tui.ui.messages import CoreEventArrived
from moe_tui.ui.palette import ControlRoomCommands
from moe_tui.ui.prepare import Preparer, freeze_built, styled_now, thaw
from moe_tui.ui.screens.add_campaign import AddCampaignScreen
from moe_tui.ui.screens.base import LiveScreen
from moe_tui.ui.screens.cell_runs import CellRunsScreen
from moe_tui.ui.screens.compare import CompareScreen
from moe_tui.ui.screens.confirm import ConfirmScreen
from moe_tui.ui.screens.dashboard import DashboardScreen
from moe_tui.ui.screens.help import HelpScreen
from moe_tui.ui.screens.log_viewer import LogScreen
from moe_tui.ui.screens.queue import QueueScreen
from moe_tui.ui.screens.quit import QuitScreen
from moe_tui.ui.screens.run_detail import RunDetailScreen

# Repaints are coalesced: a burst of log lines or progress events costs one repaint per interval.
# 2 a second, as btop/nvitop-style monitors refresh: a live benchmark's numbers stay readable and
# its repaints cost half what 4 a second did (keys are served at once, never through this).
FLUSH_INTERVAL_S = 0.5
# From this width on, the servers and live benchmark panels sit side by side instead of stacking.
WIDE_WIDTH = 170
# Below this width the GPU panel shows its compact table (one short line per GPU).
NARROW_WIDTH = 118
# Below this height the dashboard drops what can wait (log tail, sparkline, bottom borders) so
# GPUs, servers, the live benchmark and the queue line all stay on screen (80x24 included).
SHORT_HEIGHT = 34

SCREENS = Binding.Group("Dash/Queue/Compare", compact=True)

KeptScreen = TypeVar("KeptScreen", bound=Screen[Any])


def _owner(done: Callable[[Any], object]) -> object:
    """The object a done callback belongs to: a bound method's (or a partial of one's) self."""
    if isinstance(done, functools.partial):
        done = done.func
    return getattr(done, "__self__", None)


class MoeTuiApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "moe-tui"
    COMMANDS = App.COMMANDS | {ControlRoomCommands}
    MODES = {"dashboard": DashboardScreen, "queue": QueueScreen, "compare": CompareScreen}
    DEFAULT_MODE = "dashboard"
    BINDINGS = [
        Binding("1", "show_mode('dashboard')", "Dashboard", id="screen.dashboard", group=SCREENS,
                tooltip="GPUs, servers, the live benchmark and the queue"),
        Binding("2", "show_mode('queue')", "Queue", id="screen.queue", group=SCREENS,
                tooltip="The run queue: add a campaign, reorder, retry, cancel"),
        Binding("3", "show_mode('compare')", "Compare", id="screen.compare", group=SCREENS,
                tooltip="Baseline vs candidate grid with deltas and verdicts"),
        Binding("p", "pause", "Pause", id="queue.pause",
                tooltip="Pause the queue after the current item"),
        Binding("r", "resume", "Resume", id="queue.resume", tooltip="Resume the queue"),
        Binding("n", "skip", "Skip", id="queue.skip",
                tooltip="Stop the running item and move on (marks it skipped)"),
        Binding("question_mark", "help", "Keys", id="app.help", key_display="?",
                tooltip="Show the keys of this screen"),
        Binding("q", "quit", "Quit", id="app.quit",
                tooltip="Quit (asks whether to stop running servers)"),
    ]

    def __init__(
        self,
        client: ControlClient,
        *,
        keymap: dict[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        subtitle: str = "",
        startup_notes: tuple[str, ...] = (),
        build_ahead: bool = True,
    ) -> None:
        """`build_ahead=False`: no screen is built or rendered off screen ahead of its first showing
        (`ui.prepare`): each is built when first shown, as Textual builds it. For tests of other
        things: in an App that lives a second or two, the building ahead was 40% of its CPU."""
        super().__init__()
        self.client = client
        self.live = LiveState()
        self.clock = clock
        self.compare_pair: tuple[str, str] | None = None
        self.exit_note = ""  # what to print after the App has given the terminal back
        self.seen = SeenVerdicts()  # the grid cells as the user last saw them (verdict changes are marked)
        self._keymap = dict(keymap or {})
        self._startup_notes = startup_notes
        self._dirty: set[str] = set()
        self._flush_pending = False
        self._last_flush = 0.0
        self._on_done: dict[Worker[Any], Callable[[Any], object]] = {}
        self._unsubscribe: Callable[[], None] | None = None
        # Every mode's screen is built once (see ui.prepare): with the stylesheet's count, so that
        # its first visit does not re-parse the sheet; the default mode is built as Textual builds it.
        self._modes = {name: (cls if name == self.DEFAULT_MODE else self._mode_screen(cls))
                       for name, cls in self.MODES.items()}
        self.preparer = Preparer(self, ahead=build_ahead)
        self.sub_title = render.header_subtitle(subtitle or client.mode, client.mode, client.data_dir)

    def format_title(self, title: str, sub_title: str) -> Content:
        """"moe-tui — in-process controller": Textual's own words and separator, but the blank
        before the dash ends the title's span (SVG renderers drop a span's leading blank, which
        made screenshots read "moe-tui—  in-process controller")."""
        if not sub_title:
            return Content(title)
        return Content.assemble(Content(f"{title} "), (f"— {sub_title}", "dim"))

    # -- lifecycle -----------------------------------------------------------------------------
    def on_mount(self) -> None:
        freeze_built()  # what was imported and built before the first paint (again once every screen is built)
        if self._keymap:
            self.set_keymap(self._keymap)
        self._unsubscribe = self.client.subscribe(self._post_core_event)
        self.call_core("read the controller state", self.client.snapshot, done=self._loaded)
        self.set_interval(1.0, self._tick)
        # Build the other modes' screens once the dashboard is up, one step per idle slice, so
        # that a first visit is a switch (a few ms), not a build under a key press.
        if self.preparer.ahead:
            self.call_after_refresh(self._prepare_modes)
        for note in self._startup_notes:
            self.notify(note, severity="warning", timeout=10, markup=False)

    def _prepare_modes(self) -> None:
        # The default mode's screen was styled as it mounted (after the start's stylesheet
        # refresh, which found it not mounted yet): coming back to it needs no re-parse either.
        styled_now(self, self.screen)
        self.preparer.prepare_modes([m for m in self.MODES if m != self.DEFAULT_MODE])
        # The pushed screens that are kept: built off screen too (help filled for the screen shown,
        # unless a key already switched to one still mounting: its keys are not known yet).
        if self.screen.is_mounted:
            self._kept("help", HelpScreen).show_for(self.screen)
        for name, cls in (("help", HelpScreen), ("log", LogScreen), ("cell-runs", CellRunsScreen)):
            self.preparer.keep(name, cls)

    def _kept(self, name: str, cls: type[KeptScreen]) -> KeptScreen:
        return cast(KeptScreen, self.preparer.kept(name, cls))

    def _mode_screen(self, cls: Any) -> Callable[[], Screen[Any]]:
        return lambda: styled_now(self, cls())

    def on_resize(self, event: events.Resize) -> None:
        width, height = event.size  # self.size may still be the old size while this runs
        self.set_class(width >= WIDE_WIDTH, "-wide")
        self.set_class(width < NARROW_WIDTH, "-narrow")
        self.set_class(height < SHORT_HEIGHT, "-short")
        self.mark_dirty("layout")

    @property
    def narrow(self) -> bool:
        return self.has_class("-narrow")

    def on_unmount(self) -> None:
        thaw()
        if self._unsubscribe is not None:
            self._unsubscribe()

    def _post_core_event(self, event: Any) -> None:
        # Called on whichever thread the core emits from; post_message is thread-safe.
        self.post_message(CoreEventArrived(event))

    def _loaded(self, snapshot: ControlSnapshot) -> None:
        self.live.load(snapshot)
        # The add-campaign form lists the profiles: its spare is built once they are known.
        self.preparer.prepare_spare(AddCampaignScreen, tuple(self.live.servers))
        for words in snapshot.notices:
            self.notify(words, severity="warning", markup=False)
        # "gpus" too: the controller relays an unavailable GPU snapshot once, at its start, often
        # before this App subscribed; the snapshot carries it, and the panel must say why.
        self.mark_dirty("servers", "queue", "status", "bench", "gpus")

    def _tick(self) -> None:
        self.mark_dirty("tick")
        # Batch jobs relay their nodes' GPUs through files, not events: read them once a second.
        self.call_core("read the nodes", self.client.node_rows, done=self._nodes_loaded, group="nodes-read")

    def _nodes_loaded(self, rows: tuple[Any, ...]) -> None:
        if self.live.set_nodes(rows):
            self.mark_dirty("nodes")

    # -- messages up ---------------------------------------------------------------------------
    def on_core_event_arrived(self, message: CoreEventArrived) -> None:
        event = message.event
        topic = self.live.apply(event)
        if topic == "queue" or (topic == "status" and self.live.queue_stale()):
            self.refresh_queue()
        elif topic == "notice" and isinstance(event, Notice):
            severity = {"error": "error", "warning": "warning"}.get(event.level, "information")
            self.notify(event.message, severity=severity, markup=False)  # type: ignore[arg-type]
        elif isinstance(event, RunFinished):
            self.refresh_queue()
            for screen in self.screen_stack:  # a dialog waiting on runs (explain's profiled ones) reads again
                hook = getattr(screen, "run_finished", None)
                if callable(hook):
                    hook()
        self.mark_dirty(topic)

    def refresh_queue(self) -> None:
        # One page, the one the Queue screen shows (`LiveState.queue_view`); the newest read wins.
        self.call_core("read the queue", functools.partial(self.client.queue_window, **self.live.queue_request()),
                       done=self._queue_loaded, group="queue-read")

    def _queue_loaded(self, window: QueueWindow) -> None:
        self.live.set_queue(window)
        self.mark_dirty("queue")

    # -- attributes down -----------------------------------------------------------------------
    def mark_dirty(self, *topics: str) -> None:
        self._dirty.update(topics)
        if self._flush_pending:
            return
        self._flush_pending = True
        wait = self._last_flush + FLUSH_INTERVAL_S - time.monotonic()
        if wait > 0:
            self.set_timer(wait, self._flush_dirty)
        else:
            self.call_later(self._flush_dirty)

    def _flush_dirty(self) -> None:  # not `_flush`: that is Textual's own (stdout) method
        self._flush_pending = False
        self._last_flush = time.monotonic()
        topics, self._dirty = self._dirty, set()
        if not topics or not self.is_running or not self.screen_stack:
            return  # a timer that fired while the app is shutting down
        # Only what can be seen is updated: the top screen, and the screens under it while it is a
        # modal (they show around the dialog). A screen covered by a full screen, or another mode,
        # catches up from LiveState when it is shown again (on_screen_resume), except for the
        # topics it keeps up with off screen (BACKGROUND_TOPICS: the Queue's rows, so that a queue
        # of thousands is painted before the key, not after it).
        visible = []
        for screen in reversed(self.screen_stack):
            visible.append(screen)
            if not isinstance(screen, ModalScreen):
                break
        with self.batch_update():
            for screen in visible:
                if isinstance(screen, LiveScreen) and screen.is_mounted:
                    screen.live_update(topics)
            for stack in self._screen_stacks.values():  # the other modes' screens, off screen
                hidden = stack[0] if stack else None
                if isinstance(hidden, LiveScreen) and hidden not in visible and hidden.is_mounted \
                        and topics & hidden.BACKGROUND_TOPICS:
                    hidden.live_update(topics & hidden.BACKGROUND_TOPICS)
        if isinstance(self.screen, LiveScreen):
            self.screen.maybe_refresh_bindings()

    def binding_state(self) -> tuple[object, ...]:
        """What the App's check_action depends on (see LiveScreen.maybe_refresh_bindings)."""
        live = self.live
        return (live.paused, live.current_item is not None or live.bench.run is not None, self.current_mode)

    def gpu_owners(self) -> dict[int, str]:
        """pid -> profile name for the GPU processes of the latest snapshot that belong to a server
        (its leader or any descendant: SGLang's TP schedulers hold the GPUs). The controller decides
        it with judgement's one rule and sends it with each snapshot; the UI only shows it."""
        leaders = {s.row.pid: name for name, s in self.live.servers.items() if s.row.pid}
        return leaders | self.live.gpu_owners

    # -- one place for blocking calls and their errors -----------------------------------------
    def call_core(self, what: str, fn: Callable[..., Any], *args: Any,
                  done: Callable[[Any], object] | None = None, group: str = "core") -> Worker[Any]:
        worker = self.run_worker(lambda: fn(*args), name=what, group=group, thread=True,
                                 exit_on_error=False, exclusive=group != "core")
        if done is not None:
            self._on_done[worker] = done
        return worker

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if event.state == WorkerState.SUCCESS:
            done = self._on_done.pop(worker, None)
            owner = _owner(done) if done is not None else None
            if isinstance(owner, Widget) and not owner.is_attached:
                return  # its screen was closed (or a spare dropped) before the answer came
            if done is not None:
                done(worker.result)
        elif event.state == WorkerState.ERROR:
            self._on_done.pop(worker, None)
            self.notify(f"{worker.name}: {worker.error}", title="Failed", severity="error", timeout=8, markup=False)
        elif event.state == WorkerState.CANCELLED:
            self._on_done.pop(worker, None)

    # -- verbs (bindings, screens and the command palette all end here) ------------------------
    def start_server(self, profile: str) -> None:
        self.call_core(f"start server {profile}", self.client.start_server, profile)

    def stop_server(self, profile: str) -> None:
        self.call_core(f"stop server {profile}", self.client.stop_server, profile)

    def confirm_stop_server(self, profile: str) -> None:
        def answer(yes: bool | None) -> None:
            if yes:
                self.stop_server(profile)

        self.push_screen(ConfirmScreen(f"Stop the server of {profile}?",
                                       "A benchmark running on it will fail.", confirm="Stop"), answer)

    def queue_command(self, what: str, fn: Callable[..., Any], *args: Any) -> None:
        self.call_core(what, fn, *args, done=lambda _: self.refresh_queue())

    def add_campaign(self, request: CampaignRequest, done: Callable[[Any], object] | None = None,
                     preview: CampaignPreview | None = None) -> None:
        def added(count: Any) -> None:
            name = request.name or (preview.name if preview else "") or ", ".join(request.profiles)
            control = f", {preview.control_items} of them control runs" if preview and preview.control_items else ""
            self.notify(f"added campaign {name!r}: {count} item(s){control}", markup=False)
            self.refresh_queue()
            if done is not None:
                done(count)

        self.call_core("add campaign", self.client.add_campaign, request, done=added)

    def export(self, fmt: str) -> None:
        if self.compare_pair is None:
            self.notify("export: pick a baseline and a candidate on the Compare screen (3) first",
                        severity="error")
            return
        baseline, candidate = self.compare_pair

        def written(path: Path) -> None:
            self.notify(f"{fmt} written to {path}", title="Exported", timeout=12, markup=False)

        self.call_core(f"export {fmt}", self.client.export, baseline, candidate, fmt, done=written)

    def push_spare(self, make: Callable[[], Screen[Any]], key: Any) -> None:
        """Open a dialog made anew each opening from the spare prepared off screen (ui.prepare);
        the next spare is prepared once this one is closed."""
        self.push_screen(self.preparer.spare(make, key), lambda _: self.preparer.prepare_spare(make, key))

    def open_log(self, profile: str) -> None:
        screen = self._kept("log", LogScreen)
        screen.open(profile)
        self.push_screen(screen)

    def open_cell_runs(self, grid: Any, cell: Any) -> None:
        screen = self._kept("cell-runs", CellRunsScreen)
        screen.show(grid, cell)
        self.push_screen(screen)

    def open_run(self, run_id: int) -> None:
        self.push_screen(RunDetailScreen(run_id))

    # -- actions -------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Pause and resume are two sides of one switch: only the one that applies is shown.
        if action == "pause":
            return not self.live.paused
        if action == "resume":
            return self.live.paused
        if action == "skip":
            return True if self.live.current_item is not None or self.live.bench.run is not None else None
        if action == "show_mode":
            at_base = len(self.screen_stack) <= 1
            return None if parameters and parameters[0] == self.current_mode and at_base else True
        return True

    async def action_show_mode(self, mode: str) -> None:
        # `1`/`2`/`3` always land on the mode's own screen: a log or run detail left open over it
        # is closed (k9s-style: a screen key is a way home, not back into a stacked detail).
        if mode != self.current_mode:
            await self.switch_mode(mode)
        while len(self.screen_stack) > 1:
            await self.pop_screen()

    def action_pause(self) -> None:
        self.queue_command("pause the queue", self.client.pause)

    def action_resume(self) -> None:
        self.queue_command("resume the queue", self.client.resume)

    def action_skip(self) -> None:
        """Stopping a benchmark loses its run: asked first (`n` is also what vim and less users press
        after `/`); `n` again or Esc backs out."""
        if isinstance(self.screen, ConfirmScreen):
            return
        item = self.live.current_item
        what = f"item {item}" if item is not None else "the running benchmark"

        def answer(yes: bool | None) -> None:
            if yes:
                self.queue_command("skip the running item", self.client.skip)

        self.push_screen(ConfirmScreen(f"Skip {what}?", "Its benchmark stops now and the item is marked skipped "
                                       "(retry brings it back).", confirm="Skip"), answer)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
            return
        screen = self._kept("help", HelpScreen)
        screen.show_for(self.screen)
        self.push_screen(screen)

    async def action_quit(self) -> None:
        running = self.live.running_servers()
        if not running and not self.client.can_detach:
            self._leave(stop_servers=False)
            return
        # Attached to a runner, quitting always asks: the runner (and its queue) lives on unless
        # told to stop, and leaving it is the point of running one.
        counts = self.live.queue_counts()
        pending = counts.get("pending", 0) + counts.get("running", 0)

        def answer(choice: str | None) -> None:
            if choice in ("stop", "leave"):
                self._leave(stop_servers=choice == "stop")

        self.push_screen(QuitScreen(running, can_detach=self.client.can_detach, pending=pending,
                                    attach_command=self.client.attach_command), answer)

    def _leave(self, stop_servers: bool) -> None:
        if self.client.can_detach:
            what = "stop the servers and the runner" if stop_servers else "detach from the runner"
        else:
            what = "stop servers and quit" if stop_servers else "quit"
        if stop_servers:
            self.notify("stopping the servers" + (" and the runner" if self.client.can_detach else "") + "…",
                        timeout=30)
        if self.client.can_detach and not stop_servers:  # printed once the terminal is back (commands.tui)
            self.exit_note = (f"the runner keeps working {self.client.data_dir}; "
                              f"attach again with: {self.client.attach_command}")
        self.call_core(what, self.client.shutdown, stop_servers, done=lambda _: self.exit())
