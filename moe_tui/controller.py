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
- Only one controller per data dir: `start()` takes the runner lock (`moe_tui.runner.RunnerLock`),
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
    add_campaign(profiles, concurrencies, repeats=1, spec={}, policy="grouped",
                 prompts_per_concurrency=None, warmup_pass=True, name=None) -> dict
    plan_campaign(same args) -> dict          items and server-start cost of every policy, no change
    queue_items(states=None) -> list[dict]
    move_item(id, direction) / skip_item(id) / cancel_item(id) / retry_item(id) / delete_item(id)
    clear_queue(finished_only=False) -> int
    await call(op, **args)                    dispatch by name (the ops above; the runner uses it)

No Textual here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable

from moe_tui.events import (
    BenchProgress, ControllerStatus, Event, Notice, QueueChanged, RunFinished, RunStarted,
)
from moe_tui.profiles import ProfileSet, ServerProfile, load_profiles
from moe_tui.provenance import build_provenance
from moe_tui.queue import CampaignPlan, QueueError, QueueItem, RunQueue, warmup_spec
from moe_tui.recording import RunRecorder, RunSpilled, finished_run, release_memory
from moe_tui.spec import BenchmarkSpec
from moe_tui.store import Store, StoreError

EventCallback = Callable[[Event], None]
BenchFn = Callable[..., Awaitable[Any]]

# After asking a benchmark to stop, how long it may take to wind down before it is cancelled.
BENCH_STOP_GRACE_S = 15.0
EXTERNAL_POLL_S = 1.0
LOG_TAIL_IN_ERROR = 20

# Ops `call()` accepts: name -> (method name, is coroutine). Nothing else is reachable remotely.
OPS: dict[str, str] = {
    "snapshot": "snapshot", "pause": "pause", "resume": "resume",
    "skip_current": "skip_current", "cancel_current": "cancel_current",
    "start_server": "start_server", "stop_server": "stop_server", "stop_servers": "stop_servers",
    "add_campaign": "add_campaign", "plan_campaign": "plan_campaign", "queue_items": "queue_items",
    "move_item": "move_item", "skip_item": "skip_item", "cancel_item": "cancel_item",
    "retry_item": "retry_item", "delete_item": "delete_item", "clear_queue": "clear_queue",
    "profiles": "profile_names",
}


class ControllerError(RuntimeError):
    """A controller operation was refused; the message says why."""


