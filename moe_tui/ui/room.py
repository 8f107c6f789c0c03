"""`Room`: what screens, widgets and the command palette may ask of the App.

Screens used to import `MoeTuiApp` for its type (an import circle: the App imports every
screen). They now see the App only through this Protocol, which `MoeTuiApp` satisfies: the live
view state, the control client, and the App's verbs (every blocking call goes through
`call_core`, so errors end in one place). `room(widget.app)` gives it, typed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, cast

from textual.worker import Worker

from moe_tui.control import CampaignPreview, CampaignRequest, ControlClient, LiveState
from moe_tui.control.seen import SeenVerdicts


class Room(Protocol):
    live: LiveState
    client: ControlClient
    compare_pair: tuple[str, str] | None
    seen: SeenVerdicts
    clock: Callable[[], float]

    @property
    def narrow(self) -> bool: ...

    def call_core(self, what: str, fn: Callable[..., Any], *args: Any,
                  done: Callable[[Any], object] | None = None, group: str = "core") -> Worker[Any]: ...

    def queue_command(self, what: str, fn: Callable[..., Any], *args: Any) -> None: ...

    def refresh_queue(self) -> None: ...

    def start_server(self, profile: str) -> None: ...

    def confirm_stop_server(self, profile: str) -> None: ...

    def add_campaign(self, request: CampaignRequest, done: Callable[[Any], object] | None = None,
                     preview: CampaignPreview | None = None) -> None: ...

    def export(self, fmt: str) -> Path | None: ...

    def open_log(self, profile: str) -> None: ...

    def open_run(self, run_id: int) -> None: ...

    def open_cell_runs(self, grid: Any, cell: Any) -> None: ...

    def gpu_owners(self) -> dict[int, str]: ...

    def push_spare(self, make: Callable[[], Any], key: Any) -> None: ...

    def switch_mode(self, mode: str) -> Any: ...

    def action_pause(self) -> None: ...

    def action_resume(self) -> None: ...

    def action_skip(self) -> None: ...


def room(app: object) -> Room:
    """The App seen as a `Room` (the one place this cast is written)."""
    return cast(Room, app)
