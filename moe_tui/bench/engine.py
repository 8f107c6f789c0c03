"""The native load generator: `run_benchmark(spec, base_url)` -> `BenchResult`, in this process.

Phases, as sglang.bench_serving 0.5.23 runs them:
1. warmup: `warmup_requests` copies of request 0 with at most 32 output tokens, under the same
   concurrency cap; excluded from results. If every warmup request fails the run is "failed".
2. optional `POST /flush_cache?timeout=60`, then a 1 s pause (bench_serving's; `warmup_pause_s`).
   Then the connection pool is opened to min(concurrency, prompts) connections
   (`transport.open_connections`: concurrent GET /v1/models), so the timed phase measures the
   server and not TCP setup; not part of the spec (it changes no server work), recorded in the
   self-check (`connections_preopen_*`, and `connections_opened_timed`: what the timed phase
   still had to open). Done last, just before the timed phase: SGLang's uvicorn closes
   connections idle for 5 s (`timeout_keep_alive=5`), so with spread arrivals some idle ones may
   be closed and reopened on demand anyway, which that count shows.
3. timed phase: requests released at their arrival times (all at once for rate inf), each waits
   for a slot of the concurrency cap (an asyncio semaphore), then streams. Duration = from the
   start of this phase until every request ended and the arrival process finished.
Records of the timed phase go through `moe_tui.metrics.calculate_metrics`.

Status: "complete" (every timed request succeeded), "incomplete" (some failed or the run was
stopped: partial results kept, never shown as clean), "failed" (nothing completed, warmup failed,
or the server was unreachable). After `ABORT_AFTER_CONNECT_ERRORS` consecutive connection failures
with nothing succeeding in between the server is taken as gone and the remaining requests are
marked "aborted" instead of being sent.

Server stalls (`moe_tui.bench.stall`): a stretch with requests in flight and no token on any
stream longer than `judgement.stall_threshold_s(median ITL)` flags the run `server_stall`; the
self-check keeps the longest one's start and length (`server_stall`) and the threshold used.

Per-request limits: `request_timeout` (whole request, `default_request_timeout`) and
`stall_timeout` (silence, default `settings.DEFAULT_STALL_TIMEOUT_S` = 120 s); both are in the
self-check as `request_timeout_s` / `stall_timeout_s`.

`BenchResult`, the request records and `native_spec` live in `moe_tui.bench.result` (re-exported).
Use `run_benchmark_subprocess` or `ClientProcess` (moe_tui.bench.process) from a UI: they run this
in a process of its own.
"""

from __future__ import annotations

import asyncio
import math
import os
import resource
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp

from moe_tui.bench.cancel import until_stopped
from moe_tui.bench.client import DEFAULT_STALL_TIMEOUT_S, RequestOutcome, build_payload, stream_request
from moe_tui.bench.live import LiveStats, LoopLagProbe, QuietGc, SelfCheck, attach_advice, judge_client, lag_limit_ms
from moe_tui.bench.progress import ProgressCallback, emit
from moe_tui.bench.result import CLIENT_NAME as CLIENT_NAME  # re-exported: callers import them from here
from moe_tui.bench.result import BenchResult as BenchResult
from moe_tui.bench.result import client_version, outcome_record
from moe_tui.bench.result import native_spec as native_spec
from moe_tui.bench.settings import API_KEY_ENV, WARMUP_PAUSE_S
from moe_tui.bench.stall import stall_check
from moe_tui.bench.transport import connections_opened, open_connections, open_session
from moe_tui.bench.workload import WorkItem, Workload, WorkloadError, build_workload, resolve_vocab_size
from moe_tui.events import BenchProgress
from moe_tui.judgement import FLAG_SERVER_STALL
from moe_tui.metrics import calculate_metrics
from moe_tui.spec import BenchmarkSpec, SpecError, check_feasible

if TYPE_CHECKING:
    from moe_tui.export.records import BenchRequestJson

