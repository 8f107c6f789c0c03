"""Events the core emits and both consumers (headless runner, TUI) read.

Plain frozen dataclasses with a wall-clock `time`. Producers: `servers` (server state and log
lines), `bench` (live progress, final result), `controller` (queue and run lifecycle). Consumers
never need to know which process produced an event: each event turns into one JSON object with
`to_json()`/`event_from_json()` so the detached runner can stream them to an attached TUI.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Event:
    time: float = field(default_factory=time.time, kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["type"] = type(self).__name__
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), default=str)


@dataclass(frozen=True)
class ServerStateChanged(Event):
    """A managed server changed state: stopped, starting, ready, failed, stopping."""

    profile: str
    state: str
    reason: str = ""
    phase: str = ""  # startup phase read from the log: launching, loading weights, capturing graphs, warmup, ready
    pid: int | None = None
    port: int | None = None
    resolved_backend: str | None = None
    backend_mismatch: bool = False
    exit_code: int | None = None
    exit_signal: int | None = None
    log_tail: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServerLogLine(Event):
    profile: str
    line: str


@dataclass(frozen=True)
class ServerMetrics(Event):
    """Scraped from the server's /metrics (and /health) while it is ready."""

    profile: str
    healthy: bool
    running_requests: float | None = None
    queued_requests: float | None = None
    token_usage: float | None = None
    gen_throughput: float | None = None


@dataclass(frozen=True)
class BenchProgress(Event):
    """Live figures of the running benchmark (about every 250 ms)."""

    run_id: int | None
    completed: int
    total: int
    errors: int
    elapsed_s: float
    output_tok_s: float  # sliding window
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    in_flight: int = 0
    client_lag_ms: float | None = None
    phase: str = "timed"  # "warmup" or "timed"


@dataclass(frozen=True)
class RunStarted(Event):
    run_id: int
    queue_item_id: int | None
    profile: str
    fingerprint: str
    spec_summary: str


@dataclass(frozen=True)
class RunFinished(Event):
    run_id: int
    queue_item_id: int | None
    profile: str
    status: str  # complete, incomplete, failed
    output_throughput: float | None = None
    flags: tuple[str, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class QueueChanged(Event):
    """The queue changed (added, reordered, state change); consumers re-read it from the store."""

    reason: str = ""


@dataclass(frozen=True)
class ControllerStatus(Event):
    """What the controller is doing now: idle, paused, starting-server, warmup, benchmarking, stopping."""

    activity: str
    detail: str = ""
    queue_item_id: int | None = None


@dataclass(frozen=True)
class Notice(Event):
    """Something a person should read: level info, warning or error."""

    level: str
    message: str


EVENT_TYPES: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (ServerStateChanged, ServerLogLine, ServerMetrics, BenchProgress, RunStarted,
                RunFinished, QueueChanged, ControllerStatus, Notice)
}


def event_from_dict(data: dict[str, Any]) -> Event:
    data = dict(data)
    cls = EVENT_TYPES[data.pop("type")]
    for f in dataclasses.fields(cls):
        if f.name in data and isinstance(data[f.name], list):
            data[f.name] = tuple(data[f.name])
    return cls(**data)


def event_from_json(text: str) -> Event:
    return event_from_dict(json.loads(text))
