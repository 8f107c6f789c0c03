"""Screens built once, off screen: a key that switches screens is a switch, never a build.

Textual builds a mode's screen on its first `switch_mode`: compose and mount every widget, style
them, lay them out and render every line for the first time; and a screen made that way is behind
the App's CSS count, so the switch also re-parses the whole stylesheet (50-90 ms on its own on a
2-core box). Measured before this module: first visits 77-165 ms on a quiet 16-core host.

So the App builds each mode's screen after its first paint, one step per idle slice (a key pressed
in between is served first):

1. mount the screen (`App._init_mode`: what `switch_mode` runs for a new mode, minus making it
   current), with the CSS count of the sheet it was styled from, so that no re-parse follows;
2. once mounted, lay it out and render it off screen, a band of a widget's lines a step: every
   widget's lines are then cached, and the first visit repaints from the cache like any later one.

A screen whose content arrives while another screen is shown (the comparison grid is built in a
worker) renders itself off screen again then (`LiveScreen.prerender_soon`).

A dialog that is made anew for each opening (the add-campaign form) is kept as one spare: built,
mounted and rendered off screen before it is asked for (`Preparer.spare`); the key takes it and the
next spare is built in idle slices once the form is closed. A spare built for other input (`key`: the profiles the
form lists) is dropped, never shown.

A screen that only shows other data each opening (help's key table, a server's log, a grid cell's
runs) is kept: one instance, installed so that closing it does not take it apart, built off screen
once (`Preparer.keep`), and updated in place by its screen before each showing (`Preparer.kept`).
Pushing a kept screen costs its repaint only: measured before, help, log and cell runs were built
on every key (76-322 ms an open on a quiet 16-core host).
Textual has no public API for either step: the private names used are listed here, in one place.
"""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, cast

from textual import events
from textual.app import App
from textual.geometry import Region
from textual.screen import Screen

# A slice of preparation runs at most this long (then keys and repaints are served) ...
SLICE_S = 0.008
# ... and the next one starts this much later.
STEP_S = 0.02

# Off-screen layouts of one screen in one preparation (a layout asked for during one asks for another).
LAYOUT_PASSES = 2

# Lines of one widget rendered in one step (a table's first render is about 1 ms a line).
BAND_LINES = 8

Steps = Iterator[None]


def freeze_built() -> None:
    """Move every object alive now out of the cyclic collector's reach (`gc.freeze`): the modules,
    the App and the screens built so far live as long as the App. A full collection walked them
    all: a 50-130 ms stall on a 2-core box, at start or under the first key after it (issue 26).
    The cost: cyclic garbage among them (a spare dropped later) is not collected until `thaw`."""
    gc.freeze()


def thaw() -> None:
    """Give what `freeze_built` froze back to the collector (the App is going: in a process that
    runs many Apps, the tests, their garbage must not outlive them)."""
    gc.unfreeze()


def styled_now(app: App[None], screen: Screen[Any]) -> Screen[Any]:
    """`screen` marked as styled from the App's current stylesheet (it is: widgets are styled as
    they mount), so a switch to it does not re-parse the sheet. A theme change still does: it bumps
    the App's count past this one."""
    screen._css_update_count = app._css_update_count
    return screen


class KeepStyles:
    """Mixed into a Screen: shown again, it keeps its styles unless the App's classes changed.

    Textual restyles every widget of a screen each time it is shown, and a restyled DataTable or
    Input drops every cached render (it re-renders every visible line: most of a switch's cost).
    Nothing a style depends on changed while the screen was away unless the App's classes did
    (-narrow/-short/-wide after a resize; a theme change re-parses the sheet anyway)."""

    _styled_with: frozenset[str] | None = None

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        classes = frozenset(cast(Screen[Any], self).app.classes)
        if classes == self._styled_with:
            event.refresh_styles = False
        self._styled_with = classes


def _ready(app: App[None], screen: Screen[Any]) -> bool:
    return bool(app.is_running and not screen.is_current and screen.is_mounted and app.size)


def render_off_screen(app: App[None], screen: Screen[Any]) -> Steps:
    """Lay out `screen` while another is shown, then render its widgets' lines one widget a step
    (what Textual does on a switch, without the output); stops when the screen is shown. Done
    again (up to LAYOUT_PASSES times) when a layout was asked for meanwhile: a table just filled
    measures its rows when idle, after the first pass, and asks for one."""
    for _ in range(LAYOUT_PASSES):
        if not _ready(app, screen):
            return
        screen._refresh_layout(app.size)
        # Laid out now: a layout asked for before this one is done (a request made after sets it
        # again), so showing the screen is one repaint, not a second layout first.
        screen._layout_required = False
        yield
        for widget, (region, clip) in list(screen._compositor.visible_widgets.items()):
            x, y, width, height = region.intersection(clip)  # the crop the compositor asks for
            for band in range(0, height, BAND_LINES):  # a tall table is rendered a band of lines a step
                if not _ready(app, screen):
                    return
                if widget.is_mounted:
                    widget.render_lines(Region(x - region.x, y - region.y + band, width,
                                               min(BAND_LINES, height - band)))
                yield
        if not screen._layout_required:
            return


