"""Building the control room: a connected control client (`control.launch.connect`) and the App.

`open_control_room` is what `moe-tui` and `moe-tui demo` run, and what the screenshot script and
the end-to-end tests use, so all of them exercise the same startup. Every startup problem raises
SystemExit with one line naming what and where (from `connect`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from moe_tui.control import ControlClient
from moe_tui.control.launch import DEMO_CAMPAIGN, config_file, connect
from moe_tui.records import Options
from moe_tui.ui.app import MoeTuiApp
from moe_tui.ui.keymap import load_keymap


@dataclass
class ControlRoom:
    app: MoeTuiApp
    client: ControlClient
    notes: list[str] = field(default_factory=list)
    started_runner: int | None = None  # pid of the runner this startup spawned, if any

    @property
    def adapter(self) -> ControlClient:
        """The old name of `client` (scripts and tests written before the control package)."""
        return self.client


def open_control_room(profiles_dir: Path, *, attach: bool | None = None, demo: bool = False,
                      controller_options: Options | None = None) -> ControlRoom:
    """Connect the control client (see `control.launch.connect`) and build the App around it."""
    conn = connect(profiles_dir, attach=attach, demo=demo, controller_options=controller_options)
    keymap, problems = load_keymap(config_file())
    notes = conn.notes + problems
    subtitle = ("DEMO  ·  " if demo else "") + conn.client.mode  # first: an 80-column header keeps it
    app = MoeTuiApp(conn.client, keymap=keymap, subtitle=subtitle, startup_notes=tuple(notes))
    if demo:
        app.compare_pair = (DEMO_CAMPAIGN.profiles[0], DEMO_CAMPAIGN.profiles[1])  # baseline cutlass, candidate cutedsl
    return ControlRoom(app, conn.client, notes, conn.started_runner)
