"""Events the core emits and both consumers (headless runner, TUI) read.

Plain frozen dataclasses with a wall-clock `time`. Producers: `servers` (server state and log
lines), `bench` (live progress, final result), `controller` (queue and run lifecycle). Consumers
never need to know which process produced an event: each event turns into one JSON object with
`to_json()`/`event_from_json()` so the detached runner can stream them to an attached TUI.

`Subscribers` is the one subscriber list every producer uses (controller, queue, server manager,
telemetry, the control clients), with one error policy: a callback that raises is logged (logger
`moe_tui.events`, with its traceback) and KEPT. A consumer's bug must never undo or hide a change
already committed, nor stop the other consumers from hearing of it; and one bad event must not
silently cut a consumer off for the rest of the session. Callbacks run on the emitter's thread.

Core module: imports nothing from moe_tui.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from moe_tui.records import EventJson, GpuSnapshotJson

log = logging.getLogger(__name__)
T = TypeVar("T")


class Subscribers(Generic[T]):
    """A thread-safe list of callbacks taking one value; `add` returns the unsubscribe function."""

    def __init__(self, name: str) -> None:
        self.name = name  # named in the log line when a callback fails
        self._callbacks: list[Callable[[T], object]] = []
        self._lock = threading.Lock()

    def add(self, callback: Callable[[T], object]) -> Callable[[], None]:
        with self._lock:
            self._callbacks.append(callback)

        def remove() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return remove

    def __len__(self) -> int:
        with self._lock:
            return len(self._callbacks)

    def emit(self, value: T) -> None:
        """Call every callback with `value`; a failing one is logged and kept (see module doc)."""
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback(value)
            except Exception:
                log.exception("%s: subscriber %r failed on %r", self.name, callback, value)


@dataclass(frozen=True)
class Event:
    time: float = field(default_factory=time.time, kw_only=True)

    def to_dict(self) -> EventJson:
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


@dataclass(frozen=True)
class GpuTelemetry(Event):
    """One NVML snapshot of every GPU (`telemetry.TelemetrySnapshot.to_dict()`), from the
    controller's one sampler, about once a second: the TUI draws from these and samples nothing."""

    snapshot: GpuSnapshotJson
    # pid (as text: JSON keys) -> server profile for the GPU processes that belong to a server (its
    # leader or any descendant, judgement's one rule); a listed pid absent here is foreign.
    owners: dict[str, str] = field(default_factory=dict)


EVENT_TYPES: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (ServerStateChanged, ServerLogLine, ServerMetrics, BenchProgress, RunStarted,
                RunFinished, QueueChanged, ControllerStatus, Notice, GpuTelemetry)
}


def event_from_dict(data: EventJson) -> Event:
    data = dict(data)
    cls = EVENT_TYPES[data.pop("type")]
    for f in dataclasses.fields(cls):
        if f.name in data and isinstance(data[f.name], list):
            data[f.name] = tuple(data[f.name])
    return cls(**data)


def event_from_json(text: str) -> Event:
    return event_from_dict(json.loads(text))