def prerender_soon(screen: Screen[Any]) -> None:
    """Render `screen` off screen again in an idle slice (its content changed while not shown)."""
    preparer = getattr(screen.app, "preparer", None)
    if isinstance(preparer, Preparer) and not screen.is_current:
        preparer.add(render_off_screen(screen.app, screen))


def mount_off_screen(app: App[None], mode: str) -> Steps:
    """Build `mode`'s screen (`App._init_mode`: what `switch_mode` runs for a new mode, minus
    making it current), wait for its widgets to mount, then render it off screen."""
    stack = app._screen_stacks.get(mode)
    if not stack:  # not built yet (a key may have asked for it first)
        app._init_mode(mode)
        stack = app._screen_stacks[mode]
    while app.is_running and not stack[0].is_mounted:
        yield
    yield from render_off_screen(app, stack[0])


class Preparer:
    """Runs preparation jobs (generators of steps) in idle slices: each slice runs steps for at
    most SLICE_S, then yields the event loop for STEP_S."""

    def __init__(self, app: App[None], *, ahead: bool = True) -> None:
        self.app = app
        self.ahead = ahead  # False: no job runs (nothing is built ahead; see MoeTuiApp's build_ahead)
        self._jobs: deque[Steps] = deque()
        self._scheduled = False
        self._spares: dict[Callable[[], Screen[Any]], tuple[Hashable, Screen[Any]]] = {}
        self._kept: dict[str, Screen[Any]] = {}

    def add(self, job: Steps) -> None:
        if not self.ahead:
            return
        self._jobs.append(job)
        if not self._scheduled:
            self._scheduled = True
            self.app.set_timer(STEP_S, self._slice)

    def spare(self, make: Callable[[], Screen[Any]], key: Hashable) -> Screen[Any]:
        """A screen for `key` made by `make`: the spare built off screen if it was made for this
        key and is mounted, else a new one. The caller prepares the next spare once this one is
        closed (`prepare_spare`): mounting one is a stall of its own, never under a key."""
        ready = self._spares.pop(make, None)
        if ready is not None and (ready[0] != key or not ready[1].is_mounted):
            ready[1].remove()  # made for other input, or still mounting: a fresh one is as fast
            ready = None
        return ready[1] if ready is not None else styled_now(self.app, make())

    def prepare_spare(self, make: Callable[[], Screen[Any]], key: Hashable) -> None:
        self.add(self._build_spare(make, key))

    def _build_spare(self, make: Callable[[], Screen[Any]], key: Hashable) -> Steps:
        app: Any = self.app
        old = self._spares.get(make)
        if old is not None:
            if old[0] == key:
                return  # one is ready (or being built) for this input
            del self._spares[make]
            old[1].remove()
        screen = styled_now(app, make())
        app._register(app, screen)  # what push_screen does for a new screen, minus showing it
        self._spares[make] = (key, screen)
        while app.is_running and not screen.is_mounted:
            yield
        if isinstance(screen, KeepStyles):  # styled as it mounted: its first showing keeps them
            screen._styled_with = frozenset(app.classes)
        yield from render_off_screen(app, screen)

    def keep(self, name: str, make: Callable[[], Screen[Any]]) -> Screen[Any]:
        """Build the screen kept as `name` off screen now (in idle slices), before any key asks."""
        screen = self.kept(name, make)
        self.add(self._build_kept(screen))
        return screen

    def kept(self, name: str, make: Callable[[], Screen[Any]]) -> Screen[Any]:
        """The one screen kept as `name` (made, installed and styled the first time it is asked
        for). The caller updates it for this opening, then pushes it. While it is already shown
        (in any mode's stack: one instance cannot be in two places) a fresh, unkept one is given."""
        app: Any = self.app
        screen = self._kept.get(name)
        if screen is None:
            screen = self._kept[name] = styled_now(app, make())
            app.install_screen(screen, f"kept:{name}")
        elif any(screen in stack for stack in app._screen_stacks.values()):
            return styled_now(app, make())
        return screen

    def _build_kept(self, screen: Screen[Any]) -> Steps:
        app: Any = self.app
        if screen not in app._registry:  # not pushed yet by a key that came first
            app._register(app, screen)  # what push_screen does for a new screen, minus showing it
        while app.is_running and not screen.is_mounted:
            yield
        if isinstance(screen, KeepStyles) and screen._styled_with is None:  # styled as it mounted
            screen._styled_with = frozenset(app.classes)
        yield from render_off_screen(app, screen)

    def prepare_modes(self, modes: Iterable[str]) -> None:
        for mode in modes:
            self.add(mount_off_screen(self.app, mode))

    @property
    def done(self) -> bool:
        return not self._jobs

    def _slice(self) -> None:
        self._scheduled = False
        app: Any = self.app
        end = time.perf_counter() + SLICE_S
        while self._jobs and app.is_running and time.perf_counter() < end:
            try:
                next(self._jobs[0])
            except StopIteration:
                self._jobs.popleft()
        if self._jobs and app.is_running:
            self._scheduled = True
            app.set_timer(STEP_S, self._slice)
        elif not self._jobs:
            freeze_built()
