"""ControlRoomCommands: the command palette's context verbs.

"server: start <profile>" for stopped servers, "server: stop <profile>" for running ones,
"queue: pause" or "queue: resume" (whichever applies), "queue: skip" while something runs,
"export: markdown"/"export: csv", the screens, and every key of the screen the palette was
opened on that applies now ("queue: add (a)", "compare: swap (w)", "compare: investigate (i)").
Each verb ends in the same App method or action the matching key calls, so the palette can never
do something a key cannot, and can do everything a key can.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.screen import Screen

from moe_tui.judgement import can_start, can_stop
from moe_tui.ui.room import Room, room


def palette_verbs(app: Room) -> list[tuple[str, Callable[[], object], str]]:
    """(text, callback, help) for what makes sense right now."""
    live = app.live
    verbs: list[tuple[str, Callable[[], object], str]] = []
    for name, server in live.servers.items():
        state = server.row.state
        if can_start(state):
            verbs.append((f"server: start {name}", partial(app.start_server, name),
                          f"launch {name} on port {server.row.port}"))
        if can_stop(state):
            verbs.append((f"server: stop {name}", partial(app.confirm_stop_server, name),
                          "SIGTERM, grace, then SIGKILL the process group"))
    if live.paused:
        verbs.append(("queue: resume", app.action_resume, "start the next pending item"))
    else:
        verbs.append(("queue: pause", app.action_pause, "finish the running item, then wait"))
    if live.current_item is not None or live.bench.run is not None:
        verbs.append(("queue: skip", app.action_skip, "stop the running item and move on"))
    verbs.append(("export: markdown", partial(app.export, "markdown"), "the comparison with provenance"))
    verbs.append(("export: csv", partial(app.export, "csv"), "the comparison grid as CSV"))
    for mode, label in (("dashboard", "dashboard"), ("queue", "queue"), ("compare", "comparison")):
        verbs.append((f"screen: {label}", partial(app.switch_mode, mode), f"open the {label} screen"))
    return verbs


def screen_verbs(screen: Screen[Any]) -> list[tuple[str, Callable[[], object], str]]:
    """Every key of `screen` that applies now, as "<screen>: <what it does>" (the App's own keys
    and the screens' switches are in `palette_verbs`). Each runs the very action its key runs."""
    name = type(screen).__name__.removesuffix("Screen").lower()
    verbs: list[tuple[str, Callable[[], object], str]] = []
    seen: set[str] = set()
    for active in screen.active_bindings.values():
        binding, node = active.binding, active.node
        if not active.enabled or binding.system or node is screen.app or not binding.id or binding.id in seen:
            continue
        seen.add(binding.id)
        key = screen.app.get_key_display(binding)
        verbs.append((f"{name}: {binding.description.lower()} ({key})",
                      partial(screen.app.call_later, screen.app.run_action, binding.action, node), binding.tooltip))
    return verbs


class ControlRoomCommands(Provider):
    def _verbs(self) -> Iterator[tuple[str, Callable[[], object], str]]:
        yield from screen_verbs(self.screen)
        yield from palette_verbs(room(self.app))

    async def discover(self) -> Hits:
        for text, callback, help_text in self._verbs():
            yield DiscoveryHit(text, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, callback, help_text in self._verbs():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), callback, text=text, help=help_text)