ABORT_AFTER_CONNECT_ERRORS = 10
FLUSH_CACHE_TIMEOUT_S = 60.0  # bench_serving's default --flush-cache timeout
PROGRESS_INTERVAL_S = 0.25
CONTROL_TIMEOUT = aiohttp.ClientTimeout(total=10.0)
# What a control call (/model_info, /v1/models, /flush_cache, /server_info) may raise.
HTTP_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


def default_request_timeout(spec: BenchmarkSpec) -> float:
    """Generous per-request limit: 600 s, or 50 ms per prompt+output token if that is longer."""
    return max(600.0, 0.05 * (spec.input_len + spec.output_len))


async def run_benchmark(
    spec: BenchmarkSpec,
    base_url: str,
    *,
    on_progress: ProgressCallback | None = None,
    request_timeout: float | None = None,
    stall_timeout: float | None = None,
    vocab_size: int | None = None,
    tokenizer: str | None = None,
    run_id: int | None = None,
    stop: asyncio.Event | None = None,
    warmup_pause_s: float = WARMUP_PAUSE_S,
    progress_interval_s: float = PROGRESS_INTERVAL_S,
    preopen_connections: bool = True,
) -> BenchResult:
    """Run `spec` against the server at `base_url` in this event loop. Never raises for server
    trouble: that becomes the result's status and error. `stop` ends the run early (incomplete).
    Raises SpecError if the spec is not for this client (see `native_spec`)."""
    base_url = base_url.rstrip("/")
    spec = native_spec(spec)
    result = BenchResult(status="failed", spec=spec.canonical_dict(), fingerprint=spec.fingerprint,
                         client_version=client_version(), started_at=time.time())
    timeout = request_timeout or default_request_timeout(spec)
    stall = stall_timeout or DEFAULT_STALL_TIMEOUT_S
    slots = spec.max_concurrency
    url = f"{base_url}/generate" if spec.api == "generate" else f"{base_url}/v1/completions"
    stop = stop or asyncio.Event()
    live = LiveStats(spec.warmup_requests, "warmup")
    probe = LoopLagProbe()
    probe.start()

    async def reporter() -> None:
        while True:
            await asyncio.sleep(progress_interval_s)
            await emit(on_progress, BenchProgress(run_id=run_id, **live.snapshot(probe.recent_ms())))

    reporter_task = asyncio.create_task(reporter()) if on_progress is not None else None
    async with open_session(slots, os.environ.get(API_KEY_ENV) or None) as session:
        try:
            limits = _Limits(slots, timeout, stall, warmup_pause_s, preopen_connections)
            await _Run(spec, base_url, url, session, result, live, probe, limits, stop).run(vocab_size, tokenizer)
        finally:
            if reporter_task is not None:
                reporter_task.cancel()
                try:
                    await reporter_task
                except asyncio.CancelledError:
                    pass
            await probe.stop()
        if on_progress is not None:
            await emit(on_progress, BenchProgress(run_id=run_id, **live.snapshot(probe.recent_ms())))
        try:
            async with session.get(f"{base_url}/server_info", timeout=CONTROL_TIMEOUT) as response:
                if response.status == 200:
                    result.server_info = await response.json(content_type=None)
        except (*HTTP_ERRORS, ValueError):
            pass
    attach_advice(result.selfcheck, result.spec.get("max_concurrency"), result.server_info)
    result.finished_at = time.time()
    return result


@dataclass
class _Limits:
    """What one run may do: the concurrency cap and the per-request time limits."""

    slots: int
    timeout: float
    stall: float
    warmup_pause_s: float
    preopen: bool