class Controller:
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

        self._subscribers: list[EventCallback] = []
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
        Called on the controller's event-loop thread; it must be quick and must not raise."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def _emit(self, event: Event) -> None:
        if self._loop is not None and threading.get_ident() != self._loop_thread and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._emit_now, event)
        else:
            self._emit_now(event)

    def _emit_now(self, event: Event) -> None:
        if isinstance(event, BenchProgress):
            self._last_progress = event
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception as exc:
                with contextlib.suppress(Exception):  # stderr itself may be gone (SIGHUP'd terminal)
                    print(f"moe-tui: controller event subscriber failed: {exc!r}", file=sys.stderr)

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
            from moe_tui.runner import RunnerLock

            self._lock = RunnerLock(self.data_dir)
            self._lock.acquire()
            from moe_tui.orphans import mark_children

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
            except (asyncio.TimeoutError, Exception):
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

    async def _recover(self, retry_interrupted: bool) -> None:
        for line in self.recorder.import_spilled():  # first: their items are still 'running'
            self._notice("warning", line)
        await self._sweep_orphans()
        interrupted = self.queue.recover_interrupted()
        stale_runs = self.store.mark_running_runs("incomplete", "interrupted: the runner stopped during this run")
        if interrupted or stale_runs:
            self._notice("warning", f"recovered from an earlier stop: {len(interrupted)} item(s) interrupted, "
                                    f"{stale_runs} partial run(s) kept as incomplete")
        # Servers recorded live that nobody here manages (a killed runner's, or started by hand
        # with `moe-tui server start`) are left alone until the queue needs the GPUs and ports:
        # `_ensure_server` stops them then. Say so now.
        from moe_tui.servers import recorded_server_alive

        strays = []
        for start in self._stray_server_starts():
            if recorded_server_alive(start):
                strays.append(start)
            elif self._lock is not None:
                self.store.update_server_start(start["id"], state="stopped", stopped_at=time.time(),
                                               reason="found gone when a new runner started")
        if strays:
            self._notice("warning", "server(s) running outside this controller: "
                         + ", ".join(f"{s['profile_name']} (pid {s['pid']})" for s in strays)
                         + "; they will be stopped when the queue needs the GPUs")
        if retry_interrupted:
            requeued = self.queue.retry_interrupted()
            if requeued:
                self._notice("info", f"requeued {len(requeued)} interrupted item(s): "
                                     + ", ".join(f"#{i}" for i in requeued))

    async def _sweep_orphans(self) -> None:
        """Stop what a dead runner of this data dir left (servers, benchmark children), found by
        the data-dir marker every runner puts in its children's environment; say which."""
        if self._lock is None:
            return  # not the lock holder: what runs may belong to the live runner
        from moe_tui.orphans import stop_orphans

        for line in await asyncio.to_thread(stop_orphans, self.data_dir):
            self._notice("warning", line)

    def _stray_server_starts(self) -> list[dict[str, Any]]:
        """Server starts recorded live in the store that this controller does not manage."""
        ours = {s.start_id for s in self.servers.servers.values() if s.start_id is not None}
        rows = self.store.query(
            "SELECT id FROM server_starts WHERE state IN ('starting', 'ready', 'stopping')")
        starts = [self.store.server_start(start_id) for (start_id,) in rows if start_id not in ours]
        return [s for s in starts if s is not None]

    async def _stop_stray_servers(self, why: str) -> None:
        """Stop servers recorded live that this controller does not manage (they hold the GPUs
        and ports the next start needs); rows of ones already gone are closed."""
        from moe_tui.servers import recorded_server_alive, stop_recorded_server

        for start in self._stray_server_starts():
            start_id = start["id"]
            if recorded_server_alive(start):
                self._notice("warning", f"stopping server '{start['profile_name']}' (start #{start_id}, "
                                        f"pid {start['pid']}): {why}")
                report = await asyncio.to_thread(stop_recorded_server, start)
                reason = f"stopped by the controller ({why}); {report.describe()}"
            else:
                reason = f"found gone by the controller ({why})"
            self.store.update_server_start(start_id, state="stopped", reason=reason, stopped_at=time.time())

    # -- telemetry ----------------------------------------------------------------------------
    def _start_telemetry(self) -> None:
        if self._telemetry is False:
            self._telemetry = None
            return
        if self._telemetry is None:
            try:
                from moe_tui.telemetry import TelemetryThread

                self._telemetry = TelemetryThread(interval_s=self._telemetry_interval_s)
                self._telemetry.start()
                self._owns_telemetry = True
            except Exception as exc:  # no telemetry is a flag on the run, never a stop
                self._notice("warning", f"GPU telemetry unavailable: {exc}")
                self._telemetry = None

    def _stop_telemetry(self) -> None:
        if self._owns_telemetry and self._telemetry is not None:
            self._telemetry.stop()

    # -- external changes ---------------------------------------------------------------------
    def _read_data_version(self) -> int | None:
        try:
            return int(self.store.query("PRAGMA data_version")[0][0])
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
        except asyncio.TimeoutError:
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

    async def _work_item(self, item: QueueItem) -> None:
        self._current = item
        self._abort_verdict = None
        try:
            profile = self._profile_for(item)
        except KeyError as exc:
            self._finish_item(item, "failed", f"profile: {exc.args[0]}")
            self._notice("error", f"item #{item.id}: {exc.args[0]}")
            return
        server = await self._ensure_server(item, profile)
        if server is None:
            return
        if self._abort_requested():
            self._finish_item(item, *self._abort_verdict)
            return

        warmup_info: dict[str, Any] | None = None
        if item.warmup:
            warmup_info = await self._warmup_pass(item, server)
            if self._abort_requested():
                self._finish_item(item, *self._abort_verdict)
                return
            if warmup_info.get("status") == "failed" and server.state != "ready":
                self._finish_item(item, "failed", f"warmup pass failed, server {server.state}: "
                                                   f"{warmup_info.get('error', '')}")
                return
        await self._timed_run(item, profile, server, warmup_info)

    def _profile_for(self, item: QueueItem) -> ServerProfile:
        """The item's profile, read fresh (an edited file applies from the next item on): from the
        controller's profiles, else from the folder its campaign was added with."""
        try:
            return self._profiles().by_name(item.profile_name)
        except KeyError:
            if item.campaign_id is None:
                raise
            directory = (self.queue.campaign(item.campaign_id)["definition"] or {}).get("profiles_dir")
            if not directory:
                raise
            return load_profiles(directory).by_name(item.profile_name)

    def _abort_requested(self) -> bool:
        return self._abort_verdict is not None

    async def _ensure_server(self, item: QueueItem, profile: ServerProfile) -> Any:
        """Exactly this profile's server, ready. None (item already failed) if it cannot start."""
        for other in list(self.servers.live()):
            if other.name != profile.name or other.profile != profile:
                self._status("stopping-server", f"{other.name} (next item needs {profile.name})")
                await other.stop(f"the queue needs '{profile.name}' next")
        await self._stop_stray_servers(f"the queue needs '{profile.name}'")
        current = self.servers.get(profile.name)
        if current is not None and current.state == "ready" and current.profile == profile:
            return current
        self._status("starting-server", profile.name)
        from moe_tui.servers import ServerError

        try:
            server = await self.servers.start(profile, wait=True)
        except (ServerError, asyncio.TimeoutError, OSError) as exc:
            handle = self.servers.get(profile.name)
            tail = handle.log_tail(LOG_TAIL_IN_ERROR) if handle is not None else []
            if handle is not None and handle.is_live:
                await handle.stop("start did not complete")
            reason = f"server '{profile.name}' failed to start: {exc}"
            error = reason + ("\n--- log tail ---\n" + "\n".join(tail) if tail else "")
            self._finish_item(item, "failed", error)
            skipped = self.queue.skip_profile(
                profile.name, f"not attempted: {reason} (item #{item.id}); retry once the profile is fixed")
            self._notice("error", reason + (f"; skipped {len(skipped)} other item(s) of this profile"
                                            if skipped else ""))
            return None
        if server.backend_mismatch:
            self._notice("warning", f"'{profile.name}': profile asks {profile.moe_runner_backend}, server "
                                    f"resolved {server.resolved_backend}; runs will be flagged backend_mismatch")
        return server

    def _server_facts(self, server: Any) -> dict[str, Any]:
        facts = dict(server.describe())
        facts["server_info"] = server.server_info or {}
        return facts

    async def _run_bench(self, spec: BenchmarkSpec, server: Any, *, run_id: int | None, phase: str) -> Any:
        self._bench_stop = asyncio.Event()
        if self._abort_verdict is not None:
            self._bench_stop.set()

        def on_progress(event: BenchProgress) -> None:
            if phase != "timed":
                event = dataclasses.replace(event, phase=phase, run_id=run_id)
            self._emit(event)

        kwargs: dict[str, Any] = {"on_progress": on_progress, "stop": self._bench_stop, "run_id": run_id}
        if spec.client != "moe-tui":
            kwargs["tokenizer"] = tokenizer_for(server.profile)
        if self.request_timeout_s is not None:
            kwargs["request_timeout"] = self.request_timeout_s
        if self.stall_timeout_s is not None:
            kwargs["stall_timeout"] = self.stall_timeout_s
        task = asyncio.create_task(self._bench(spec, server.base_url, **kwargs))
        stop_wait = asyncio.create_task(self._bench_stop.wait())
        try:
            await asyncio.wait({task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():  # asked to stop: give it a grace period to end by itself
                try:
                    await asyncio.wait_for(asyncio.shield(task), BENCH_STOP_GRACE_S)
                except asyncio.TimeoutError:
                    task.cancel()
            return await task
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            stop_wait.cancel()

    def _client_limits(self, spec: BenchmarkSpec) -> dict[str, Any]:
        """The per-request limits this controller asked for (None: the client's defaults; the
        run's selfcheck holds the values in force). Only moe-tui's client takes them."""
        if spec.client != "moe-tui":
            return {}
        return {"request_timeout_s": self.request_timeout_s, "stall_timeout_s": self.stall_timeout_s}

    async def _warmup_pass(self, item: QueueItem, server: Any) -> dict[str, Any]:
        try:
            spec = spec_as_run(warmup_spec(item.spec))
        except ValueError as exc:
            return {"status": "failed", "error": str(exc)}
        self._status("warmup", f"#{item.id} {item.profile_name} conc={spec.max_concurrency} n={spec.num_prompts}")
        started = time.time()
        try:
            result = await self._run_bench(spec, server, run_id=None, phase="warmup-pass")
        except Exception as exc:
            return {"status": "failed", "error": f"{type(exc).__name__}: {exc}", "fingerprint": spec.fingerprint}
        completed = sum(1 for r in result.requests if r.get("ok"))
        return {
            "status": result.status, "fingerprint": spec.fingerprint, "num_prompts": spec.num_prompts,
            "seed": spec.seed, "completed": completed, "error": result.error,
            "duration_s": round(time.time() - started, 3), "rule": "results discarded",
        }

    async def _timed_run(self, item: QueueItem, profile: ServerProfile, server: Any,
                         warmup_info: dict[str, Any] | None) -> None:
        try:
            spec = spec_as_run(item.spec)
        except ValueError as exc:
            self._finish_item(item, "failed", f"spec cannot be run by this client: {exc}")
            return
        started = time.time()
        snapshot = profile.snapshot()
        server_facts = self._server_facts(server)
        # The item keeps the spec as asked; the run is stored under the spec as run (client
        # version filled in), the fingerprint every other moe-tui run of it carries too.
        queue_facts = {"id": item.id, "campaign_id": item.campaign_id, "repeat_index": item.repeat_index,
                       "attempt": item.attempts, "requested_fingerprint": item.fingerprint}
        provenance = build_provenance(spec=spec, profile=snapshot, server=server_facts, queue_item=queue_facts,
                                      bench_client=self._client_limits(spec), warmup=warmup_info, started_at=started)
        run_id = self.store.create_run(
            profile_name=profile.name, spec_json=spec.canonical_json(), fingerprint=spec.fingerprint,
            client=spec.client, profile=snapshot, provenance=provenance, queue_item_id=item.id,
            server_start_id=server.start_id,
        )
        self._current_run_id = run_id
        self.queue.attach_run(item.id, run_id)
        self._emit(RunStarted(run_id=run_id, queue_item_id=item.id, profile=profile.name,
                              fingerprint=spec.fingerprint, spec_summary=spec.describe()))
        self._status("benchmarking", f"#{item.id} {profile.name} conc={spec.max_concurrency} "
                                     f"n={spec.num_prompts} run {run_id}")

        collector, unsub, our_pids = None, None, None
        if self._telemetry is not None:
            from moe_tui.telemetry import SnapshotCollector, expand_descendants

            collector = SnapshotCollector()
            unsub = self._telemetry.subscribe(collector)
            our_pids = expand_descendants([server.pid]) if server.pid else set()
        try:
            result = await self._run_bench(spec, server, run_id=run_id, phase="timed")
            bench_error = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            result, bench_error = None, f"benchmark could not run: {type(exc).__name__}: {exc}"
        finally:
            if unsub is not None:
                unsub()
        telemetry_summary = None
        if collector is not None:
            from moe_tui.telemetry import summarize_run

            telemetry_summary = summarize_run(collector.snapshots, our_pids)
        record = finished_run(
            run_id=run_id, item=item, spec=spec, server=server, result=result, bench_error=bench_error,
            provenance_args=dict(spec=spec, profile=snapshot, server=server_facts, queue_item=queue_facts,
                                 warmup=warmup_info, started_at=started),
            client_limits=self._client_limits(spec), telemetry_summary=telemetry_summary,
            gpu_snapshots=collector.snapshots if collector else [], abort_verdict=self._abort_verdict)
        status, summary, flags, error = (record.status, record.finish["summary"], record.finish["flags"],
                                         record.finish["error"])
        # Run and item in one transaction; RunSpilled (the store cannot take it) ends the worker.
        if not self.recorder.store_run(record):
            self._notice("warning", f"item #{item.id}: run {run_id} stored, but the item was changed "
                                    f"behind the runner's back and not marked {record.item_state}")
        self._session[record.item_state] = self._session.get(record.item_state, 0) + 1
        self._current = None
        finished_event = RunFinished(
            run_id=run_id, queue_item_id=item.id, profile=profile.name, status=status,
            output_throughput=summary.get("output_throughput"), flags=tuple(flags), error=error,
        )
        self._last_finished = finished_event
        self._emit(finished_event)

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
    def _plan(self, profiles: Iterable[str], concurrencies: Iterable[int], repeats: int = 1,
              spec: dict[str, Any] | None = None, policy: str = "grouped",
              prompts_per_concurrency: int | None = None, warmup_pass: bool = True) -> CampaignPlan:
        profiles_dir = str(self.profiles_dir.resolve()) if self.profiles_dir else None
        base = BenchmarkSpec.from_dict(spec or {}, "campaign spec")
        return CampaignPlan(profiles=tuple(profiles), concurrencies=tuple(int(c) for c in concurrencies),
                            repeats=int(repeats), base_spec=base, policy=policy,
                            prompts_per_concurrency=prompts_per_concurrency, warmup_pass=warmup_pass,
                            profiles_dir=profiles_dir)

    def _check_profiles(self, names: Iterable[str]) -> None:
        known = self._profiles()
        for name in names:
            try:
                known.by_name(name)
            except KeyError as exc:
                raise ControllerError(exc.args[0]) from None

    def plan_campaign(self, profiles: Iterable[str], concurrencies: Iterable[int], repeats: int = 1,
                      spec: dict[str, Any] | None = None, policy: str = "grouped",
                      prompts_per_concurrency: int | None = None, warmup_pass: bool = True) -> dict[str, Any]:
        profiles = list(profiles)
        self._check_profiles(profiles)
        plan = self._plan(profiles, concurrencies, repeats, spec, policy, prompts_per_concurrency, warmup_pass)
        running = next((s.name for s in self.servers.live() if s.state == "ready"), None)
        return {
            "definition": plan.definition(),
            "server_starts": plan.start_costs(running),
            "items": [{"profile_name": p.profile_name, "concurrency": p.spec.max_concurrency,
                       "num_prompts": p.spec.num_prompts, "repeat_index": p.repeat_index,
                       "fingerprint": p.spec.fingerprint} for p in plan.items()],
        }

    def add_campaign(self, profiles: Iterable[str], concurrencies: Iterable[int], repeats: int = 1,
                     spec: dict[str, Any] | None = None, policy: str = "grouped",
                     prompts_per_concurrency: int | None = None, warmup_pass: bool = True,
                     name: str | None = None) -> dict[str, Any]:
        profiles = list(profiles)
        self._check_profiles(profiles)
        plan = self._plan(profiles, concurrencies, repeats, spec, policy, prompts_per_concurrency, warmup_pass)
        campaign_id, items = self.queue.add_campaign(plan, name)
        return {"campaign_id": campaign_id, "item_ids": [i.id for i in items],
                "server_starts": plan.start_costs()}

    def queue_items(self, states: Iterable[str] | None = None) -> list[dict[str, Any]]:
        return [i.to_dict() for i in self.queue.items(states)]

    def move_item(self, item_id: int, direction: str) -> dict[str, Any]:
        return self.queue.move(item_id, direction).to_dict()

    def skip_item(self, item_id: int) -> dict[str, Any]:
        if self._current is not None and self._current.id == int(item_id):
            return self.skip_current()
        return self.queue.skip(item_id).to_dict()

    def cancel_item(self, item_id: int) -> dict[str, Any]:
        if self._current is not None and self._current.id == int(item_id):
            return self.cancel_current()
        return self.queue.cancel(item_id).to_dict()

    def retry_item(self, item_id: int) -> dict[str, Any]:
        return self.queue.retry(item_id).to_dict()

    def delete_item(self, item_id: int) -> dict[str, Any]:
        self.queue.delete(item_id)
        return {"deleted": int(item_id)}

    def clear_queue(self, finished_only: bool = False) -> int:
        return self.queue.clear(finished_only=finished_only)

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


# ---------------------------------------------------------------------------------------------
def spec_as_run(spec: BenchmarkSpec) -> BenchmarkSpec:
    """The spec as the benchmark client will run it, its version filled in: moe-tui's own, or the
    sglang.bench_serving client's. A spec for another version is refused (ValueError) rather than
    silently re-labelled."""
    if spec.client == "moe-tui":
        from moe_tui.bench.engine import native_spec

        return native_spec(spec)
    from moe_tui.bench.sglang_adapter import check_spec_matches_client, require_client

    client = require_client()
    check_spec_matches_client(spec, client)
    return spec if spec.client_version else spec.replace(client_version=client.version)


def tokenizer_for(profile: ServerProfile) -> str:
    """What sglang.bench_serving loads as the tokenizer: the emulator's bundled one, or the
    model's own folder (offline: the client must not reach a hub)."""
    if profile.engine == "sim":
        return str(Path(__file__).resolve().parent / "sim" / "tokenizer")
    return profile.model_path


async def bench_serving_bench(spec: BenchmarkSpec, base_url: str, *, on_progress: Any = None,
                              stop: asyncio.Event | None = None, run_id: int | None = None,
                              tokenizer: str | None = None) -> Any:
    """SGLang's own client (`moe_tui.bench.sglang_adapter.run_bench_serving`), unmodified, as a
    BenchResult. No live progress and no early stop: bench_serving offers neither; a skip waits
    for it (up to the controller's grace period) and then abandons the result."""
    import tempfile

    from moe_tui import paths
    from moe_tui.bench.engine import BenchResult
    from moe_tui.bench.sglang_adapter import BenchServingError, require_client, run_bench_serving

    client = require_client()
    started = time.time()
    log_file = paths.logs_dir() / f"bench_serving-run{run_id if run_id is not None else 'warmup'}-{int(started)}.log"
    with tempfile.TemporaryDirectory(prefix="moe-tui-bench-serving-") as tmp:
        try:
            record = await asyncio.to_thread(
                run_bench_serving, spec, base_url=base_url, output_file=Path(tmp) / "out.jsonl",
                log_file=log_file, tokenizer=tokenizer, client=client, output_details=False)
        except BenchServingError as exc:
            return BenchResult(status="failed", error=str(exc), spec=spec.canonical_dict(),
                               fingerprint=spec.fingerprint, client="sglang.bench_serving",
                               client_version=client.version, started_at=started, finished_at=time.time())
    completed = int(record.get("completed") or 0)
    status = "complete" if completed >= spec.num_prompts else "incomplete" if completed else "failed"
    summary = {k: v for k, v in record.items() if k != "server_info"}
    summary.setdefault("failed", max(0, spec.num_prompts - completed))
    return BenchResult(status=status, summary=summary, spec=spec.canonical_dict(), fingerprint=spec.fingerprint,
                       client="sglang.bench_serving", client_version=client.version, started_at=started,
                       finished_at=time.time(), server_info=record.get("server_info"),
                       error="" if status == "complete" else f"{completed} of {spec.num_prompts} completed; "
                                                                 f"log {log_file}")


async def default_bench(spec: BenchmarkSpec, base_url: str, *, on_progress: Callable[[BenchProgress], None],
                        stop: asyncio.Event, run_id: int | None, tokenizer: str | None = None,
                        request_timeout: float | None = None, stall_timeout: float | None = None) -> Any:
    """The benchmark, out of process (`moe_tui.bench.process.run_benchmark_subprocess`): a busy
    or crashing client cannot stall the controller or the TUI, and its CPU is its own.
    sglang.bench_serving takes neither timeout (it has no such options): they apply to moe-tui's
    client only."""
    if spec.client == "sglang.bench_serving":
        return await bench_serving_bench(spec, base_url, on_progress=on_progress, stop=stop, run_id=run_id,
                                         tokenizer=tokenizer)
    from moe_tui.bench.process import run_benchmark_subprocess

    return await run_benchmark_subprocess(spec, base_url, on_progress=on_progress, stop=stop, run_id=run_id,
                                          request_timeout=request_timeout, stall_timeout=stall_timeout)
