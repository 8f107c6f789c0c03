"""What every part of the controller shares: its references, the worker's state, the event outlet.

`RunContext` is made once per `moe_tui.run.controller.Controller` and handed to each of its parts
in their constructors (`run.items.ItemRunner`, `run.ops.QueueOps` and `Recovery`,
`run.telemetry.TelemetryRelay`, `run.profiled`). It holds:

- the references: store, queue, servers, run recorder, the profiles (read fresh for each item) and
  the folder they came from, the data dir, and the runner lock once `start()` took it;
- the worker's state: the current item and its run, the benchmark's stop event, an abort asked
  for (state and reason), the last progress and finished run, this session's counts, the activity
  shown, and why the worker stopped when it could not go on (`fatal`);
- the outlet: `emit` (from any thread: it hops onto the controller's loop), `status`, `notice`,
  and the two steps every part needs on the current item: `finish_item` and `abort_current`.

The parts read and write this state only here, so what a part uses is what its constructor got.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from moe_tui.events import BenchProgress, ControllerStatus, Event, Notice, RunFinished, Subscribers
from moe_tui.profiles import ProfileSet
from moe_tui.run.recording import RunRecorder
from moe_tui.store.db import Store
from moe_tui.store.errors import StoreError
from moe_tui.store.queue import QueueError, QueueItem, RunQueue

if TYPE_CHECKING:
    from moe_tui.run.rendezvous import RunnerLock
    from moe_tui.servers.manager import ServerManager


def _new_session() -> dict[str, int]:
    return {"done": 0, "failed": 0, "skipped": 0, "cancelled": 0, "interrupted": 0}


@dataclass
class WorkState:
    """What the worker is doing now (one item at a time)."""

    current: QueueItem | None = None
    current_run_id: int | None = None
    bench_stop: asyncio.Event | None = None
    abort_verdict: tuple[str, str] | None = None  # (item state, reason) asked while it runs
    last_progress: BenchProgress | None = None
    last_finished: RunFinished | None = None
    session: dict[str, int] = field(default_factory=_new_session)
    activity: str = "idle"
    detail: str = ""
    fatal: str | None = None

    def clear_item(self) -> None:
        """Between items: nothing current, nothing to stop or abort."""
        self.current = None
        self.current_run_id = None
        self.bench_stop = None
        self.abort_verdict = None


class RunContext:
    """The controller's shared references, state and event outlet (see the module docstring)."""

    def __init__(self, store: Store, servers: ServerManager, profiles: Callable[[], ProfileSet],
                 profiles_dir: Path | None, data_dir: Path) -> None:
        self.store = store
        self.queue = RunQueue(store)
        self.servers = servers
        self.profiles = profiles
        self.profiles_dir = profiles_dir
        self.data_dir = data_dir
        self.recorder = RunRecorder(store, self.notice)
        self.lock: RunnerLock | None = None
        self.work = WorkState()
        self.subscribers: Subscribers[Event] = Subscribers("controller events")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread: int | None = None

    # -- events -------------------------------------------------------------------------------
    def on_loop(self) -> bool:
        """Whether the caller runs on the controller's loop thread (or no loop is set yet)."""
        return self.loop is None or threading.get_ident() == self.loop_thread

    def emit(self, event: Event) -> None:
        if self.loop is not None and not self.on_loop() and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._emit_now, event)
        else:
            self._emit_now(event)

    def _emit_now(self, event: Event) -> None:
        if isinstance(event, BenchProgress):
            self.work.last_progress = event
        self.subscribers.emit(event)

    def status(self, activity: str, detail: str = "") -> None:
        self.work.activity, self.work.detail = activity, detail
        current = self.work.current
        self.emit(ControllerStatus(activity=activity, detail=detail,
                                   queue_item_id=current.id if current else None))

    def notice(self, level: str, message: str) -> None:
        self.emit(Notice(level=level, message=message))

    # -- the current item ---------------------------------------------------------------------
    def finish_item(self, item: QueueItem, state: str, error: str = "", run_id: int | None = None) -> None:
        try:
            self.queue.finish(item.id, state, run_id=run_id, error=error)
        except QueueError as exc:  # edited behind our back (deleted): say so, carry on
            self.notice("warning", f"item #{item.id}: could not record {state}: {exc}")
        except StoreError as exc:  # the store is gone: nothing more can be recorded, stop
            self.work.fatal = f"item #{item.id} could not be marked {state}: {exc}"
        self.count(state)
        self.work.current = None

    def count(self, state: str) -> None:
        """One more item closed as `state` in this session."""
        self.work.session[state] = self.work.session.get(state, 0) + 1

    def abort_current(self, state: str, reason: str) -> bool:
        """Ask the running benchmark to stop; its item is closed as `state`. False if none runs."""
        if self.work.current is None:
            return False
        self.work.abort_verdict = (state, reason)
        stop = self.work.bench_stop
        if stop is not None:
            if self.loop is not None and not self.on_loop():
                self.loop.call_soon_threadsafe(stop.set)
            else:
                stop.set()
        return True


async def watch_data_version(store: Store, on_change: Callable[[], None], every_s: float) -> None:
    """Edits made by other processes (the `moe-tui queue` CLI writing SQLite directly): SQLite's
    `data_version` polled every `every_s`, `on_change()` once per change seen (until cancelled)."""
    def read() -> int | None:
        try:
            return store.data_version()
        except Exception:  # a store gone or locked for a moment: asked again next time
            return None

    seen = read()
    while True:
        await asyncio.sleep(every_s)
        version = read()
        if version is not None and version != seen:
            seen = version
            on_change()
