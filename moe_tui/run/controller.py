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
- Items may run as batch jobs instead (`batch`: `moe-tui run --executor slurm`): the executor's
  dispatcher is then the worker (`run.batch`); the socket, events and queue ops stay the same.

The facade (what the TUI calls in-process, or as `op` names through `RunnerClient.call`):

    subscribe(callback) -> unsubscribe        every Event (events.py), on the controller's loop
    await start(work=True, until_empty=False) lock, recover, start working the queue
    await wait_idle()                         until the worker ends (until_empty mode)
    await shutdown(reason)                    interrupt current item, stop servers, release lock
    snapshot() -> dict                        JSON-able state (see `snapshot`)
    pause() / resume()                        persisted queue flag; takes effect between items
    skip_current() / cancel_current()         abort the running benchmark; item skipped/cancelled
    await start_server(name) / stop_server(name) / stop_servers()
    the queue's ops (add_campaign, plan_campaign, queue_items, move/skip/cancel/retry/delete_item,
    clear_queue, add_investigation, add_explain): `run.facade.QueueFacade`, which says each
    await call(op, **args)                    dispatch by name (the ops above; the runner uses it)

Typed parts, each made with the one `RunContext` (`moe_tui.run.context`: store, queue, servers,
recorder, profiles, data dir, lock, the worker's state and the event outlet) and nothing else it
does not get in its constructor: the per-item steps in `run.items` (`ItemRunner`, profiled runs in
`run.profiled`), queue ops and start-up recovery in `run.ops` (`QueueOps`, `Recovery`; the queue
facade in `run.facade`), the GPU sampler and its relay in `run.telemetry`, storing a run in
`run.recording`. The controller owns them, runs the worker loop and the lifecycle. No Textual here.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from moe_tui.events import Event, QueueChanged
from moe_tui.profiles import ProfileSet, load_profiles
from moe_tui.records import GateRanJson, ItemStateJson, ManagedServerJson, PausedJson, RunnerStatusJson, ServerStoppedJson
from moe_tui.run.batch import BatchFactory, work_batches
from moe_tui.run.benchmarks import (  # noqa: F401  (re-exported: the controller's benchmark functions)
    bench_serving_bench,
    default_bench,
    spec_as_run,
    tokenizer_for,
)
from moe_tui.run.context import RunContext, watch_data_version
from moe_tui.run.facade import QueueFacade
from moe_tui.run.items import BENCH_STOP_GRACE_S, BenchFn, ItemRunner  # noqa: F401
from moe_tui.run.ops import ControllerError, QueueOps, Recovery
from moe_tui.run.recording import RunSpilled, release_memory
from moe_tui.run.telemetry import TelemetryRelay
from moe_tui.store.db import Store
from moe_tui.store.errors import StoreError

if TYPE_CHECKING:
    from moe_tui.servers.manager import ServerManager
    from moe_tui.telemetry import TelemetryThread

EventCallback = Callable[[Event], None]

EXTERNAL_POLL_S = 1.0

# Ops `call()` accepts: name -> the Controller method it runs. Nothing else is reachable remotely.
OPS: dict[str, str] = {
    "snapshot": "snapshot", "pause": "pause", "resume": "resume",
    "skip_current": "skip_current", "cancel_current": "cancel_current",
    "start_server": "start_server", "stop_server": "stop_server", "stop_servers": "stop_servers",
    "add_campaign": "add_campaign_off_loop", "plan_campaign": "plan_campaign", "queue_items": "queue_items",
    "move_item": "move_item", "skip_item": "skip_item", "cancel_item": "cancel_item",
    "retry_item": "retry_item", "delete_item": "delete_item", "clear_queue": "clear_queue",
    "profiles": "profile_names", "add_investigation": "add_investigation", "add_explain": "add_explain",
    "gate": "run_gate_now",  # the correctness gate on demand
}


def _profile_source(profiles: ProfileSet | Callable[[], ProfileSet] | str | Path
                    ) -> tuple[Callable[[], ProfileSet], Path | None]:
    """How the profiles are read for each item (fresh from a folder, or as given), and the folder."""
    if isinstance(profiles, (str, Path)):
        directory = Path(profiles)
        return (lambda: load_profiles(directory)), directory
    if isinstance(profiles, ProfileSet):
        fixed = profiles
        return (lambda: fixed), None
    return profiles, None


class Controller(QueueFacade):
    """Works the run queue (the module docstring says how); owns its typed parts and their context."""

    def __init__(
        self,
        store: Store,
        profiles: ProfileSet | Callable[[], ProfileSet] | str | Path,
        *,
        servers: ServerManager | None = None,
        telemetry: TelemetryThread | Literal[False] | None = None,
        bench: BenchFn | None = None,
        data_dir: str | Path | None = None,
        use_lock: bool = True,
        stop_servers_when_drained: bool = False,
        telemetry_interval_s: float = 1.0,
        request_timeout_s: float | None = None,
        stall_timeout_s: float | None = None,
        batch: BatchFactory | None = None,
    ):
        # Per-request limits for every item's benchmark (None: the client's defaults, 600 s+ and
        # 120 s of silence); passed to the bench only when set, and recorded in provenance.
        for name, value in (("request_timeout_s", request_timeout_s), ("stall_timeout_s", stall_timeout_s)):
            if value is not None and not (value > 0 and value != float("inf")):
                raise ControllerError(f"{name} must be > 0 seconds, got {value!r}")
        if servers is None:
            from moe_tui.servers.manager import ServerManager

            servers = ServerManager(store=store)
        if data_dir is None:
            from moe_tui import paths

            data_dir = paths.data_dir()
        read_profiles, profiles_dir = _profile_source(profiles)
        self._ctx = ctx = RunContext(store, servers, read_profiles, profiles_dir, Path(data_dir))
        self.store, self.queue, self.servers = store, ctx.queue, servers
        self.profiles_dir, self.data_dir = profiles_dir, ctx.data_dir
        self.use_lock = use_lock
        self.stop_servers_when_drained = stop_servers_when_drained
        # The parts: each gets the context and the parts it works with, nothing else.
        self._recovery = Recovery(ctx)
        self._ops = QueueOps(ctx)
        self._telemetry = TelemetryRelay(ctx, telemetry, telemetry_interval_s)
        self._items = ItemRunner(ctx, self._recovery, self._telemetry, bench or default_bench,
                                 request_timeout_s=request_timeout_s, stall_timeout_s=stall_timeout_s)
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._poller: asyncio.Task[None] | None = None
        self._until_empty = False
        self._shutting_down = False
        self._unsubs: list[Callable[[], None]] = []
        self._batch, self._batch_stop = batch, asyncio.Event()  # items as batch jobs (`run.batch`)

    @property
    def fatal(self) -> str | None:
        """Why the worker stopped when it could not go on (the store refused a finished run, or
        the worker itself crashed); the runner exits non-zero with it."""
        return self._ctx.work.fatal

    @property
    def batch_mode(self) -> bool:
        """Whether items run as batch jobs (`run.batch`): no server or child of this runner to watch."""
        return self._batch is not None

    @property
    def holds_lock(self) -> bool:
        """Whether this controller holds its data dir's runner lock (taken by `start()`)."""
        return self._ctx.lock is not None

    # -- events -------------------------------------------------------------------------------
    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """`callback(event)` for every event (controller, queue, servers, benchmark progress).
        Called on the controller's event-loop thread; it must be quick (a failure is logged and
        the callback kept: `events.Subscribers`)."""
        return self._ctx.subscribers.add(callback)

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self, *, work: bool = True, until_empty: bool = False,
                    retry_interrupted: bool = False) -> None:
        """Take the runner lock, recover from a crash, and (with `work`) start working the queue.
        `until_empty`: the worker ends when no pending item is left (headless `moe-tui run`);
        otherwise it idles and wakes for new items. Raises `runner.RunnerBusy` if another
        controller owns this data dir."""
        ctx = self._ctx
        ctx.loop = asyncio.get_running_loop()
        ctx.loop_thread = threading.get_ident()
        self._wake = asyncio.Event()
        if self.use_lock and ctx.lock is None:
            from moe_tui.run.rendezvous import RunnerLock

            ctx.lock = RunnerLock(self.data_dir, self.store.path)
            ctx.lock.acquire()
            from moe_tui.run.orphans import mark_children

            if self._batch is None:  # a batch job inherits the environment and must outlive us (`run.batch`)
                mark_children(self.data_dir)  # so the next owner can find what we leave if we die
        self._unsubs.append(self.servers.subscribe(ctx.emit))
        self._unsubs.append(self.queue.subscribe(self._queue_changed))
        if self._batch is None:  # batch mode: the dispatcher re-adopts what runs as jobs
            await self._recovery.recover(retry_interrupted)
        unsub_telemetry = self._telemetry.start()
        if unsub_telemetry is not None:
            self._unsubs.append(unsub_telemetry)
        self._poller = asyncio.create_task(watch_data_version(
            self.store, lambda: self._queue_changed("external change"), EXTERNAL_POLL_S), name="controller-poll")
        if work:
            self._until_empty = until_empty
            loop = self._work_loop() if self._batch is None else work_batches(
                ctx, self._batch(self.store, self._batch_line), until_empty=until_empty,
                retry_interrupted=retry_interrupted, stop=self._batch_stop)
            self._worker = asyncio.create_task(loop, name="controller-worker")

    async def wait_idle(self) -> None:
        """Until the worker has ended (the queue drained in until_empty mode, or shutdown)."""
        if self._worker is not None:
            await asyncio.shield(self._worker)

    async def shutdown(self, reason: str = "controller shutting down", *, stop_servers: bool = True) -> None:
        """Stop working: the running benchmark is stopped, its item marked `interrupted`; servers
        are stopped (unless told otherwise); the lock is released. Idempotent."""
        ctx = self._ctx
        if self._shutting_down:
            if self._worker is not None:
                await asyncio.gather(self._worker, return_exceptions=True)
            return
        self._shutting_down = True
        self.close_planner()
        ctx.status("stopping", reason)
        ctx.abort_current("interrupted", f"interrupted: {reason}")
        self._batch_stop.set()  # batch mode: the dispatcher leaves its jobs to the scheduler
        self._wake.set()
        if self._worker is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._worker), BENCH_STOP_GRACE_S + 5)
            except (TimeoutError, Exception):
                self._worker.cancel()
                await asyncio.gather(self._worker, return_exceptions=True)
        if ctx.work.current is not None:  # the worker was cancelled before it could record
            ctx.finish_item(ctx.work.current, "interrupted", f"interrupted: {reason}")
        await self._items.close()  # the benchmark clients' zygote (moe_tui.bench.zygote)
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        if stop_servers:
            await self.stop_servers(reason)
        self._telemetry.stop()
        for unsub in self._unsubs:
            unsub()
        self._unsubs.clear()
        ctx.status("stopped", reason)
        if ctx.lock is not None:
            ctx.lock.release()
            ctx.lock = None

    # -- external changes ---------------------------------------------------------------------
    def _queue_changed(self, reason: str) -> None:
        self._ctx.emit(QueueChanged(reason=reason))
        loop = self._ctx.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)

    def _batch_line(self, line: str) -> None:
        """A dispatcher's line (from its thread), said; the queue announced changed (it wrote through our connection)."""
        self._ctx.notice("info", line)
        self._queue_changed("batch job")

    # -- the worker ---------------------------------------------------------------------------
    async def _work_loop(self) -> None:
        ctx, work = self._ctx, self._ctx.work
        announced_pause = False
        try:
            while not self._shutting_down:
                if self.queue.paused:
                    if not announced_pause:  # a pause with its reason (a held port) keeps it for `run --status`
                        reason = ctx.work.activity == "paused" and ctx.work.detail.startswith("queue paused: ")
                        ctx.status("paused", ctx.work.detail if reason else "queue paused; resume to continue")
                        announced_pause = True
                    await self._sleep_until_woken()
                    continue
                announced_pause = False
                item = self.queue.claim_next()
                if item is None:
                    if self.stop_servers_when_drained or self._until_empty:
                        await self.stop_servers("queue drained")
                    if self._until_empty:
                        ctx.status("drained", "no pending items")
                        return
                    ctx.status("idle", "waiting for queue items")
                    await self._sleep_until_woken()
                    continue
                try:
                    await self._items.work_item(item)
                except RunSpilled as exc:
                    work.fatal = f"the store cannot take results, the queue stops: {exc}"
                    ctx.notice("error", work.fatal)
                    return
                except asyncio.CancelledError:
                    self._record_cancelled("interrupted: the controller was stopped during this item")
                    raise
                except Exception as exc:  # a bug in one item must not take the queue down
                    detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                    ctx.notice("error", f"item #{item.id} crashed the controller step: {detail}")
                    if work.current is not None:
                        ctx.finish_item(work.current, "failed", f"internal error: {detail}")
                    if work.fatal:
                        return
                finally:
                    work.clear_item()
                    release_memory()  # RSS flat over a long campaign (benches/runner_memory.py)
        except StoreError as exc:  # claiming or closing items failed: the queue cannot go on
            work.fatal = work.fatal or f"the store cannot be written, the queue stops: {exc}"
            ctx.notice("error", work.fatal)
        except Exception as exc:  # a bug outside any one item: stop and say so (the runner exits 1)
            work.fatal = f"the worker crashed: {''.join(traceback.format_exception_only(type(exc), exc)).strip()}"
            ctx.notice("error", work.fatal)
        finally:
            if work.fatal:
                ctx.status("failed", work.fatal)
            elif work.activity not in ("drained", "stopping", "stopped"):
                ctx.status("idle", "worker stopped")

    async def _sleep_until_woken(self) -> None:
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=EXTERNAL_POLL_S * 2)
        except TimeoutError:
            pass

    def _record_cancelled(self, reason: str) -> None:
        work = self._ctx.work
        if work.current_run_id is not None:
            try:
                self.store.finish_run(work.current_run_id, status="incomplete", flags=["incomplete"], error=reason)
            except Exception:
                pass  # the next start's recovery marks it incomplete anyway
        if work.current is not None:
            self._ctx.finish_item(work.current, "interrupted", reason)

    # -- control ------------------------------------------------------------------------------
    def pause(self) -> PausedJson:
        self.queue.pause()
        return {"paused": True}

    def resume(self) -> PausedJson:
        self.queue.resume()
        return {"paused": False}

    def skip_current(self) -> ItemStateJson:
        """Stop the running benchmark; the item becomes `skipped` (retry brings it back)."""
        return self._ops.skip_current()

    def cancel_current(self) -> ItemStateJson:
        return self._ops.cancel_current()

    # -- servers ------------------------------------------------------------------------------
    def profile_names(self) -> list[str]:
        return [p.name for p in self._ctx.profiles().profiles]

    async def start_server(self, name: str) -> ManagedServerJson:
        """Start one profile's server by hand (refused while the queue is using the servers)."""
        current = self._ctx.work.current
        if current is not None:
            raise ControllerError(f"item #{current.id} is running: pause the queue and wait, "
                                  "or skip it, before starting servers by hand")
        try:
            profile = self._ctx.profiles().by_name(name)
        except KeyError as exc:
            raise ControllerError(exc.args[0]) from None
        server = await self.servers.start(profile, wait=True)
        return server.describe()

    async def stop_server(self, name: str) -> ServerStoppedJson:
        server = self.servers.get(name)
        if server is None:
            raise ControllerError(f"no managed server named '{name}'")
        current = self._ctx.work.current
        if current is not None and current.profile_name == name:
            self._ctx.abort_current("interrupted", f"interrupted: server '{name}' stopped by user")
        report = await server.stop("stopped by user")
        return {"profile": name, "state": server.state, "stop": report.describe() if report else None}

    async def stop_servers(self, reason: str = "stopped by user") -> list[ServerStoppedJson]:
        out: list[ServerStoppedJson] = []
        for server in list(self.servers.servers.values()):
            if server.is_live:
                report = await server.stop(reason)
                out.append(ServerStoppedJson(profile=server.name, stop=report.describe() if report else None))
        return out

    async def run_gate_now(self, name: str) -> GateRanJson:
        """The correctness gate on demand against a profile's ready server (op "gate")."""
        return await self._items.run_gate_now(name)

    # -- state --------------------------------------------------------------------------------
    def snapshot(self) -> RunnerStatusJson:
        """JSON-able state: activity, servers, queue summary, current item and run, last
        progress and last finished run, and this session's item counts."""
        work = self._ctx.work
        return {
            "pid": os.getpid(),
            "data_dir": str(self.data_dir),
            "activity": work.activity,
            "detail": work.detail,
            "working": self._worker is not None and not self._worker.done(),
            "servers": [s.describe() for s in self.servers.servers.values()],
            "queue": self.queue.summary(),
            "current_item": work.current.to_dict() if work.current else None,
            "current_run_id": work.current_run_id,
            "last_progress": work.last_progress.to_dict() if work.last_progress else None,
            "last_finished": work.last_finished.to_dict() if work.last_finished else None,
            "session": dict(work.session),
            "telemetry": self._telemetry.last,  # the latest GPU snapshot (a TUI attaching late draws it)
        }

    def snapshot_session(self) -> dict[str, int]:
        """This session's item counts by state (no store read)."""
        return dict(self._ctx.work.session)

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
