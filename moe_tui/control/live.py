"""The control room's picture of "now": core events and GPU snapshots folded into view state.

`LiveState` keeps, per profile, the latest server state, /metrics scrape and a log ring; the
current run and its progress with a short throughput history for the sparkline; the controller's
activity; and a bounded per-GPU history for the GPU sparklines. It derives nothing the core
decides (verdicts, flags, fingerprints): it only remembers what it was told, most recent first.
Pure Python, no Textual, so it is cheap to test and to feed from a benchmark script.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from moe_tui.control.api import QUEUE_PAGE, ControlSnapshot, QueueRow, QueueWindow, ServerRow
from moe_tui.events import (
    BenchProgress,
    ControllerStatus,
    Event,
    GpuTelemetry,
    Notice,
    QueueChanged,
    RunFinished,
    RunStarted,
    ServerLogLine,
    ServerMetrics,
    ServerStateChanged,
)
from moe_tui.executors.nodes import NodeRow
from moe_tui.judgement import is_live
from moe_tui.telemetry import TelemetrySnapshot

# 3 minutes of 1 Hz GPU samples; 2 minutes of 4 Hz benchmark progress.
GPU_HISTORY = 180
BENCH_HISTORY = 480
LOG_RING = 500


@dataclass
class ServerLive:
    row: ServerRow
    healthy: bool | None = None
    running_requests: float | None = None
    queued_requests: float | None = None
    token_usage: float | None = None
    reason: str = ""
    log: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=LOG_RING))
    # Lines ever added to `log`: the ring's length stops growing once full, this count does not
    # (a viewer appends the lines past the count it last showed).
    log_total: int = 0

    def add_log(self, lines: Sequence[str]) -> None:
        self.log.extend(lines)
        self.log_total += len(lines)


@dataclass
class QueueView:
    """Which page of the queue the Queue screen shows: where its window starts, its filter words
    and its highlighted item (kept in the page when the queue changes under it)."""

    offset: int = 0
    words: tuple[str, ...] = ()
    around: int | None = None


@dataclass
class BenchLive:
    run: RunStarted | None = None
    progress: BenchProgress | None = None  # the current run's (timed phase and its own warmup requests)
    warmup: BenchProgress | None = None  # the warmup pass before a run (no run id yet; discarded)
    tok_s: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=BENCH_HISTORY))
    last_finished: RunFinished | None = None


class LiveState:
    """Mutable, single-threaded (the App's thread) view state. `apply` returns the topics touched."""

    def __init__(self) -> None:
        self.servers: dict[str, ServerLive] = {}
        self.bench = BenchLive()
        self.queue = QueueWindow()  # one page of the queue (never every item: a queue of months is 100,000)
        self.queue_view = QueueView()
        self._asked_current: int | None = None  # the current item the latest queue read was asked about
        self.activity = "idle"
        self.detail = ""
        self.paused = False
        self.current_item: int | None = None
        self.telemetry: TelemetrySnapshot | None = None
        self.gpu_owners: dict[int, str] = {}  # pid -> profile, decided by the controller
        self.gpu_util: dict[int, collections.deque[float]] = {}
        self.gpu_mem: dict[int, collections.deque[float]] = {}
        self.notices: collections.deque[Notice] = collections.deque(maxlen=50)
        self.nodes: tuple[NodeRow, ...] = ()  # batch jobs' nodes (`ControlClient.node_rows`), newest read

    # -- snapshots -----------------------------------------------------------------------------
    def load(self, snapshot: ControlSnapshot) -> None:
        for row in snapshot.servers:
            live = self.servers.get(row.profile)
            if live is None:
                self.servers[row.profile] = ServerLive(row)
            else:
                live.row = row
        for profile, lines in snapshot.logs.items():
            server = self._server(profile)
            if not server.log:  # events may already have streamed newer lines in; keep those
                server.add_log(lines)
        self.queue = snapshot.queue
        self._asked_current = snapshot.current_item
        self.activity = snapshot.activity
        self.detail = snapshot.detail
        self.paused = snapshot.paused
        self.current_item = snapshot.current_item
        if snapshot.telemetry is not None and self.telemetry is None:  # events may have brought a newer one
            self.add_telemetry(TelemetrySnapshot.from_dict(snapshot.telemetry))

    def set_nodes(self, rows: tuple[NodeRow, ...]) -> bool:
        """The newest node read; whether it changed what the node panel shows."""
        changed = rows != self.nodes
        self.nodes = rows
        return changed

    def set_queue(self, window: QueueWindow) -> None:
        self.queue = window

    def queue_request(self) -> dict[str, Any]:
        """The `ControlClient.queue_window` arguments for the page the Queue screen shows now."""
        self._asked_current = self.current_item
        view = self.queue_view
        return {"offset": view.offset, "limit": QUEUE_PAGE, "words": view.words, "around": view.around,
                "current": self.current_item}

    def queue_stale(self) -> bool:
        """The controller moved on to an item the latest queue read was not asked about."""
        return self.current_item != self._asked_current

    def add_telemetry(self, snapshot: TelemetrySnapshot) -> None:
        self.telemetry = snapshot
        for gpu in snapshot.gpus:
            util = self.gpu_util.setdefault(gpu.index, collections.deque(maxlen=GPU_HISTORY))
            mem = self.gpu_mem.setdefault(gpu.index, collections.deque(maxlen=GPU_HISTORY))
            util.append(gpu.util_gpu_pct or 0.0)
            mem.append(gpu.mem_used_pct or 0.0)

    # -- events --------------------------------------------------------------------------------
    def apply(self, event: Event) -> str:
        """Fold one event in; returns its topic: servers, logs, bench, gpus, queue, status, notice."""
        if isinstance(event, ServerStateChanged):
            live = self._server(event.profile)
            ready_since = live.row.ready_since
            if event.state == "ready" and live.row.state != "ready":
                ready_since = event.time
            elif event.state != "ready":
                ready_since = None
            live.row = replace(
                live.row,
                state=event.state,
                phase=event.phase,
                pid=event.pid,
                port=event.port or live.row.port,
                resolved_backend=event.resolved_backend or (live.row.resolved_backend if event.state == "ready" else None),
                backend_mismatch=event.backend_mismatch,
                ready_since=ready_since,
            )
            live.reason = event.reason
            if event.state != "ready":
                live.healthy = None
                live.running_requests = live.queued_requests = live.token_usage = None
            for line in event.log_tail:
                if not live.log or live.log[-1] != line:
                    live.add_log((line,))
            return "servers"
        if isinstance(event, ServerLogLine):
            self._server(event.profile).add_log((event.line,))
            return "logs"
        if isinstance(event, ServerMetrics):
            live = self._server(event.profile)
            live.healthy = event.healthy
            live.running_requests = event.running_requests
            live.queued_requests = event.queued_requests
            live.token_usage = event.token_usage
            return "servers"
        if isinstance(event, RunStarted):
            self.bench = BenchLive(run=event, last_finished=self.bench.last_finished, warmup=None)
            return "bench"
        if isinstance(event, BenchProgress):
            run = self.bench.run
            if event.run_id is not None and run is not None and event.run_id == run.run_id:
                self.bench.progress = event
                if event.phase == "timed":
                    self.bench.tok_s.append(event.output_tok_s)
            else:
                self.bench.warmup = event
            return "bench"
        if isinstance(event, RunFinished):
            self.bench.last_finished = event
            return "bench"
        if isinstance(event, ControllerStatus):
            self.activity = event.activity
            self.detail = event.detail
            self.paused = event.activity == "paused"
            self.current_item = event.queue_item_id
            return "status"
        if isinstance(event, GpuTelemetry):
            self.gpu_owners = {int(pid): name for pid, name in event.owners.items()}
            self.add_telemetry(TelemetrySnapshot.from_dict(event.snapshot))
            return "gpus"
        if isinstance(event, QueueChanged):
            return "queue"
        if isinstance(event, Notice):
            self.notices.append(event)
            return "notice"
        return "other"

    def _server(self, profile: str) -> ServerLive:
        live = self.servers.get(profile)
        if live is None:
            live = self.servers[profile] = ServerLive(ServerRow(profile, engine="", backend="", port=0))
        return live

    # -- questions the screens ask -----------------------------------------------------------
    def running_servers(self) -> list[str]:
        return [name for name, s in self.servers.items() if is_live(s.row.state)]

    def uptime_s(self, profile: str, now: float | None = None) -> float | None:
        live = self.servers.get(profile)
        if live is None or live.row.ready_since is None:
            return None
        return max(0.0, (now if now is not None else time.time()) - live.row.ready_since)

    def queue_counts(self) -> dict[str, int]:
        return dict(self.queue.counts)

    def queue_row(self, item_id: int | None) -> QueueRow | None:
        return None if item_id is None else self.queue.row(item_id)

    def current_row(self) -> QueueRow | None:
        return self.queue_row(self.current_item)

    def is_simulated(self, profile: str | None) -> bool:
        live = self.servers.get(profile or "")
        return bool(live and live.row.simulated)
