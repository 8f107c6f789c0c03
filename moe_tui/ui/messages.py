"""Messages that carry core events and telemetry up to the App.

Workers and adapter callbacks post these (thread-safe); they never touch widgets. The high-rate
ones (`TelemetryArrived`, live benchmark progress, /metrics scrapes) define `can_replace`, so a
backlog collapses to the newest instead of being painted one stale frame at a time.
"""

from __future__ import annotations

from typing import Any

from textual.message import Message

from moe_tui.events import BenchProgress, Event, ServerMetrics
from moe_tui.telemetry import TelemetrySnapshot


class TelemetryArrived(Message):
    """One NVML snapshot of every GPU."""

    def __init__(self, snapshot: TelemetrySnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, TelemetryArrived)


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
        if isinstance(mine, ServerMetrics) and isinstance(theirs, ServerMetrics):
            return mine.profile == theirs.profile
        return False


class AdapterResult(Message):
    """A blocking adapter call finished in a thread worker; `tag` says which one."""

    def __init__(self, tag: str, value: Any) -> None:
        super().__init__()
        self.tag = tag
        self.value = value
