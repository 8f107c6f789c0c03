"""The message that carries core events (GPU telemetry included) up to the App.

Control-client callbacks post it (thread-safe); it never touches widgets. The high-rate events
(GPU snapshots, live benchmark progress, /metrics scrapes) collapse in `can_replace`, so a backlog
shrinks to the newest instead of being painted one stale frame at a time.
"""

from __future__ import annotations

from textual.message import Message

from moe_tui.events import BenchProgress, Event, GpuTelemetry, ServerMetrics


class CoreEventArrived(Message):
    """One event from the controller (in-process or relayed by a runner)."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event

    def can_replace(self, message: Message) -> bool:
        if not isinstance(message, CoreEventArrived):
            return False
        mine, theirs = self.event, message.event
        # Only the newest live figure matters; server state changes and log lines never collapse.
        if isinstance(mine, BenchProgress) and isinstance(theirs, BenchProgress):
            return mine.run_id == theirs.run_id
        if isinstance(mine, GpuTelemetry) and isinstance(theirs, GpuTelemetry):
            return True
        if isinstance(mine, ServerMetrics) and isinstance(theirs, ServerMetrics):
            return mine.profile == theirs.profile
        return False