class _Run:
    """One benchmark's phases (workload, warmup, flush + pre-open, timed, self-check, status),
    each a small method over the state they share."""

    def __init__(self, spec: BenchmarkSpec, base_url: str, url: str, session: aiohttp.ClientSession,
                 result: BenchResult, live: LiveStats, probe: LoopLagProbe, limits: _Limits,
                 stop: asyncio.Event):
        self.spec, self.base_url, self.url, self.session = spec, base_url, url, session
        self.result, self.live, self.probe, self.limits, self.stop = result, live, probe, limits, stop
        # The concurrency cap, as bench_serving's asyncio.Semaphore (FIFO: waiters are woken in order).
        self.cap = asyncio.Semaphore(limits.slots)
        self.model: str | None = None
        self.consecutive_connect = 0
        self.aborted = False
        self.in_flight_peak = 0

    def _fail(self, kind: str, error: str) -> None:
        self.result.error = error
        self.result.errors_by_kind = {kind: 1}

    async def run(self, vocab_size: int | None, tokenizer: str | None) -> None:
        # Every step before the timed phase ends at once on stop (SIGTERM during a warmup request).
        workload, stopped = await until_stopped(self.stop, self.prepare(vocab_size, tokenizer))
        if stopped:
            self._fail("cancelled", "stopped before the timed phase (setup or warmup): nothing measured")
        elif workload is not None:
            await self.timed(workload)

    async def prepare(self, vocab_size: int | None, tokenizer: str | None) -> Workload | None:
        workload = await self.workload(vocab_size, tokenizer)
        if workload is None:
            return None
        await self.resolve_model()
        if not await self.warmup(workload) or not await self.flush_cache():
            return None
        if self.limits.warmup_pause_s > 0:
            await asyncio.sleep(self.limits.warmup_pause_s)
        if self.limits.preopen and not self.stop.is_set():
            self.result.selfcheck.update(await open_connections(
                self.session, self.base_url, min(self.limits.slots, self.spec.num_prompts)))
        return workload

    async def workload(self, vocab_size: int | None, tokenizer: str | None) -> Workload | None:
        try:
            check_feasible(self.spec)  # before a single prompt is made
        except SpecError as exc:
            self._fail("setup", str(exc))
            return None
        vocab_size = vocab_size or self.spec.vocab_size or None  # the spec's, when it names one
        tokenizer = tokenizer or self.spec.tokenizer or None
        try:
            if vocab_size is None:
                vocab_size, vocab_source = await resolve_vocab_size(self.session, self.base_url, tokenizer)
            else:
                vocab_source = "given"
            workload = build_workload(self.spec, vocab_size)
        except WorkloadError as exc:
            self._fail("setup", str(exc))
            return None
        except HTTP_ERRORS as exc:
            self._fail("connect", f"server unreachable at {self.base_url}: {type(exc).__name__}: {exc}")
            return None
        self.result.selfcheck.update(vocab_size=vocab_size, vocab_source=vocab_source, request_timeout_s=self.limits.timeout,
                                     stall_timeout_s=self.limits.stall, warmup_pause_s=self.limits.warmup_pause_s)
        return workload

    async def resolve_model(self) -> None:
        if self.spec.api != "completions":
            return
        try:
            async with self.session.get(f"{self.base_url}/v1/models", timeout=CONTROL_TIMEOUT) as response:
                self.model = ((await response.json(content_type=None)).get("data") or [{}])[0].get("id")
        except (*HTTP_ERRORS, ValueError, AttributeError, IndexError):
            self.model = None

    async def one(self, item: WorkItem, outcome: RequestOutcome) -> RequestOutcome:
        """One request: wait for a slot, stream it, count connection failures in a row."""
        await self.cap.acquire()
        try:
            if self.aborted or self.stop.is_set():
                outcome.fail("aborted" if self.aborted else "cancelled",
                             "not sent: " + ("server unreachable" if self.aborted else "run stopped"))
                return outcome
            payload = build_payload(self.spec.api, item.input_ids(), item.output_len,
                                    temperature=self.spec.temperature, ignore_eos=self.spec.ignore_eos,
                                    model=self.model)
            self.live.in_flight += 1
            self.in_flight_peak = max(self.in_flight_peak, self.live.in_flight)
            await stream_request(self.session, self.url, self.spec.api, payload, outcome,
                                 timeout_s=self.limits.timeout, stall_timeout_s=self.limits.stall,
                                 on_tokens=self.live.on_tokens)
            self.live.on_done(outcome.ok, outcome.ttft, outcome.chunks)
        finally:
            self.cap.release()
        if outcome.error_kind == "connect":
            self.consecutive_connect += 1
            if self.consecutive_connect >= ABORT_AFTER_CONNECT_ERRORS:
                self.aborted = True
        elif outcome.ok:
            self.consecutive_connect = 0
        return outcome

    async def warmup(self, workload: Workload) -> bool:
        if self.spec.warmup_requests <= 0:
            return True
        w = workload.warmup_item()
        warm = [RequestOutcome(w.idx, w.prompt_len, w.output_len, phase="warmup")
                for _ in range(self.spec.warmup_requests)]
        await asyncio.gather(*(self.one(w, o) for o in warm))
        if not any(o.ok for o in warm):
            first = warm[0]
            kind = first.error_kind or "warmup"
            self.result.errors_by_kind = {kind: len(warm)}
            self.result.error = f"warmup failed ({len(warm)} of {len(warm)} requests): {first.error}"
            if kind == "connect":
                self.result.error = f"server unreachable at {self.base_url}: {first.error}"
            return False
        self.consecutive_connect = 0
        return True

    async def flush_cache(self) -> bool:
        if not self.spec.flush_cache:
            return True
        try:
            async with self.session.post(f"{self.base_url}/flush_cache",
                                         params={"timeout": str(FLUSH_CACHE_TIMEOUT_S)},
                                         timeout=aiohttp.ClientTimeout(total=FLUSH_CACHE_TIMEOUT_S + 10)) as response:
                if response.status != 200:
                    text = (await response.read()).decode("utf-8", "replace")
                    self._fail("flush_cache", f"POST /flush_cache answered HTTP {response.status}: {text[:200]}")
                    return False
        except HTTP_ERRORS as exc:
            self._fail("flush_cache", f"POST /flush_cache failed: {type(exc).__name__}: {exc}")
            return False
        return True

    async def _pause(self, until: float) -> None:
        """Sleep until perf time `until` unless the run is stopped first."""
        delay = until - time.perf_counter()
        if delay > 0:
            try:
                await asyncio.wait_for(self.stop.wait(), delay)
            except TimeoutError:
                pass

    async def dispatch(self, workload: Workload, outcomes: list[RequestOutcome], t0: float) -> list[asyncio.Task[RequestOutcome]]:
        """Release requests at their arrival times (all at once for rate inf)."""
        tasks: list[asyncio.Task[RequestOutcome]] = []
        finite_rate = not math.isinf(self.spec.request_rate)
        for item, outcome, arrival in zip(workload.items, outcomes, workload.arrivals):
            due = t0 + arrival
            if finite_rate:
                await self._pause(due)
            if self.stop.is_set() or self.aborted:
                break
            outcome.scheduled_at = due
            outcome.dispatched_at = time.perf_counter()
            tasks.append(asyncio.create_task(self.one(item, outcome)))
        if finite_rate and not (self.stop.is_set() or self.aborted):
            await self._pause(t0 + workload.tail_s)  # bench_serving sleeps the gap after the last one too
        return tasks

    async def wait_all(self, tasks: list[asyncio.Task[RequestOutcome]]) -> bool:
        """Until every request ended, or the run is stopped (then the rest are cancelled). Returns
        whether it was stopped."""
        if not tasks:
            return False
        pending: set[asyncio.Task[object]] = set(tasks)  # the requests, then with the stop event
        stop_wait = asyncio.create_task(self.stop.wait())
        try:
            while pending:
                done, pending = await asyncio.wait(pending | {stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if stop_wait in done:
                    for task in pending:
                        task.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
                    return True
                pending.discard(stop_wait)
        finally:
            stop_wait.cancel()
        return False

    async def timed(self, workload: Workload) -> None:
        self.live.reset(self.spec.num_prompts, "timed")
        lag_mark = self.probe.mark()
        cpu_before = resource.getrusage(resource.RUSAGE_SELF)
        opened_before = connections_opened(self.session)
        outcomes = [RequestOutcome(it.idx, it.prompt_len, it.output_len) for it in workload.items]
        wall_anchor, t0 = time.time(), time.perf_counter()
        tasks: list[asyncio.Task[RequestOutcome]] = []
        with QuietGc() as quiet:  # no collector pause inside the timed phase (moe_tui.bench.live)
            try:
                tasks = await self.dispatch(workload, outcomes, t0)
                stopped = self.stop.is_set()  # stopped while releasing requests
                stopped = await self.wait_all(tasks) or stopped
            except asyncio.CancelledError:
                for task in tasks:
                    task.cancel()
                raise
            duration = time.perf_counter() - t0
        self.result.selfcheck.update(quiet.summary())
        cpu_after = resource.getrusage(resource.RUSAGE_SELF)
        if opened_before is not None and (opened_after := connections_opened(self.session)) is not None:
            self.result.selfcheck["connections_opened_timed"] = opened_after - opened_before
        for outcome, task in zip(outcomes, tasks):
            if task.cancelled():
                outcome.fail("cancelled", "run stopped before this request finished")
        for outcome in outcomes[len(tasks):]:
            outcome.fail("aborted" if self.aborted else "cancelled",
                         "not sent: " + ("server unreachable" if self.aborted else "run stopped"))
        records = [outcome_record(o, wall_anchor, t0) for o in outcomes]
        self.result.requests = records
        self.result.summary = calculate_metrics(records, duration)
        self.result.errors_by_kind = dict(sorted(Counter(o.error_kind for o in outcomes if not o.ok).items()))
        cpu_s = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
        self.selfcheck(outcomes, records, lag_mark, cpu_s, duration)
        self.result.selfcheck.update(stall_check(outcomes, self.result.summary.get("median_itl_ms"),
                                                 wall_anchor, t0, duration))
        if self.result.selfcheck["server_stall"]:
            self.result.flags.append(FLAG_SERVER_STALL)
        self.status(outcomes, stopped)

    def selfcheck(self, outcomes: list[RequestOutcome], records: list[BenchRequestJson], lag_mark: int,
                  cpu_s: float, duration: float) -> None:
        finite_rate = not math.isinf(self.spec.request_rate)
        check: SelfCheck = dict(self.result.selfcheck)
        check.update(self.probe.summary(lag_mark, lag_limit_ms(self.result.summary.get("median_itl_ms"))))
        check.update(
            client_cpu_s=cpu_s, client_cpu_fraction=cpu_s / duration if duration > 0 else None,
            max_concurrency=self.spec.max_concurrency, peak_in_flight=self.in_flight_peak,
            achieved_concurrency=self.result.summary["concurrency"],
            requested_rate=None if not finite_rate else self.spec.request_rate,
        )
        dispatched = [(o.scheduled_at, o.dispatched_at) for o in outcomes if o.scheduled_at is not None and o.dispatched_at is not None]
        if finite_rate and dispatched:
            lags = sorted((sent - due) * 1000 for due, sent in dispatched)
            check["dispatch_lag_p99_ms"] = lags[min(len(lags) - 1, int(0.99 * len(lags)))]
            check["dispatch_lag_max_ms"] = lags[-1]
            span = dispatched[-1][1] - dispatched[0][1]
            check["achieved_rate"] = (len(dispatched) - 1) / span if span > 0 and len(dispatched) > 1 else None
        queued = [r["queued_s"] for r in records if r["queued_s"] is not None]
        check["client_queue_wait_mean_ms"] = sum(queued) / len(queued) * 1000 if queued else None
        self.result.flags += judge_client(check)  # client_bound / client_lag_once, with their reasons
        self.result.selfcheck = check

    def status(self, outcomes: list[RequestOutcome], stopped: bool) -> None:
        result = self.result
        completed = result.summary["completed"]
        failed = len(outcomes) - completed
        if completed == 0:
            result.status = "failed"
            first = next((o for o in outcomes if o.error), None)
            result.error = ("server unreachable: " if result.errors_by_kind.get("connect") or self.aborted
                            else "no request completed: ") + (first.error if first else "")
        elif failed or stopped:
            result.status = "incomplete"
            parts = ", ".join(f"{n} {k}" for k, n in result.errors_by_kind.items())
            result.error = f"{failed} of {len(outcomes)} requests failed ({parts})"
            if self.aborted:
                result.error += "; server stopped answering, the rest were not sent"
            if stopped:
                result.error += "; run stopped early"
        else:
            result.status = "complete"
        if result.status != "complete":
            result.flags.append(result.status)
