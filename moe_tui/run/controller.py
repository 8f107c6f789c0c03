"""Controller: works the run queue. One instance owns the servers, the queue and the GPUs.

For each pending item it makes sure exactly the right server is ready (stops every other live
server, starts this profile's, waits for `/health_generate`, reads the resolved MoE backend; a
mismatch does not stop the run but flags it `backend_mismatch`), optionally runs a warmup pass at
the item's concurrency (same shapes, fewer and different prompts, results discarded: JIT kernels
meet new batch shapes here, not in the timed run), runs the benchmark out of process, samples
GPU telemetry during it, stores the run with full provenance (`moe_tui.provenance`) and flags,
marks the item done / failed, and moves on.

Decisions:
- A server that fails to start fails its item (error = reason + log tail). The *other pending
  items of that profile* become `skipped` with the same reason, so the queue goes on with other
  profiles instead of relaunching a broken server again and again; `retry` revives them.
- An item is `done` only when its run is `complete` (flags such as request_errors or
  backend_mismatch may still be set). An `incomplete` or `failed` run fails the item; the run
  stays in the store as evidence.
- Pause takes effect between items. `skip_current` / `cancel_current` stop the running benchmark
  cleanly (its partial run is stored as `incomplete`) and mark the item skipped / cancelled.
  `shutdown` (SIGTERM, Ctrl-C) marks the current item `interrupted` and stops the servers.
- Only one controller per data dir: `start()` takes the runner lock (`moe_tui.run.rendezvous.RunnerLock`),
  then recovers from a previous crash: items left `running` become `interrupted`, runs left
  `running` become `incomplete`. Servers recorded as live that this controller does not manage
  (a killed runner's, or one started by hand) are reported at start and stopped only when the
  queue next needs a server (they hold the GPUs and ports it needs).
- `request_timeout_s` / `stall_timeout_s` (constructor) go to every item's benchmark, warmup pass
  included: a server that hangs mid-stream fails its requests after `stall_timeout_s` of silence
  (default 120 s in the client) instead of holding the queue for the 600 s request timeout. The
  values asked for are in the run's provenance (`client`), the values in force in its selfcheck.
- Edits made by other processes (the `moe-tui queue` CLI writing SQLite directly) are noticed by
  polling SQLite's `data_version` and re-announced as `QueueChanged("external change")`.

The facade (what the TUI calls in-process, or as `op` names through `RunnerClient.call`):

    subscribe(callback) -> unsubscribe        every Event (events.py), on the controller's loop
    await start(work=True, until_empty=False) lock, recover, start working the queue
    await wait_idle()                         until the worker ends (until_empty mode)
    await shutdown(reason)                    interrupt current item, stop servers, release lock
    snapshot() -> dict                        JSON-able state (see `snapshot`)
    pause() / resume()                        persisted queue flag; takes effect between items
    skip_current() / cancel_current()         abort the running benchmark; item skipped/cancelled
    await start_server(name) / stop_server(name) / stop_servers()
    add_campaign(profiles, concurrencies, repeats=1, spec={}, policy="interleaved",
                 prompts_per_concurrency=None, warmup_pass=True, name=None) -> dict
    plan_campaign(same args) -> dict          items and server-start cost of every policy, no change
    queue_items(states=None) -> list[dict]
    move_item(id, direction) / skip_item(id) / cancel_item(id) / retry_item(id) / delete_item(id)
    clear_queue(finished_only=False) -> int
    add_investigation(plan) -> dict           queue an investigation plan as one campaign
    await call(op, **args)                    dispatch by name (the ops above; the runner uses it)

Split across modules: the per-item steps in `controller_items` (ItemWork), queue ops and start-up
recovery in `controller_ops` (QueueOps, Recovery), the GPU sampler and its relay in
`controller_telemetry` (TelemetryRelay), storing a run in `recording`. No Textual here.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from moe_tui.events import (
    BenchProgress,
    ControllerStatus,
    Event,
    Notice,
    QueueChanged,
    RunFinished,
    Subscribers,
)
from moe_tui.profiles import ProfileSet, load_profiles
from moe_tui.run.items import (  # noqa: F401  (re-exported: the controller's benchmark functions)
    BENCH_STOP_GRACE_S,
    ItemWork,
    bench_serving_bench,
    default_bench,
    spec_as_run,
    tokenizer_for,
)
from moe_tui.run.ops import ControllerError, QueueOps, Recovery
from moe_tui.run.recording import RunRecorder, RunSpilled, release_memory
from moe_tui.run.telemetry import TelemetryRelay
from moe_tui.store.db import Store
from moe_tui.store.errors import StoreError
from moe_tui.store.queue import QueueError, QueueItem, RunQueue

EventCallback = Callable[[Event], None]
BenchFn = Callable[..., Awaitable[Any]]

EXTERNAL_POLL_S = 1.0

# Ops `call()` accepts: name -> (method name, is coroutine). Nothing else is reachable remotely.
OPS: dict[str, str] = {
    "snapshot": "snapshot", "pause": "pause", "resume": "resume",
    "skip_current": "skip_current", "cancel_current": "cancel_current",
    "start_server": "start_server", "stop_server": "stop_server", "stop_servers": "stop_servers",
    "add_campaign": "add_campaign", "plan_campaign": "plan_campaign", "queue_items": "queue_items",
    "move_item": "move_item", "skip_item": "skip_item", "cancel_item": "cancel_item",
    "retry_item": "retry_item", "delete_item": "delete_item", "clear_queue": "clear_queue",
    "profiles": "profile_names", "add_investigation": "add_investigation",
    "add_explain": "add_explain",
    "gate": "run_gate_now",  # the correctness gate on demand
}


class Controller(ItemWork, QueueOps, Recovery, TelemetryRelay):
    def __init__(
        self,
        store: Store,
        profiles: ProfileSet | Callable[[], ProfileSet] | str | Path,
        *,
        servers: Any = None,
        telemetry: Any = None,
        bench: BenchFn | None = None,
        data_dir: str | Path | None = None,
        use_lock: bool = True,
        stop_servers_when_drained: bool = False,
        telemetry_interval_s: float = 1.0,
        request_timeout_s: float | None = None,
        stall_timeout_s: float | None = None,
    ):
        self.store = store
        self.queue = RunQueue(store)
        self.recorder = RunRecorder(store, lambda level, message: self._notice(level, message))
        # Why the worker stopped when it could not go on (the store refused a finished run, or
        # the worker itself crashed); the runner exits non-zero with it.
        self.fatal: str | None = None
        if isinstance(profiles, (str, Path)):
            directory = Path(profiles)
            self._profiles: Callable[[], ProfileSet] = lambda: load_profiles(directory)
            self.profiles_dir: Path | None = directory
        elif isinstance(profiles, ProfileSet):
            self._profiles = lambda: profiles
            self.profiles_dir = None
        else:
            self._profiles = profiles
            self.profiles_dir = None
        if servers is None:
            from moe_tui.servers import ServerManager

            servers = ServerManager(store=store)
        self.servers = servers
        self._telemetry = telemetry
        self._telemetry_interval_s = telemetry_interval_s
        self._owns_telemetry = False
        self._telemetry_was_available: bool | None = None
        self._last_telemetry: dict[str, Any] | None = None
        self._bench = bench or default_bench
        # Per-request limits for every item's benchmark (None: the client's defaults, 600 s+ and
        # 120 s of silence); passed to the bench only when set, and recorded in provenance.
        for name, value in (("request_timeout_s", request_timeout_s), ("stall_timeout_s", stall_timeout_s)):
            if value is not None and not (value > 0 and value != float("inf")):
                raise ControllerError(f"{name} must be > 0 seconds, got {value!r}")
        self.request_timeout_s = request_timeout_s
        self.stall_timeout_s = stall_timeout_s
        if data_dir is None:
            from moe_tui import paths

            data_dir = paths.data_dir()
        self.data_dir = Path(data_dir)
        self.use_lock = use_lock
        self.stop_servers_when_drained = stop_servers_when_drained

        self._subscribers: Subscribers[Event] = Subscribers("controller events")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._lock: Any = None
        self._wake = asyncio.Event()
        self._worker: asyncio.Task | None = None
        self._poller: asyncio.Task | None = None
        self._until_empty = False
        self._shutting_down = False
        self._activity = "idle"
        self._detail = ""
        self._current: QueueItem | None = None
        self._current_run_id: int | None = None
        self._bench_stop: asyncio.Event | None = None
        self._abort_verdict: tuple[str, str] | None = None
        self._last_progress: BenchProgress | None = None
        self._last_finished: RunFinished | None = None
        self._session = {"done": 0, "failed": 0, "skipped": 0, "cancelled": 0, "interrupted": 0}
        self._unsubs: list[Callable[[], None]] = []
        self._data_version: int | None = None

    # -- events -------------------------------------------------------------------------------
    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """`callback(event)` for every event (controller, queue, servers, benchmark progress).
        Called on the controller's event-loop thread; it must be quick (a failure is logged and
        the callback kept: `events.Subscribers`)."""
        return self._subscribers.add(callback)

    def _emit(self, event: Event) -> None:
        if self._loop is not None and threading.get_ident() != self._loop_thread and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._emit_now, event)
        else:
            self._emit_now(event)

    def _emit_now(self, event: Event) -> None:
        if isinstance(event, BenchProgress):
            self._last_progress = event
        self._subscribers.emit(event)

    def _status(self, activity: str, detail: str = "") -> None:
        self._activity, self._detail = activity, detail
        self._emit(ControllerStatus(activity=activity, detail=detail,
                                    queue_item_id=self._current.id if self._current else None))

    def _notice(self, level: str, message: str) -> None:
        self._emit(Notice(level=level, message=message))

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self, *, work: bool = True, until_empty: bool = False,
                    retry_interrupted: bool = False) -> None:
        """Take the runner lock, recover from a crash, and (with `work`) start working the queue.
        `until_empty`: the worker ends when no pending item is left (headless `moe-tui run`);
        otherwise it idles and wakes for new items. Raises `runner.RunnerBusy` if another
        controller owns this data dir."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._wake = asyncio.Event()
        if self.use_lock and self._lock is None:
            from moe_tui.run.rendezvous import RunnerLock

            self._lock = RunnerLock(self.data_dir)
            self._lock.acquire()
            from moe_tui.run.orphans import mark_children

            mark_children(self.data_dir)  # so the next owner can find what we leave if we die
        self._unsubs.append(self.servers.subscribe(self._emit))
        self._unsubs.append(self.queue.subscribe(self._queue_changed))
        await self._recover(retry_interrupted)
        self._start_telemetry()
        self._data_version = self._read_data_version()
        self._poller = asyncio.create_task(self._poll_external(), name="controller-poll")
        if work:
            self._until_empty = until_empty
            self._worker = asyncio.create_task(self._work_loop(), name="controller-worker")

    async def wait_idle(self) -> None:
        """Until the worker has ended (the queue drained in until_empty mode, or shutdown)."""
        if self._worker is not None:
            await asyncio.shield(self._worker)

    async def shutdown(self, reason: str = "controller shutting down", *, stop_servers: bool = True) -> None:
        """Stop working: the running benchmark is stopped, its item marked `interrupted`; servers
        are stopped (unless told otherwise); the lock is released. Idempotent."""
        if self._shutting_down:
            if self._worker is not None:
                await asyncio.gather(self._worker, return_exceptions=True)
            return
        self._shutting_down = True
        self._status("stopping", reason)
        self._abort_current("interrupted", f"interrupted: {reason}")
        self._wake.set()
        if self._worker is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._worker), BENCH_STOP_GRACE_S + 5)
            except (TimeoutError, Exception):
                self._worker.cancel()
                await asyncio.gather(self._worker, return_exceptions=True)
        if self._current is not None:  # the worker was cancelled before it could record
            self._finish_item(self._current, "interrupted", f"interrupted: {reason}")
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        if stop_servers:
            await self.stop_servers(reason)
        self._stop_telemetry()
        for unsub in self._unsubs:
            unsub()
        self._unsubs.clear()
        self._status("stopped", reason)
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # -- external changes ---------------------------------------------------------------------
    def _read_data_version(self) -> int | None:
        try:
            return self.store.data_version()
        except Exception:
            return None

    async def _poll_external(self) -> None:
        while True:
            await asyncio.sleep(EXTERNAL_POLL_S)
            version = self._read_data_version()
            if version is not None and version != self._data_version:
                self._data_version = version
                self._emit(QueueChanged(reason="external change"))
                self._wake.set()

    def _queue_changed(self, reason: str) -> None:
        self._emit(QueueChanged(reason=reason))
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)

    # -- the worker ---------------------------------------------------------------------------
    async def _work_loop(self) -> None:
        announced_pause = False
        try:
            while not self._shutting_down:
                if self.queue.paused:
                    if not announced_pause:
                        self._status("paused", "queue paused; resume to continue")
                        announced_pause = True
                    await self._sleep_until_woken()
                    continue
                announced_pause = False
                item = self.queue.claim_next()
                if item is None:
                    if self.stop_servers_when_drained or self._until_empty:
                        await self.stop_servers("queue drained")
                    if self._until_empty:
                        self._status("drained", "no pending items")
                        return
                    self._status("idle", "waiting for queue items")
                    await self._sleep_until_woken()
                    continue
                try:
                    await self._work_item(item)
                except RunSpilled as exc:
                    self.fatal = f"the store cannot take results, the queue stops: {exc}"
                    self._notice("error", self.fatal)
                    return
                except asyncio.CancelledError:
                    self._record_cancelled("interrupted: the controller was stopped during this item")
                    raise
                except Exception as exc:  # a bug in one item must not take the queue down
                    detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                    self._notice("error", f"item #{item.id} crashed the controller step: {detail}")
                    if self._current is not None:
                        self._finish_item(self._current, "failed", f"internal error: {detail}")
                    if self.fatal:
                        return
                finally:
                    self._current = None
                    self._current_run_id = None
                    self._bench_stop = None
                    self._abort_verdict = None
                    release_memory()  # RSS flat over a long campaign (benches/runner_memory.py)
        except StoreError as exc:  # claiming or closing items failed: the queue cannot go on
            self.fatal = self.fatal or f"the store cannot be written, the queue stops: {exc}"
            self._notice("error", self.fatal)
        except Exception as exc:  # a bug outside any one item: stop and say so (the runner exits 1)
            self.fatal = f"the worker crashed: {''.join(traceback.format_exception_only(type(exc), exc)).strip()}"
            self._notice("error", self.fatal)
        finally:
            if self.fatal:
                self._status("failed", self.fatal)
            elif self._activity not in ("drained", "stopping", "stopped"):
                self._status("idle", "worker stopped")

    async def _sleep_until_woken(self) -> None:
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=EXTERNAL_POLL_S * 2)
        except TimeoutError:
            pass

    def _record_cancelled(self, reason: str) -> None:
        if self._current_run_id is not None:
            try:
                self.store.finish_run(self._current_run_id, status="incomplete", flags=["incomplete"], error=reason)
            except Exception:
                pass  # the next start's recovery marks it incomplete anyway
        if self._current is not None:
            self._finish_item(self._current, "interrupted", reason)

    def _finish_item(self, item: QueueItem, state: str, error: str = "", run_id: int | None = None) -> None:
        try:
            self.queue.finish(item.id, state, run_id=run_id, error=error)
        except QueueError as exc:  # edited behind our back (deleted): say so, carry on
            self._notice("warning", f"item #{item.id}: could not record {state}: {exc}")
        except StoreError as exc:  # the store is gone: nothing more can be recorded, stop
            self.fatal = f"item #{item.id} could not be marked {state}: {exc}"
        self._session[state] = self._session.get(state, 0) + 1
        self._current = None

    # -- control ------------------------------------------------------------------------------
    def _abort_current(self, state: str, reason: str) -> bool:
        if self._current is None:
            return False
        self._abort_verdict = (state, reason)
        if self._bench_stop is not None:
            if self._loop is not None and threading.get_ident() != self._loop_thread:
                self._loop.call_soon_threadsafe(self._bench_stop.set)
            else:
                self._bench_stop.set()
        return True

    def pause(self) -> dict[str, Any]:
        self.queue.pause()
        return {"paused": True}

    def resume(self) -> dict[str, Any]:
        self.queue.resume()
        return {"paused": False}

    def skip_current(self) -> dict[str, Any]:
        """Stop the running benchmark; the item becomes `skipped` (retry brings it back)."""
        item = self._current
        if not self._abort_current("skipped", "skipped by user while running"):
            raise ControllerError("nothing is running: no current item to skip")
        return {"item_id": item.id if item else None, "state": "skipped"}

    def cancel_current(self) -> dict[str, Any]:
        item = self._current
        if not self._abort_current("cancelled", "cancelled by user while running"):
            raise ControllerError("nothing is running: no current item to cancel")
        return {"item_id": item.id if item else None, "state": "cancelled"}

    # -- servers ------------------------------------------------------------------------------
    def profile_names(self) -> list[str]:
        return [p.name for p in self._profiles().profiles]

    async def start_server(self, name: str) -> dict[str, Any]:
        """Start one profile's server by hand (refused while the queue is using the servers)."""
        if self._current is not None:
            raise ControllerError(f"item #{self._current.id} is running: pause the queue and wait, "
                                  "or skip it, before starting servers by hand")
        try:
            profile = self._profiles().by_name(name)
        except KeyError as exc:
            raise ControllerError(exc.args[0]) from None
        server = await self.servers.start(profile, wait=True)
        return server.describe()

    async def stop_server(self, name: str) -> dict[str, Any]:
        server = self.servers.get(name)
        if server is None:
            raise ControllerError(f"no managed server named '{name}'")
        if self._current is not None and self._current.profile_name == name:
            self._abort_current("interrupted", f"interrupted: server '{name}' stopped by user")
        report = await server.stop("stopped by user")
        return {"profile": name, "state": server.state, "stop": report.describe() if report else None}

    async def stop_servers(self, reason: str = "stopped by user") -> list[dict[str, Any]]:
        out = []
        for server in list(self.servers.servers.values()):
            if server.is_live:
                report = await server.stop(reason)
                out.append({"profile": server.name, "stop": report.describe() if report else None})
        return out

    # -- queue --------------------------------------------------------------------------------

    # -- state --------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """JSON-able state: activity, servers, queue summary, current item and run, last
        progress and last finished run, and this session's item counts."""
        return {
            "pid": os.getpid(),
            "data_dir": str(self.data_dir),
            "activity": self._activity,
            "detail": self._detail,
            "working": self._worker is not None and not self._worker.done(),
            "servers": [s.describe() for s in self.servers.servers.values()],
            "queue": self.queue.summary(),
            "current_item": self._current.to_dict() if self._current else None,
            "current_run_id": self._current_run_id,
            "last_progress": self._last_progress.to_dict() if self._last_progress else None,
            "last_finished": self._last_finished.to_dict() if self._last_finished else None,
            "session": dict(self._session),
            "telemetry": self._last_telemetry,  # the latest GPU snapshot (a TUI attaching late draws it)
        }

    def snapshot_session(self) -> dict[str, int]:
        """This session's item counts by state (no store read)."""
        return dict(self._session)

    async def call(self, op: str, **args: Any) -> Any:
        """Run a facade op by name (the control channel's entry point). Unknown ops are refused."""
        name = OPS.get(op)
        if name is None:
            raise ControllerError(f"unknown op {op!r}; ops: {', '.join(sorted(OPS))}")
        method = getattr(self, name)
        try:
            inspect.signature(method).bind(**args)
        except TypeError as exc:
            raise ControllerError(f"op {op!r}: {exc}") from None
        value = method(**args)
        if inspect.isawaitable(value):
            value = await value
        return value
