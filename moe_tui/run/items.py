"""One queue item's work: `ItemRunner`, a part of `moe_tui.run.controller.Controller` made with the
controller's `moe_tui.run.context.RunContext` (the item, its run and an abort asked live there).

For an item: its profile read fresh, exactly its server ready (others stopped), an optional
warmup pass at its concurrency, the timed run out of process with GPU telemetry, and the run
stored with its item closed (`moe_tui.run.recording`). The benchmark functions it runs (`default_bench`:
moe-tui's client in the item's client process, or sglang.bench_serving) live in `moe_tui.run.benchmarks`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

from moe_tui.disturbance import HEALTH_PROBES_IN_FLIGHT, ServerLoadWatch, client_cap
from moe_tui.events import BenchProgress, RunFinished, RunStarted
from moe_tui.profiles import ServerProfile, load_profiles
from moe_tui.provenance import build_provenance
from moe_tui.records import ClientLimitsJson, FreeForm, GateRanJson, Options, QueueFactsJson, WarmupPassJson
from moe_tui.run.benchmarks import default_bench, spec_as_run, tokenizer_for
from moe_tui.run.context import RunContext
from moe_tui.run.ops import Recovery
from moe_tui.run.recording import ProvenanceArgs, finished_run
from moe_tui.run.telemetry import TelemetryRelay
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.queue import QueueItem, warmup_spec

if TYPE_CHECKING:
    from moe_tui.bench.process import ClientProcess
    from moe_tui.bench.result import BenchResult
    from moe_tui.bench.zygote import Zygote
    from moe_tui.servers.base import PortInUseError
    from moe_tui.servers.managed import ManagedServer
    from moe_tui.telemetry import SnapshotCollector

# After asking a benchmark to stop, how long it may take to wind down before it is cancelled.
BENCH_STOP_GRACE_S = 15.0
LOG_TAIL_IN_ERROR = 20
HEALTH_PROBE_S, CRASH_EXIT_WAIT_S = 5.0, 10.0  # a reused server's /health; a crashed one's exit (still_serving)

# A benchmark (`default_bench`): (spec, base_url, *, on_progress, stop, run_id, [tokenizer, timeouts]) -> its result.
BenchFn = Callable[..., Coroutine[Any, Any, "BenchResult"]]
# What `open_run` gives: the spec as run, the run id, the provenance arguments it is stored with.
OpenedRun = tuple[BenchmarkSpec, int, ProvenanceArgs]


class ItemRunner:
    """The per-item steps of the controller's worker."""

    def __init__(self, ctx: RunContext, recovery: Recovery, telemetry: TelemetryRelay, bench: BenchFn, *,
                 request_timeout_s: float | None, stall_timeout_s: float | None) -> None:
        self._ctx = ctx
        self._recovery = recovery
        self._telemetry = telemetry
        self._bench = bench
        self.request_timeout_s = request_timeout_s
        self.stall_timeout_s = stall_timeout_s
        # moe-tui's client: one process per item, for its warmup pass and its timed run (moe_tui.bench.worker).
        # Each item's client is forked by one zygote that did the client's imports once, so it starts
        # without them (moe_tui.bench.zygote); made at the first such item, closed with the controller.
        self._client_per_item = bench is default_bench
        self._client: ClientProcess | None = None
        self._zygote: Zygote | None = None

    async def close(self) -> None:
        """End the clients' zygote (the controller's shutdown)."""
        zygote, self._zygote = self._zygote, None
        if zygote is not None:
            await zygote.close()

    async def work_item(self, item: QueueItem) -> None:
        if not (self._client_per_item and item.spec.client == "moe-tui"):
            await self._work_item(item)
            return
        from moe_tui.bench.process import ClientProcess
        from moe_tui.bench.zygote import Zygote

        if self._zygote is None:
            self._zygote = Zygote()
        self._client = ClientProcess(zygote=self._zygote)  # started by its first run, the server ready
        try:
            await self._work_item(item)
        finally:
            client, self._client = self._client, None
            await client.close()

    async def _work_item(self, item: QueueItem) -> None:
        ctx = self._ctx
        ctx.work.current = item
        ctx.work.abort_verdict = None
        try:
            profile = self._profile_for(item)
        except KeyError as exc:
            ctx.finish_item(item, "failed", f"profile: {exc.args[0]}")
            ctx.notice("error", f"item #{item.id}: {exc.args[0]}")
            return
        server = await self._ensure_server(item, profile)
        if server is None:
            return
        if self._abort_closed(item):
            return

        await self._gate_if_needed(item, profile, server)  # before the profile's first timed run
        warmup_info: WarmupPassJson | None = None
        if item.warmup:
            warmup_info = await self._warmup_pass(item, server)
            if self._abort_closed(item):
                return
            if warmup_info.get("status") == "failed" and server.state != "ready":
                ctx.finish_item(item, "failed", f"warmup pass failed, server {server.state}: "
                                                f"{warmup_info.get('error', '')}")
                return
        from moe_tui.explain.store import explain_definition

        if (explain := explain_definition(ctx.queue, item)) is not None:  # a profiled run (`explain`)
            from moe_tui.run.profiled import profiled_run

            await profiled_run(self, self._ctx, item, profile, server, warmup_info, explain)
            return
        await self._timed_run(item, profile, server, warmup_info)

    # -- correctness gate (the logic lives in moe_tui/gate/probe.py) -----------------------------------
    async def _gate_if_needed(self, item: QueueItem, profile: ServerProfile, server: ManagedServer) -> None:
        from moe_tui.gate.probe import gate_before_first_run

        if await gate_before_first_run(self._ctx.store, item.campaign_id, profile.name, server, self._ctx.notice):
            self._ctx.status("gate", f"{profile.name}: greedy correctness prompts stored")

    async def run_gate_now(self, name: str) -> GateRanJson:
        """The gate on demand against a profile's ready server (op "gate")."""
        from moe_tui.gate.probe import GateError, gate_server
        from moe_tui.run.ops import ControllerError

        try:
            return await gate_server(self._ctx.store, name, self._ctx.servers.get(name))
        except GateError as exc:
            raise ControllerError(str(exc)) from None

    def _profile_for(self, item: QueueItem) -> ServerProfile:
        """The item's profile, read fresh (an edited file applies from the next item on): from the
        controller's profiles, else from the folder its campaign was added with."""
        try:
            return self._ctx.profiles().by_name(item.profile_name)
        except KeyError:
            if item.campaign_id is None:
                raise
            directory = (self._ctx.queue.campaign(item.campaign_id)["definition"] or {}).get("profiles_dir")
            if not directory:
                raise
            return load_profiles(directory).by_name(item.profile_name)

    def _abort_closed(self, item: QueueItem) -> bool:
        """An abort was asked (skip, cancel, stop): the item is closed with its verdict."""
        verdict = self._ctx.work.abort_verdict
        if verdict is None:
            return False
        self._ctx.finish_item(item, *verdict)
        return True

    async def _ensure_server(self, item: QueueItem, profile: ServerProfile) -> ManagedServer | None:
        """Exactly this profile's server, ready. None (item already failed) if it cannot start."""
        ctx, servers = self._ctx, self._ctx.servers
        for other in list(servers.live()):
            if other.name != profile.name or other.profile != profile:
                ctx.status("stopping-server", f"{other.name} (next item needs {profile.name})")
                await other.stop(f"the queue needs '{profile.name}' next")
        await self._recovery.stop_stray_servers(f"the queue needs '{profile.name}'")
        current = servers.get(profile.name)
        if current is not None and current.state == "ready" and current.profile == profile:
            serving = await current.still_serving(HEALTH_PROBE_S, CRASH_EXIT_WAIT_S)
            if serving and not item.fresh_start:
                return current
            why = "asks for a fresh start" if serving else "found its server not answering /health"
            if current.is_live:  # a fresh start (an investigation's cold run), or alive but not serving
                ctx.status("stopping-server", f"{profile.name} (item #{item.id} {why})")
                await current.stop(f"item #{item.id} {why}")
        ctx.status("starting-server", profile.name)
        from moe_tui.servers.base import PortInUseError, ServerError

        starting = asyncio.ensure_future(servers.start(profile, wait=True))
        if not await self._start_or_abort(item, starting, profile):
            return None
        try:
            server = starting.result()
        except PortInUseError as exc:  # another runner's server, most likely: wait for the user
            self._pause_for_port(item, exc)
            return None
        except (TimeoutError, ServerError, OSError) as exc:
            handle = servers.get(profile.name)
            tail = handle.log_tail(LOG_TAIL_IN_ERROR) if handle is not None else []
            if handle is not None and handle.is_live:
                await handle.stop("start did not complete")
            reason = f"server '{profile.name}' failed to start: {exc}"
            error = reason + ("\n--- log tail ---\n" + "\n".join(tail) if tail else "")
            ctx.finish_item(item, "failed", error)
            skipped = ctx.queue.skip_profile(
                profile.name, f"not attempted: {reason} (item #{item.id}); retry once the profile is fixed")
            ctx.notice("error", reason + (f"; skipped {len(skipped)} other item(s) of this profile"
                                          if skipped else ""))
            return None
        if server.backend_mismatch:
            ctx.notice("warning", f"'{profile.name}': profile asks {profile.moe_runner_backend}, server "
                                  f"resolved {server.resolved_backend}; runs will be flagged backend_mismatch")
        return server

    async def _start_or_abort(self, item: QueueItem, starting: asyncio.Future[ManagedServer],
                              profile: ServerProfile) -> bool:
        """Wait for the server start unless an abort (Ctrl-C, stop, skip) comes first: then the start is
        abandoned, the half-started server stopped and the item closed with the abort's verdict at once,
        not once loading has finished (False)."""
        stop = self._ctx.work.bench_stop = asyncio.Event()  # what `abort_current` sets
        if self._ctx.work.abort_verdict is not None:
            stop.set()
        aborted: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        either: set[asyncio.Future[Any]] = {starting, aborted}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        aborted.cancel()
        if starting.done():
            return True
        handle = self._ctx.servers.get(profile.name)
        if handle is not None and handle.is_live:
            await handle.stop("the start was abandoned: " + (self._ctx.work.abort_verdict or ("", "asked"))[1])
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        if not self._abort_closed(item):
            self._ctx.finish_item(item, "interrupted", "interrupted: the server start was abandoned")
        return False

    def _pause_for_port(self, item: QueueItem, exc: PortInUseError) -> None:
        """The port is held: nothing is wrong with the profile, so nothing fails or is skipped. The item
        goes back to pending, the queue pauses, and the notice names the holder's data dir (a moe-tui
        runner's child carries it) and the command that stops that runner."""
        from moe_tui.run.orphans import runner_dir_of, stop_command

        ctx = self._ctx
        holder = runner_dir_of(exc.holder_pid)
        if holder is not None:
            why = (f"{exc}: the runner of data dir {holder} holds it; stop that runner "
                   f"(`{stop_command(holder)}`) or wait for it, then resume the queue")
        else:
            why = f"{exc}; stop it or change the profile's port, then resume the queue"
        ctx.queue.finish(item.id, "interrupted", error=why)
        ctx.queue.retry(item.id)  # back to pending, in its place: it never started
        ctx.queue.pause()
        ctx.work.current = None
        ctx.notice("error", f"queue paused: {why}")
        ctx.status("paused", f"queue paused: {why}")  # what `run --status` and the dashboard say, not only the log

    def _server_facts(self, server: ManagedServer) -> FreeForm:
        """`ManagedServer.describe()` with SGLang's /server_info (free-form: the server's own words),
        the profile's API key blanked wherever the server echoed it."""
        facts = dict(server.describe())
        facts["server_info"] = server.server_info or {}
        if server.secrets:  # the server may echo its keys (resolved args, launch command): never store them
            import json

            from moe_tui.servers.server_key import scrub

            facts = cast(FreeForm, json.loads(scrub(json.dumps(facts, default=str), server.secrets)))
        return facts

    async def run_bench(self, spec: BenchmarkSpec, server: ManagedServer, *, run_id: int | None,
                        phase: str) -> BenchResult:
        """Run the benchmark; an abort asked (skip, cancel, stop) stops it, with a grace period."""
        stop = self._ctx.work.bench_stop = asyncio.Event()
        if self._ctx.work.abort_verdict is not None:
            stop.set()

        from moe_tui.bench.settings import DEFAULT_STALL_TIMEOUT_S
        from moe_tui.run.wedge import WedgeWatch

        wedge = WedgeWatch(self.stall_timeout_s or DEFAULT_STALL_TIMEOUT_S)

        def on_progress(event: BenchProgress) -> None:
            if wedge(event):  # health passes, generate hangs: end the item now, restart the server after
                if self._ctx.work.abort_verdict is None:
                    self._ctx.work.abort_verdict = ("failed", wedge.reason or "server wedged")
                stop.set()
            if phase != "timed":
                event = dataclasses.replace(event, phase=phase, run_id=run_id)
            self._ctx.emit(event)

        kwargs: Options = {"on_progress": on_progress, "stop": stop, "run_id": run_id}
        if self._client is not None and spec.client == "moe-tui":
            kwargs["client"] = self._client
        if spec.client != "moe-tui":
            kwargs["tokenizer"] = tokenizer_for(server.profile)
        if self.request_timeout_s is not None:
            kwargs["request_timeout"] = self.request_timeout_s
        if self.stall_timeout_s is not None:
            kwargs["stall_timeout"] = self.stall_timeout_s
        # An emulator runs the cell at its cell's time scale (slower at a concurrency the client
        # cannot keep up with: moe_tui.run.sim_clock), set before every benchmark of the cell.
        from moe_tui.run.sim_clock import set_cell_clock

        scale = await set_cell_clock(server, spec.max_concurrency) or 1.0
        if spec.client == "moe-tui" and scale != 1.0:
            # bench_serving's 1 s pause after the flush, in the server's time: an emulator whose clock
            # runs k times faster gets 1/k s (its runs are as long as k times longer ones of a real server).
            from moe_tui.bench.settings import WARMUP_PAUSE_S

            kwargs["warmup_pause"] = WARMUP_PAUSE_S / scale
        task = asyncio.create_task(self._bench(spec, server.base_url, **kwargs))
        stop_wait = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():  # asked to stop: give it a grace period to end by itself
                try:
                    await asyncio.wait_for(asyncio.shield(task), BENCH_STOP_GRACE_S)
                except TimeoutError:
                    task.cancel()
            return await task
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            stop_wait.cancel()
            if wedge.reason is not None:
                self._ctx.notice("error", f"'{server.name}': {wedge.reason}; stopping it, the next item starts it fresh")
                await server.stop(wedge.reason)

    def client_limits(self, spec: BenchmarkSpec) -> ClientLimitsJson:
        """The per-request limits this controller asked for (None: the client's defaults; the
        run's selfcheck holds the values in force). Only moe-tui's client takes them."""
        if spec.client != "moe-tui":
            return {}
        return {"request_timeout_s": self.request_timeout_s, "stall_timeout_s": self.stall_timeout_s}

    async def _warmup_pass(self, item: QueueItem, server: ManagedServer) -> WarmupPassJson:
        try:
            spec = spec_as_run(warmup_spec(item.spec))
        except ValueError as exc:
            return {"status": "failed", "error": str(exc)}
        self._ctx.status("warmup", f"#{item.id} {item.profile_name} conc={spec.max_concurrency} n={spec.num_prompts}")
        started = time.time()
        try:
            result = await self.run_bench(spec, server, run_id=None, phase="warmup-pass")
        except Exception as exc:
            return {"status": "failed", "error": f"{type(exc).__name__}: {exc}", "fingerprint": spec.fingerprint}
        completed = sum(1 for r in result.requests if r.get("ok"))
        return {
            "status": result.status, "fingerprint": spec.fingerprint, "num_prompts": spec.num_prompts,
            "seed": spec.seed, "completed": completed, "error": result.error,
            "duration_s": round(time.time() - started, 3), "rule": "results discarded",
        }

    def open_run(self, item: QueueItem, profile: ServerProfile, server: ManagedServer,
                 warmup_info: WarmupPassJson | None) -> OpenedRun | None:
        """The run row for `item` on `server` (spec as run, provenance, attached to the item):
        (spec, run id, the provenance arguments the finished run is stored with), or None when the
        spec cannot be run (the item is failed). Timed and profiled runs open theirs alike."""
        try:
            spec = spec_as_run(item.spec)
        except ValueError as exc:
            self._ctx.finish_item(item, "failed", f"spec cannot be run by this client: {exc}")
            return None
        started = time.time()
        from moe_tui.run.sim_clock import cell_clock

        snapshot = profile.snapshot()
        clock = cell_clock(snapshot, spec.max_concurrency)  # a slowed cell's clock: the run's, not the launch's
        server_facts = self._server_facts(server)
        # The item keeps the spec as asked; the run is stored under the spec as run (client
        # version filled in), the fingerprint every other moe-tui run of it carries too.
        queue_facts: QueueFactsJson = {"id": item.id, "campaign_id": item.campaign_id, "repeat_index": item.repeat_index,
                       "attempt": item.attempts, "requested_fingerprint": item.fingerprint}
        provenance = build_provenance(spec=spec, profile=snapshot, server=server_facts, queue_item=queue_facts,
                                      bench_client=self.client_limits(spec), warmup=warmup_info, started_at=started,
                                      sim_clock=clock)
        run_id = self._ctx.store.create_run(
            profile_name=profile.name, spec_json=spec.canonical_json(), fingerprint=spec.fingerprint,
            client=spec.client, profile=snapshot, provenance=provenance, queue_item_id=item.id,
            server_start_id=server.start_id,
        )
        self._ctx.work.current_run_id = run_id
        self._ctx.queue.attach_run(item.id, run_id)
        return spec, run_id, ProvenanceArgs(spec=spec, profile=snapshot, server=server_facts, queue_item=queue_facts,
                                            warmup=warmup_info, started_at=started, sim_clock=clock)

    async def _timed_run(self, item: QueueItem, profile: ServerProfile, server: ManagedServer,
                         warmup_info: WarmupPassJson | None) -> None:
        ctx = self._ctx
        opened = self.open_run(item, profile, server, warmup_info)
        if opened is None:
            return
        spec, run_id, provenance_args = opened
        ctx.emit(RunStarted(run_id=run_id, queue_item_id=item.id, profile=profile.name,
                              fingerprint=spec.fingerprint, spec_summary=spec.describe()))
        ctx.status("benchmarking", f"#{item.id} {profile.name} conc={spec.max_concurrency} "
                                     f"n={spec.num_prompts} run {run_id}")

        # The server's own running + queued count during the run: more than this client's cap is
        # someone else's load (moe_tui.disturbance).
        # The runner's own health probe is a generate request (SGLang 0.5.23's /health makes one token):
        # at concurrency 1024, where it waits a step in the queue, it sat in the server's count half the
        # time (foreign_load on every run), so the cap counts it. It keeps probing during the run: a
        # server that stops answering (a full disk broke the emulator mid-run) fails within seconds,
        # not at the stall timeout.
        load_watch = ServerLoadWatch(profile.name, client_cap(spec.max_concurrency, spec.num_prompts),
                                     allowance=HEALTH_PROBES_IN_FLIGHT)
        unsub_load = server.subscribe(load_watch)
        collector: SnapshotCollector | None = None
        unsub: Callable[[], None] | None = None
        our_pids: set[int] | None = None
        if self._telemetry.sampler is not None:
            from moe_tui.telemetry import SnapshotCollector, expand_descendants

            collector = SnapshotCollector()
            unsub = self._telemetry.sampler.subscribe(collector)
            our_pids = expand_descendants([server.pid]) if server.pid else set()
        result: BenchResult | None = None
        bench_error: str | None = None
        try:
            result = await self.run_bench(spec, server, run_id=run_id, phase="timed")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            result, bench_error = None, f"benchmark could not run: {type(exc).__name__}: {exc}"
        finally:
            if unsub is not None:
                unsub()
            unsub_load()
        telemetry_summary = None
        if collector is not None:
            from moe_tui.telemetry import summarize_run

            telemetry_summary = summarize_run(collector.snapshots, our_pids)
        record = finished_run(
            run_id=run_id, item=item, spec=spec, server=server, result=result, bench_error=bench_error,
            provenance_args=provenance_args, client_limits=self.client_limits(spec), telemetry_summary=telemetry_summary,
            gpu_snapshots=collector.snapshots if collector else [], abort_verdict=ctx.work.abort_verdict,
            server_load=load_watch.summary())
        status, summary, flags, error = (record.status, record.finish["summary"], record.finish["flags"],
                                         record.finish["error"])
        # Run and item in one transaction; RunSpilled (the store cannot take it) ends the worker.
        if not ctx.recorder.store_run(record):
            ctx.notice("warning", f"item #{item.id}: run {run_id} stored, but the item was changed "
                                  f"behind the runner's back and not marked {record.item_state}")
        ctx.count(record.item_state)
        ctx.work.current = None
        finished_event = RunFinished(
            run_id=run_id, queue_item_id=item.id, profile=profile.name, status=status,
            output_throughput=summary.get("output_throughput"), flags=tuple(flags), error=error,
        )
        ctx.work.last_finished = finished_event
        ctx.emit(finished_event)
        await self._recovery.backup_if_due()  # a safe point: the run and its item are stored together
